// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The metrics endpoint (metrics::Exporter, docs/observability.md "Endpoint") over real
// sockets on 127.0.0.1, with a small Source: scrapes are answered within 2 s beside 200
// clients that send a byte a second, and beside more idle connections than the endpoint
// holds; the slow ones are hung up on at the request deadline; only GET /metrics answers
// 200; an oversized request is refused; Start's errors.
#include "metrics/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace ps {
namespace metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// How long a scrape may take beside the slow and idle clients: generous for a busy 2-core
// machine, and far below what a server with a thread per connection gives them (the
// defect: none of 4 scrapes within 5 s beside 200 slow clients).
constexpr auto kScrapeBound = 2s;

// What the test's Source serves, and lines the exposition must hold.
void TestSource(std::vector<Sample>* out) {
  out->push_back(Counter("layerps_test_requests_total", "Requests of the test", 42));
  out->push_back(Gauge("layerps_test_in_flight", "In flight in the test", 3, {{"kind", "push"}}));
}
const char* const kExpected[] = {
    "# HELP layerps_test_requests_total Requests of the test\n"
    "# TYPE layerps_test_requests_total counter\n"
    "layerps_test_requests_total 42\n",
    "# TYPE layerps_test_in_flight gauge\nlayerps_test_in_flight{kind=\"push\"} 3\n",
    // prometheus-cpp's Exposer served its own families first; they stay.
    "# TYPE exposer_scrapes_total counter\n",
};

