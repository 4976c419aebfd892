// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Observability (docs/observability.md): every node's Prometheus endpoint, scraped over
// HTTP during a job, holds the counts of what the job did and passes `promtool check
// metrics`; a port in use fails Start; a worker's timeline is a Chrome trace of its
// requests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "ps/ps.h"
#include "worker/timeline.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::FastOptions;
using testing::LocalCluster;

// A port nothing listens on right now (the kernel's choice, then released).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A TCP connection to 127.0.0.1:port (or -1), with a receive timeout of `timeout_s`.
int ConnectTo(int port, int timeout_s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /metrics from 127.0.0.1:port; the body, or "" on failure.
std::string Scrape(int port) {
  const int fd = ConnectTo(port, 5);
  if (fd < 0) return "";
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// The value of the first series `series` (name with its labels, as exposed), or -1.
double Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::atof(line.c_str() + series.size() + 1);
  }
  return -1;
}

// promtool's verdict on an exposition ("" when it passes), or "skip" without promtool.
std::string Promtool(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) return "skip";
  char path[] = "/tmp/layerps-metrics-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "cannot write a temporary file";
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string cmd = std::string("promtool check metrics < ") + path + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    unlink(path);
    // promtool exits 0 when valid; lint warnings (help text style) are printed but do not
    // fail the check.
    return rc == 0 ? "" : "promtool failed: " + out;
  }
  unlink(path);
  return "cannot run promtool";
}

// Starts a server and a worker of a one-server, one-worker cluster (each Start returns
// once the cluster is complete, so the server's runs on a thread of its own).
::testing::AssertionResult StartBoth(Server& server, Worker& worker) {
  Status server_started;
  std::thread t([&] { server_started = server.Start(); });
  Status worker_started = worker.Start();
  t.join();
  if (!worker_started.ok()) return ::testing::AssertionFailure() << "worker: " << worker_started;
  if (!server_started.ok()) return ::testing::AssertionFailure() << "server: " << server_started;
  return ::testing::AssertionSuccess();
}

TEST(MetricsTest, EveryNodeServesItsCountsAndPromtoolAcceptsThem) {
  Options base = FastOptions();
  base.scheduler_address = "tcp://127.0.0.1:0";
  Options so = base, wo = base, sched_o = base;
  sched_o.metrics_port = FreePort();
  so.metrics_port = FreePort();
  wo.metrics_port = FreePort();
  Scheduler scheduler(sched_o);
  ASSERT_TRUE(scheduler.Start().ok());
  so.scheduler_address = wo.scheduler_address = scheduler.address();
  Server server(so);
  Worker worker(wo);
  ASSERT_TRUE(StartBoth(server, worker));

  auto dense = worker.DeclareTable(TableSpec::Dense("w", 1000));
  auto sparse = worker.DeclareTable(TableSpec::Sparse("emb", 8));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<float> g(1000, 1.0f), out(1000);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(worker.Wait(worker.Push(*dense, g.data(), g.size()), 10s).ok());
  }
  ASSERT_TRUE(worker.Wait(worker.Pull(*dense, out.data(), out.size()), 10s).ok());
  std::vector<Key> keys = {1, 2, 3};
  std::vector<float> rows(24, 1.0f);
  ASSERT_TRUE(worker.Wait(worker.PushSparse(*sparse, keys.data(), 3, rows.data(), rows.size()), 10s).ok());

  const std::string s = Scrape(so.metrics_port);
  ASSERT_FALSE(s.empty()) << "no answer from the server's metrics port";
  EXPECT_EQ(Value(s, "layerps_server_requests_total{kind=\"push\"}"), 6) << s;
  EXPECT_EQ(Value(s, "layerps_server_requests_total{kind=\"pull\"}"), 1) << s;
  EXPECT_GE(Value(s, "layerps_server_payload_bytes_total{direction=\"received\"}"), 5 * 4000 + 24 * 4);
  EXPECT_EQ(Value(s, "layerps_server_table_rows{table=\"emb\"}"), 3) << s;
  EXPECT_EQ(Value(s, "layerps_server_request_seconds_count"), 7) << s;
  EXPECT_EQ(Value(s, "layerps_server_bad_messages_total"), 0) << s;
  EXPECT_NE(s.find("layerps_peer_bytes_total{"), std::string::npos) << s;
  const std::string scheck = Promtool(s);
  EXPECT_TRUE(scheck.empty() || scheck == "skip") << scheck;

  const std::string w = Scrape(wo.metrics_port);
  ASSERT_FALSE(w.empty()) << "no answer from the worker's metrics port";
  EXPECT_EQ(Value(w, "layerps_worker_request_seconds_count{kind=\"push\"}"), 6) << w;
  EXPECT_EQ(Value(w, "layerps_worker_request_seconds_count{kind=\"pull\"}"), 1) << w;
  EXPECT_EQ(Value(w, "layerps_worker_requests_in_flight"), 0) << w;
  EXPECT_GE(Value(w, "layerps_worker_payload_bytes_total{direction=\"received\"}"), 4000) << w;
  const std::string wcheck = Promtool(w);
  EXPECT_TRUE(wcheck.empty() || wcheck == "skip") << wcheck;

  const std::string c = Scrape(sched_o.metrics_port);
  ASSERT_FALSE(c.empty()) << "no answer from the scheduler's metrics port";
  EXPECT_EQ(Value(c, "layerps_scheduler_cluster_complete"), 1) << c;
  EXPECT_EQ(Value(c, "layerps_scheduler_nodes_alive{role=\"server\"}"), 1) << c;
  EXPECT_EQ(Value(c, "layerps_scheduler_dead_nodes_total"), 0) << c;
  const std::string ccheck = Promtool(c);
  EXPECT_TRUE(ccheck.empty() || ccheck == "skip") << ccheck;
  if (ccheck == "skip") std::printf("promtool not installed: formats not checked\n");

  worker.Stop();
  EXPECT_TRUE(scheduler.Join(10s).ok());
  EXPECT_TRUE(Scrape(wo.metrics_port).empty()) << "the endpoint outlived its worker";
}

