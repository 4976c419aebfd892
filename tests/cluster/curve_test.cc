// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// CURVE (curve_key_file, transport/curve.h): a cluster with the key works over tcp and
// ipc; a node without it, or with another key, cannot join; bad key files are refused with
// the reason; and a sniffer on the loopback interface sees the pushed values and the
// token in a plaintext cluster but not in an encrypted one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "local_cluster.h"
#include "ps/cluster_key.h"
#include "transport/curve.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::FastOptions;
using testing::LocalCluster;
namespace fs = std::filesystem;

constexpr auto kWait = 60s;

std::string KeyFile(const std::string& name) {
  const std::string path =
      (fs::temp_directory_path() / ("layerps-curve-" + name + "-" + std::to_string(::getpid())))
          .string();
  fs::remove(path);
  EXPECT_TRUE(WriteClusterKeyFile(path).ok());
  return path;
}

// 16 bytes that cannot appear by chance, as 4 floats.
const char kPattern[] = "LAYERPS-SNIFFME!";
std::vector<float> PatternValues(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i += 4) std::memcpy(&v[i], kPattern, 16);
  return v;
}

// A dense sum table pushed and pulled back by every worker: exact values.
void Exercise(LocalCluster& c) {
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto t = w.DeclareTable(TableSpec::Dense("x", 4096));
    ASSERT_TRUE(t.ok()) << t.status();
    const std::vector<float> g = PatternValues(4096);
    ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), g.size()), kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<float> out(4096);
    ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), out.size()), kWait).ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], g[i] * c.options().num_workers) << i;
    auto s = w.DeclareTable(TableSpec::Sparse("s", 4));
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<Key> keys = {1, 2, 3};
    std::vector<float> rows(12, 1.0f), got(12);
    ASSERT_TRUE(w.Wait(w.PushSparse(*s, keys.data(), 3, rows.data(), 12), kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullSparse(*s, keys.data(), 3, got.data(), 12), kWait).ok());
    EXPECT_EQ(got, std::vector<float>(12, static_cast<float>(c.options().num_workers)));
  });
}

TEST(CurveTest, AvailableInThisLibzmq) { ASSERT_TRUE(CurveAvailable()); }

TEST(CurveTest, EncryptedClusterWorksOverTcpAndIpc) {
  const std::string key = KeyFile("works");
  for (const std::string transport : {"tcp", "ipc"}) {
    SCOPED_TRACE(transport);
    Options o = FastOptions();
    o.curve_key_file = key;
    LocalCluster c(2, 2, transport, o);
    ASSERT_TRUE(c.Start().ok());
    Exercise(c);
    EXPECT_TRUE(c.Finish().ok());
  }
  fs::remove(key);
}

// Under CURVE every payload frame travels as a run of 64 KiB parts and the receiver joins
// them back (chunked framing, transport/zmq_transport.cc): frames around and at whole
// multiples of a chunk, sparse rows and a peer all-reduce arrive exactly, over tcp and over
// ipc without shared memory (with it, big frames skip the socket).
TEST(CurveTest, LargeFramesTravelInChunksExactly) {
  const std::string key = KeyFile("chunks");
  constexpr size_t kChunkFloats = (64 << 10) / sizeof(float);
  for (const std::string transport : {"tcp", "ipc"}) {
    SCOPED_TRACE(transport);
    Options o = FastOptions();
    o.curve_key_file = key;
    o.shared_memory = false;
    LocalCluster c(2, 2, transport, o);
    ASSERT_TRUE(c.Start().ok());
    c.OnEveryWorker([&](int r) {
      Worker& w = c.worker(r);
      for (size_t n : {kChunkFloats - 1, kChunkFloats, kChunkFloats + 1, 6 * kChunkFloats,
                       (size_t{1} << 20) + 3}) {
        SCOPED_TRACE(n);
        auto t = w.DeclareTable(TableSpec::Dense("d" + std::to_string(n), n));
        ASSERT_TRUE(t.ok()) << t.status();
        std::vector<float> g(n);
        for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7) % 4099);
        ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), n), kWait).ok());
        ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
        std::vector<float> out(n);
        ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), n), kWait).ok());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * g[i]) << i;
        // The same tensor summed among the workers over the peer channel.
        std::vector<float> sum = g;
        ASSERT_TRUE(w.communicator().AllReduce(sum.data(), n, kWait).ok());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], 2 * g[i]) << i;
      }
      auto s = w.DeclareTable(TableSpec::Sparse("rows", 64));
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<Key> keys(3000);
      std::vector<float> rows(keys.size() * 64);
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 977 + 1;
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 97);
      ASSERT_TRUE(w.Wait(w.PushSparse(*s, keys.data(), keys.size(), rows.data(), rows.size()), kWait)
                      .ok());
      ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
      std::vector<float> got(rows.size());
      ASSERT_TRUE(
          w.Wait(w.PullSparse(*s, keys.data(), keys.size(), got.data(), got.size()), kWait).ok());
      for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(got[i], 2 * rows[i]) << i;
    });
    EXPECT_TRUE(c.Finish().ok());
  }
  fs::remove(key);
}