// A port nothing listens on right now (the kernel's choice, then released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A TCP connection to 127.0.0.1:port (or -1) whose reads give up after `timeout`.
int Connect(int port, std::chrono::milliseconds timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
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

struct Reply {
  int status = 0;  // 0: no answer (refused, closed, or nothing within the read timeout)
  std::string body;
  Clock::duration took{};
};

// Sends `request` on a new connection and reads the answer (to its Content-Length, or to
// the end of the stream), waiting at most 5 s for each read.
Reply Send(int port, const std::string& request) {
  Reply r;
  const Clock::time_point start = Clock::now();
  const int fd = Connect(port, 5000ms);
  if (fd < 0) return r;
  std::string in;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[65536];
    for (;;) {
      const size_t head = in.find("\r\n\r\n");
      if (head != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        if (cl != std::string::npos && cl < head &&
            in.size() >= head + 4 + std::strtoull(in.c_str() + cl + 16, nullptr, 10)) {
          break;
        }
      }
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  r.took = Clock::now() - start;
  const size_t head = in.find("\r\n\r\n");
  if (in.rfind("HTTP/1.", 0) == 0 && head != std::string::npos && in.size() > 12) {
    r.status = std::atoi(in.c_str() + 9);
    r.body = in.substr(head + 4);
  }
  return r;
}

Reply Scrape(int port) {
  return Send(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A scrape that must be answered in time with the test's exposition.
void ExpectPromptScrape(int port, const std::string& what) {
  const Reply r = Scrape(port);
  EXPECT_EQ(r.status, 200) << what << ": no answer (" << Seconds(r.took) << " s)";
  EXPECT_LT(r.took, kScrapeBound) << what << " took " << Seconds(r.took) << " s";
  for (const char* line : kExpected) {
    EXPECT_NE(r.body.find(line), std::string::npos) << what << " lacks: " << line;
  }
}

// An endpoint on a free port of 127.0.0.1 (null and skipped when built without it).
std::unique_ptr<Exporter> StartEndpoint(int* port) {
  for (int attempt = 0;; ++attempt) {
    *port = FreePort();
    StatusOr<std::unique_ptr<Exporter>> e = Exporter::Start("127.0.0.1", *port, &TestSource);
    if (e.ok()) return std::move(*e);
    if (e.status().code() == StatusCode::kFailedPrecondition) return nullptr;
    // Another process took the port between FreePort and Start: try another.
    EXPECT_LT(attempt, 5) << e.status();
    if (attempt >= 5) return nullptr;
  }
}

#define START_ENDPOINT(exporter, port)                                                 \
  int port = 0;                                                                        \
  std::unique_ptr<Exporter> exporter = StartEndpoint(&port);                           \
  if (exporter == nullptr && !HasFailure()) {                                          \
    GTEST_SKIP() << "LayerPS was built without the metrics endpoint (prometheus-cpp, " \
                    "libmicrohttpd)";                                                  \
  }                                                                                    \
  ASSERT_NE(exporter, nullptr)

// Whether the server hung up on a client connection (end of stream or reset), without
// waiting.
bool HungUp(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Raises this process's descriptor limit to at least `want` (false when it cannot).
bool EnsureDescriptors(rlim_t want) {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return false;
  if (l.rlim_cur >= want) return true;
  if (l.rlim_max != RLIM_INFINITY && l.rlim_max < want) return false;
  l.rlim_cur = want;
  return setrlimit(RLIMIT_NOFILE, &l) == 0;
}

TEST(MetricsEndpointTest, ServesTheExposition) {
  START_ENDPOINT(exporter, port);
  EXPECT_EQ(exporter->endpoint(), "127.0.0.1:" + std::to_string(port));
  ExpectPromptScrape(port, "a scrape");
  // Scraped twice: prometheus-cpp's scrape counter counts the first.
  EXPECT_NE(Scrape(port).body.find("exposer_scrapes_total 1\n"), std::string::npos);
}

// The defect: 200 connections each sending one byte a second (a request that would take
// a minute) left no thread to 4 scrapes. Each scrape here must be answered within 2 s
// while they dribble, and every slow client is hung up on once its request deadline
// passed, instead of being held while it keeps sending.
TEST(MetricsEndpointTest, TwoHundredSlowClientsDoNotDelayScrapes) {
  START_ENDPOINT(exporter, port);
  constexpr int kSlow = 200;
  if (!EnsureDescriptors(4 * kSlow + 64)) GTEST_SKIP() << "descriptor limit too low";
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = Connect(port, 1000ms);
    ASSERT_GE(fd, 0) << "slow client " << i << " could not connect";
    slow.push_back(fd);
  }
  const Clock::time_point connected = Clock::now();
  // Each second, one more byte of a request on each connection; 8 s in all, past the
  // request deadline (a send to a connection the server hung up on just fails).
  const auto dribble_for = std::max<Clock::duration>(8s, Exporter::kRequestDeadline + 3s);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n";
  std::thread dribble([&] {
    for (size_t i = 0; Clock::now() - connected < dribble_for; ++i) {
      for (int fd : slow) send(fd, &request[i % request.size()], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(1s);
    }
  });
  std::this_thread::sleep_for(1s);  // every slow client has sent a byte or two
  for (int i = 0; i < 4; ++i) {
    ExpectPromptScrape(port, "scrape " + std::to_string(i) + " beside 200 slow clients");
    std::this_thread::sleep_for(500ms);
  }
  dribble.join();
  int held = 0;
  for (int fd : slow) {
    if (!HungUp(fd)) ++held;
    close(fd);
  }
  EXPECT_EQ(held, 0) << held << " of " << kSlow << " slow clients still held "
                     << Seconds(Clock::now() - connected) << " s after they connected";
}

// More idle connections than the endpoint holds (kMaxConnections): the oldest ones are
// closed to make room, so scrapes are still answered within 2 s.
TEST(MetricsEndpointTest, IdleConnectionsBeyondTheLimitDoNotStopScrapes) {
  START_ENDPOINT(exporter, port);
  constexpr int kExtra = 100;
  constexpr int kIdle = Exporter::kMaxConnections + kExtra;
  // The test holds both ends of every connection.
  if (!EnsureDescriptors(2 * kIdle + Exporter::kAcceptHeadroom + 64)) {
    GTEST_SKIP() << "descriptor limit (RLIMIT_NOFILE) too low for " << kIdle << " connections";
  }
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = Connect(port, 1000ms);
    ASSERT_GE(fd, 0) << "idle client " << i << " could not connect";
    idle.push_back(fd);
  }
  for (int i = 0; i < 4; ++i) {
    ExpectPromptScrape(port, "scrape " + std::to_string(i) + " beside " + std::to_string(kIdle) +
                                 " idle connections");
  }
  // The endpoint made room by hanging up on at least kExtra of them (it may have closed
  // all of them, if the scrapes took past the request deadline).
  int closed = 0;
  for (int fd : idle) {
    if (HungUp(fd)) ++closed;
    close(fd);
  }
  EXPECT_GE(closed, kExtra);
}

TEST(MetricsEndpointTest, OnlyGetMetricsAnswers200) {
  START_ENDPOINT(exporter, port);
  EXPECT_EQ(Send(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status, 404);
  EXPECT_EQ(Send(port, "GET /metricsx HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status,
            404);
  EXPECT_EQ(Send(port,
                 "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                 "Connection: close\r\n\r\n")
                .status,
            405);
  EXPECT_EQ(Send(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").status, 200);
}

// Request headers past the connection's memory are refused and the connection closed;
// the endpoint goes on serving.
TEST(MetricsEndpointTest, AnOversizedRequestIsRefused) {
  START_ENDPOINT(exporter, port);
  const std::string big(4 * Exporter::kConnectionMemory, 'a');
  const Reply r = Send(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n");
  EXPECT_TRUE(r.status == 0 || (r.status >= 400 && r.status < 500)) << r.status;
  ExpectPromptScrape(port, "a scrape after an oversized request");
}

TEST(MetricsEndpointTest, StartErrors) {
  const Source source = &TestSource;
  EXPECT_EQ(Exporter::Start("127.0.0.1", 0, source).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Exporter::Start("127.0.0.1", 65536, source).status().code(),
            StatusCode::kInvalidArgument);
  auto none = MaybeStart("127.0.0.1", 0, "worker", source);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  START_ENDPOINT(exporter, port);
  // The port in use.
  StatusOr<std::unique_ptr<Exporter>> again = MaybeStart("127.0.0.1", port, "server", source);
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable) << again.status();
  EXPECT_NE(again.status().message().find("server: "), std::string::npos) << again.status();
  EXPECT_NE(again.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << again.status();
  // An address that is not this host's (TEST-NET-1, RFC 5737).
  StatusOr<std::unique_ptr<Exporter>> bad = Exporter::Start("192.0.2.1", port, source);
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable) << bad.status();
  EXPECT_NE(bad.status().message().find("192.0.2.1:" + std::to_string(port)), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace metrics
}  // namespace ps