// A checkpoint reports its progress: while it runs as INFO lines, and in the server's
// metrics, where the bytes it moved equal the size of the file it wrote.
TEST(MetricsTest, ACheckpointsBytesAreInTheServersMetrics) {
  Options base = FastOptions();
  base.scheduler_address = "tcp://127.0.0.1:0";
  Options so = base, wo = base;
  so.metrics_port = FreePort();
  Scheduler scheduler(base);
  ASSERT_TRUE(scheduler.Start().ok());
  so.scheduler_address = wo.scheduler_address = scheduler.address();
  Server server(so);
  Worker worker(wo);
  ASSERT_TRUE(StartBoth(server, worker));
  const std::string before = Scrape(so.metrics_port);
  EXPECT_EQ(Value(before, "layerps_server_transfer_active{transfer=\"checkpoint\"}"), 0) << before;
  EXPECT_EQ(Value(before, "layerps_server_transfer_bytes{transfer=\"checkpoint\"}"), 0) << before;

  auto dense = worker.DeclareTable(TableSpec::Dense("w", 50000));
  auto sparse = worker.DeclareTable(TableSpec::Sparse("emb", 16));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<float> g(50000, 1.0f);
  ASSERT_TRUE(worker.Wait(worker.Push(*dense, g.data(), g.size()), 10s).ok());
  std::vector<Key> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919 + 1;
  std::vector<float> rows(keys.size() * 16, 1.0f);
  ASSERT_TRUE(worker.Wait(worker.PushSparse(*sparse, keys.data(), keys.size(), rows.data(), rows.size()), 10s).ok());
  char dir[] = "/tmp/layerps-progress-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  StatusOr<std::string> set = worker.Checkpoint(dir, 10s);
  ASSERT_TRUE(set.ok()) << set.status();
  std::ifstream file(*set + "/server-0.lpsckpt", std::ios::binary | std::ios::ate);
  ASSERT_TRUE(file.good());
  const double size = static_cast<double>(file.tellg());
  // At least the values: 50000 floats and 1000 rows of 16 floats with their ids.
  EXPECT_GT(size, 50000 * 4 + 1000 * (16 * 4 + 8));

  const std::string s = Scrape(so.metrics_port);
  EXPECT_EQ(Value(s, "layerps_server_transfer_active{transfer=\"checkpoint\"}"), 0) << s;
  EXPECT_EQ(Value(s, "layerps_server_transfer_bytes{transfer=\"checkpoint\"}"), size) << s;
  EXPECT_EQ(Value(s, "layerps_server_transfer_expected_bytes{transfer=\"checkpoint\"}"), size) << s;
  EXPECT_GT(Value(s, "layerps_server_transfer_bytes_per_second{transfer=\"checkpoint\"}"), 0) << s;
  // No backup without replication: nothing copied.
  EXPECT_EQ(Value(s, "layerps_server_transfer_bytes{transfer=\"replica_copy\"}"), 0) << s;
  EXPECT_EQ(static_cast<double>(server.stats().checkpoint_bytes_written), size);
  const std::string check = Promtool(s);
  EXPECT_TRUE(check.empty() || check == "skip") << check;
  worker.Stop();
  EXPECT_TRUE(scheduler.Join(10s).ok());
  std::system((std::string("rm -rf ") + dir).c_str());
}