// The scheduler has the key; nodes without it, or with another, never get an answer.
TEST(CurveTest, NodesWithoutTheKeyCannotJoin) {
  const std::string key = KeyFile("join"), other = KeyFile("other");
  Options o = FastOptions();
  o.curve_key_file = key;
  o.num_servers = 1;
  o.num_workers = 1;
  Scheduler sched(o);
  ASSERT_TRUE(sched.Start().ok());
  for (const std::string k : {std::string(), other}) {
    SCOPED_TRACE(k.empty() ? "no key" : "another key");
    Options w = o;
    w.scheduler_address = sched.address();
    w.curve_key_file = k;
    w.connect_timeout_ms = 1500;
    Worker worker(w);
    Status s = worker.Start();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  }
  EXPECT_NE(sched.MissingNodes().find("0 of 1 workers"), std::string::npos) << sched.MissingNodes();
  sched.Stop();
  // And a keyed node does not talk to a plaintext scheduler.
  Options plain = FastOptions();
  Scheduler open_sched(plain);
  ASSERT_TRUE(open_sched.Start().ok());
  Options w = o;
  w.scheduler_address = open_sched.address();
  w.connect_timeout_ms = 1500;
  Worker worker(w);
  EXPECT_EQ(worker.Start().code(), StatusCode::kTimeout);
  open_sched.Stop();
  fs::remove(key);
  fs::remove(other);
}

// A client that knows the cluster's public key but not its secret key (it presents a key
// pair of its own) completes no handshake: the authenticator refuses its key, so nothing
// it sends reaches the scheduler. The same garbage sent with the cluster's key pair is
// received (and counted as a bad message): the refusal is the key's, not the garbage's.
TEST(CurveTest, ClientKeyOtherThanTheClustersIsRefused) {
  const std::string key = KeyFile("zap");
  StatusOr<CurveKeys> cluster = LoadCurveKeys(key);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Options o = FastOptions();
  o.curve_key_file = key;
  Scheduler sched(o);
  ASSERT_TRUE(sched.Start().ok());
  zmq::context_t ctx;
  // Sends the garbage, then calls wait() with the socket still open (closing it, with
  // linger 0, drops what the handshake has not let through yet).
  const auto send_garbage = [&](const std::string& pub, const std::string& sec,
                                const std::function<void()>& wait) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::curve_serverkey, cluster->public_z85);
    s.set(zmq::sockopt::curve_publickey, pub);
    s.set(zmq::sockopt::curve_secretkey, sec);
    s.connect(sched.address());
    for (int i = 0; i < 3; ++i) {
      zmq::message_t m(std::string(64, 'x'));
      s.send(m, zmq::send_flags::dontwait);
    }
    wait();
  };
  char pub[41] = {0}, sec[41] = {0};
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  // Nothing may arrive: a fixed wait (a slow machine can only make this pass wrongly,
  // and the positive case below shows the same path does deliver with the right key).
  send_garbage(pub, sec, [] { std::this_thread::sleep_for(1500ms); });
  EXPECT_EQ(sched.stats().bad_messages, 0u);
  // The garbage must arrive: wait for it (10 s at most) instead of for a fixed time that
  // a loaded machine's CURVE handshake may exceed.
  send_garbage(cluster->public_z85, cluster->secret_z85, [&] {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (sched.stats().bad_messages == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
  });
  EXPECT_GE(sched.stats().bad_messages, 1u);
  sched.Stop();
  fs::remove(key);
}

TEST(CurveTest, BadKeyFilesAreRefusedWithTheReason) {
  const std::string dir = (fs::temp_directory_path() / ("layerps-curve-bad-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto start = [&](const std::string& file) {
    Options o = FastOptions();
    o.curve_key_file = file;
    o.connect_timeout_ms = 1000;
    Scheduler s(o);
    return s.Start();
  };
  Status missing = start(dir + "/none");
  EXPECT_EQ(missing.code(), StatusCode::kIoError) << missing;
  const std::string open_file = dir + "/open";
  ASSERT_TRUE(WriteClusterKeyFile(open_file).ok());
  ::chmod(open_file.c_str(), 0644);
  Status readable = start(open_file);
  EXPECT_EQ(readable.code(), StatusCode::kPermissionDenied) << readable;
  EXPECT_NE(readable.message().find("chmod 600"), std::string::npos) << readable;
  const std::string bad = dir + "/bad";
  std::ofstream(bad) << "# a comment\nnot-a-key\n";
  ::chmod(bad.c_str(), 0600);
  Status malformed = start(bad);
  EXPECT_EQ(malformed.code(), StatusCode::kInvalidArgument) << malformed;
  EXPECT_NE(malformed.message().find("40 Z85 characters"), std::string::npos) << malformed;
  EXPECT_EQ(WriteClusterKeyFile(open_file).code(), StatusCode::kAlreadyExists);
  fs::remove_all(dir);
}

// Watches every packet on the loopback interface while it runs (a raw packet socket:
// needs CAP_NET_RAW) for the needles it was given. Each packet is searched as it comes
// and nothing is kept: the loopback also carries whatever else runs on the machine (CI
// runs other tests beside this one, gigabytes of them), which must neither fill a capture
// buffer before the cluster's packets come nor make the kernel drop them (the socket's
// receive buffer is raised as far as this user may).
class LoopbackSniffer {
 public:
  struct Capture {
    uint64_t bytes = 0;       // bytes seen in all
    std::vector<bool> found;  // per needle
  };
  bool Start(std::vector<std::string> needles = {}) {
    needles_ = std::move(needles);
    found_.assign(needles_.size(), false);
    fd_ = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd_ < 0) return false;
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    timeval tv{0, 100000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const int rcvbuf = 64 << 20;
    if (::setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0)
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (addr.sll_ifindex == 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      return false;
    thread_ = std::thread([this] {
      std::vector<char> buf(1 << 16);
      while (!stop_) {
        const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
        if (n <= 0) continue;
        bytes_ += static_cast<uint64_t>(n);
        const std::string_view packet(buf.data(), static_cast<size_t>(n));
        for (size_t i = 0; i < needles_.size(); ++i) {
          if (!found_[i] && packet.find(needles_[i]) != std::string_view::npos) found_[i] = true;
        }
      }
    });
    return true;
  }
  // Stops and returns what was seen.
  Capture Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return Capture{bytes_, found_};
  }
  ~LoopbackSniffer() { Stop(); }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::string> needles_;
  std::vector<bool> found_;  // the thread's until Stop joined it
  uint64_t bytes_ = 0;       // the same
};

// What a sniffer on the wire sees of a run: the pushed values and the token travel in
// clear without CURVE, and neither does with it (and the run captured traffic at all).
TEST(CurveTest, SnifferSeesNoPayloadWhenEncrypted) {
  {
    LoopbackSniffer probe;
    if (!probe.Start()) GTEST_SKIP() << "no raw packet socket here (needs CAP_NET_RAW)";
  }
  const std::string key = KeyFile("sniff");
  const std::string token = "TOKEN-sniff-3f9c2a7e51";
  for (const bool encrypted : {false, true}) {
    SCOPED_TRACE(encrypted ? "CURVE" : "plaintext");
    LoopbackSniffer sniffer;
    ASSERT_TRUE(sniffer.Start({kPattern, token}));
    {
      Options o = FastOptions();
      o.token = token;
      if (encrypted) o.curve_key_file = key;
      LocalCluster c(1, 2, "tcp", o);
      ASSERT_TRUE(c.Start().ok());
      Exercise(c);
      EXPECT_TRUE(c.Finish().ok());
    }
    const LoopbackSniffer::Capture seen = sniffer.Stop();
    ASSERT_GT(seen.bytes, uint64_t{4096 * 4}) << "the sniffer captured nothing";
    const bool values = seen.found[0];
    const bool tok = seen.found[1];
    EXPECT_EQ(values, !encrypted) << "pushed values " << (values ? "seen" : "not seen");
    EXPECT_EQ(tok, !encrypted) << "token " << (tok ? "seen" : "not seen");
  }
  fs::remove(key);
}

}  // namespace
}  // namespace ps