TEST(MetricsTest, APortInUseFailsStart) {
  const int port = FreePort();
  Options o = FastOptions();
  o.scheduler_address = "tcp://127.0.0.1:0";
  o.metrics_port = port;
  Scheduler first(o);
  ASSERT_TRUE(first.Start().ok());
  Scheduler second(o);
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(std::to_string(port)), std::string::npos) << s;
  first.Stop();
}

// Idle clients (connected, silent) and a slow one (a byte every 200 ms) beside real
// scrapes: every scrape is answered (each waits at most 5 s; with one serving thread
// and a 30 s request timeout the first idle client blocked them all), and the endpoint
// hangs up on the idle clients instead of holding them.
TEST(MetricsTest, IdleAndSlowClientsDoNotBlindTheEndpoint) {
  Options o = FastOptions();
  o.scheduler_address = "tcp://127.0.0.1:0";
  o.metrics_port = FreePort();
  Scheduler scheduler(o);
  ASSERT_TRUE(scheduler.Start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    const int fd = ConnectTo(o.metrics_port, 30);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread slow([&] {
    const int fd = ConnectTo(o.metrics_port, 30);
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    for (size_t i = 0; fd >= 0 && i < req.size() && !stop; ++i) {
      if (write(fd, req.data() + i, 1) != 1) break;  // hung up on: done
      std::this_thread::sleep_for(200ms);
    }
    if (fd >= 0) close(fd);
  });
  std::this_thread::sleep_for(300ms);  // the idle and slow clients are in first
  for (int i = 0; i < 3; ++i) {
    const std::string body = Scrape(o.metrics_port);
    EXPECT_NE(body.find("layerps_scheduler_cluster_complete"), std::string::npos)
        << "scrape " << i << " got no answer beside idle and slow clients";
  }
  // Every idle client is hung up on (read returns 0 or fails) instead of waiting forever.
  for (int fd : idle) {
    char c;
    const ssize_t n = read(fd, &c, 1);
    EXPECT_LE(n, 0) << "an idle client got data";
    EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "an idle client was still held after 30 s";
    close(fd);
  }
  stop = true;
  slow.join();
  scheduler.Stop();
}

TEST(TimelineTest, AWorkersRequestsAreAChromeTrace) {
  char dir[] = "/tmp/layerps-timeline-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Options o = FastOptions();
  o.timeline = std::string(dir) + "/trace-%r.json";
  LocalCluster c(2, 2, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(1);
  auto t = w.DeclareTable(TableSpec::Dense("t", 100000));
  ASSERT_TRUE(t.ok());
  std::vector<float> g(100000, 1.0f), out(100000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), g.size()), 10s).ok());
  ASSERT_TRUE(w.Wait(w.PushPull(*t, g.data(), out.data(), out.size()), 10s).ok());
  const uint32_t rank = w.rank();
  EXPECT_TRUE(c.Finish().ok());

  std::ifstream in(std::string(dir) + "/trace-" + std::to_string(rank) + ".json");
  ASSERT_TRUE(in.good());
  nlohmann::json trace;
  ASSERT_NO_THROW(in >> trace);  // valid JSON: the array was closed at Stop
  ASSERT_TRUE(trace.is_array());
  int pushes = 0, pushpulls = 0, sent = 0;
  for (const auto& e : trace) {
    if (e["ph"] == "X") {
      EXPECT_EQ(e["pid"], rank);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_GE(e["args"]["answered_us"].get<double>(), e["args"]["sent_us"].get<double>());
      EXPECT_GE(e["args"]["sent_us"].get<double>(), e["args"]["queued_us"].get<double>());
      EXPECT_EQ(e["args"]["parts"], 2);  // one per server
      EXPECT_EQ(e["args"]["ok"], true);
      const std::string name = e["name"];
      // Named after the table, as a person reads it (issue 31 item 6).
      pushes += name == "push t";
      pushpulls += name == "pushpull t";
      EXPECT_EQ(e["args"]["table"], *t);
    }
    sent += e["ph"] == "i" && e["name"] == "sent";
  }
  EXPECT_EQ(pushes, 3);
  EXPECT_EQ(pushpulls, 1);
  EXPECT_EQ(sent, 4);
  // The other worker wrote its own (empty) trace, named with its rank.
  std::ifstream other(std::string(dir) + "/trace-" + std::to_string(1 - rank) + ".json");
  EXPECT_TRUE(other.good());
  std::system((std::string("rm -rf ") + dir).c_str());
}

TEST(TimelineTest, FileNames) {
  EXPECT_EQ(Timeline::FileName("t-%r.json", 3, true), "t-3.json");
  EXPECT_EQ(Timeline::FileName("/a/t.json", 3, true), "/a/t.3.json");
  EXPECT_EQ(Timeline::FileName("/a.b/t", 3, true), "/a.b/t.3");
  EXPECT_EQ(Timeline::FileName("/a/t.json", 3, false), "/a/t.json");
}

}  // namespace
}  // namespace ps
