// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "metrics/metrics.h"

#ifdef LAYERPS_HAVE_PROMETHEUS
#include <microhttpd.h>
#include <netdb.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/summary.h>
#include <prometheus/text_serializer.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <list>
#include <thread>
#endif

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ps {
namespace metrics {
namespace {

// Upper bounds (seconds) of Latency's buckets: 50 us .. 10 s.
constexpr std::array<double, Latency::kBounds> kBoundsS = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0, 2.5, 10.0};

#ifdef LAYERPS_HAVE_PROMETHEUS
prometheus::MetricType ToPrometheus(Type t) {
  switch (t) {
    case Type::kCounter:
      return prometheus::MetricType::Counter;
    case Type::kGauge:
      return prometheus::MetricType::Gauge;
    case Type::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

// Asks the node for its samples at every scrape and groups them into families.
class SourceCollectable : public prometheus::Collectable {
 public:
  explicit SourceCollectable(Source source) : source_(std::move(source)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<Sample> samples;
    source_(&samples);
    std::vector<prometheus::MetricFamily> families;
    std::map<std::string, size_t> index;
    for (const Sample& s : samples) {
      auto it = index.find(s.name);
      if (it == index.end()) {
        it = index.emplace(s.name, families.size()).first;
        families.push_back({s.name, s.help, ToPrometheus(s.type), {}});
      }
      prometheus::ClientMetric m;
      for (const auto& l : s.labels) m.label.push_back({l.first, l.second});
      if (s.type == Type::kCounter) m.counter.value = s.value;
      if (s.type == Type::kGauge) m.gauge.value = s.value;
      if (s.type == Type::kHistogram) {
        m.histogram.sample_count = s.count;
        m.histogram.sample_sum = s.sum;
        for (const auto& b : s.buckets) m.histogram.bucket.push_back({b.second, b.first});
        m.histogram.bucket.push_back({s.count, std::numeric_limits<double>::infinity()});
      }
      families[it->second].metric.push_back(std::move(m));
    }
    return families;
  }

 private:
  Source source_;
};
#endif  // LAYERPS_HAVE_PROMETHEUS

}  // namespace

void Latency::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds && seconds > kBoundsS[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  const double ns = seconds > 0 ? seconds * 1e9 : 0;
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void Latency::Export(const std::string& name, const std::string& help,
                     std::vector<std::pair<std::string, std::string>> labels,
                     std::vector<Sample>* out) const {
  Sample s;
  s.name = name;
  s.help = help;
  s.type = Type::kHistogram;
  s.labels = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds; ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    s.buckets.emplace_back(kBoundsS[i], cumulative);
  }
  s.count = cumulative + counts_[kBounds].load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  out->push_back(std::move(s));
}

Sample Counter(const std::string& name, const std::string& help, double value,
               std::vector<std::pair<std::string, std::string>> labels) {
  Sample s;
  s.name = name;
  s.help = help;
  s.type = Type::kCounter;
  s.value = value;
  s.labels = std::move(labels);
  return s;
}

Sample Gauge(const std::string& name, const std::string& help, double value,
             std::vector<std::pair<std::string, std::string>> labels) {
  Sample s = Counter(name, help, value, std::move(labels));
  s.type = Type::kGauge;
  return s;
}

void AppendTraffic(const TrafficStats& traffic, std::vector<Sample>* out,
                   const std::function<std::string(TableId)>& table_name) {
  const char* kBytes = "Bytes exchanged with a peer (headers and payload)";
  const char* kMessages = "Messages exchanged with a peer";
  for (const auto& kv : traffic.peers) {
    const std::string peer = std::to_string(kv.first);
    const PeerTraffic& p = kv.second;
    out->push_back(Counter("layerps_peer_bytes_total", kBytes, p.bytes_sent,
                           {{"peer", peer}, {"direction", "sent"}}));
    out->push_back(Counter("layerps_peer_bytes_total", kBytes, p.bytes_received,
                           {{"peer", peer}, {"direction", "received"}}));
    out->push_back(Counter("layerps_peer_messages_total", kMessages, p.messages_sent,
                           {{"peer", peer}, {"direction", "sent"}}));
    out->push_back(Counter("layerps_peer_messages_total", kMessages, p.messages_received,
                           {{"peer", peer}, {"direction", "received"}}));
  }
  const char* kTable = "Payload bytes of a table's data messages";
  for (const auto& kv : traffic.tables) {
    std::string table = kv.first == kInvalidTable ? "collectives"
                        : table_name             ? table_name(kv.first)
                                                 : std::string();
    if (table.empty()) table = "#" + std::to_string(kv.first);
    out->push_back(Counter("layerps_table_bytes_total", kTable, kv.second.bytes_sent,
                           {{"table", table}, {"direction", "sent"}}));
    out->push_back(Counter("layerps_table_bytes_total", kTable, kv.second.bytes_received,
                           {{"table", table}, {"direction", "received"}}));
  }
}

#ifdef LAYERPS_HAVE_PROMETHEUS
// The endpoint: GNU libmicrohttpd driven by one thread of ours (MHD's epoll mode with an
// external loop), so a connection costs a socket and a little memory, never a thread, and
// a slow or idle client delays no one (docs/observability.md, "Endpoint"). Our loop adds
// what libmicrohttpd lacks: a deadline for the request header from the accept on, and a
// soft bound on connections that closes the oldest one still waiting for its request.
// Everything below runs on the loop thread (libmicrohttpd calls back from MHD_run there),
// except the constructor and destructor, which run while the loop does not.
struct Exporter::Impl {
  using Clock = std::chrono::steady_clock;
  // A connection, from the accept to its close (libmicrohttpd's socket context).
  struct Conn {
    int fd = -1;
    Clock::time_point accepted;
    bool pending = true;  // its request header is not complete yet (in `pending`)
    bool shut = false;    // we shut it down; libmicrohttpd has not closed it yet
    std::list<Conn*>::iterator pending_at;
  };

  explicit Impl(Source s) : collectable(std::move(s)) {
    // The families prometheus-cpp's Exposer served before ours (same names and help).
    registry = std::make_shared<prometheus::Registry>();
    bytes_transferred = &prometheus::BuildCounter()
                             .Name("exposer_transferred_bytes_total")
                             .Help("Transferred bytes to metrics services")
                             .Register(*registry)
                             .Add({});
    scrapes = &prometheus::BuildCounter()
                   .Name("exposer_scrapes_total")
                   .Help("Number of times metrics were scraped")
                   .Register(*registry)
                   .Add({});
    latencies =
        &prometheus::BuildSummary()
             .Name("exposer_request_latencies")
             .Help("Latencies of serving scrape requests, in microseconds")
             .Register(*registry)
             .Add({}, prometheus::Summary::Quantiles{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}});
  }

  ~Impl() {
    if (loop.joinable()) {
      stop.store(true);
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof one);
      loop.join();
    }
    // Closes every connection (notifying OnConnection) and the listening socket.
    if (daemon != nullptr) MHD_stop_daemon(daemon);
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
  }

  // The exposition, as prometheus-cpp's Exposer wrote it: its own families, then ours.
  std::string Scrape() {
    const Clock::time_point start = Clock::now();
    std::vector<prometheus::MetricFamily> families = registry->Collect();
    std::vector<prometheus::MetricFamily> ours = collectable.Collect();
    families.insert(families.end(), std::make_move_iterator(ours.begin()),
                    std::make_move_iterator(ours.end()));
    std::string body = prometheus::TextSerializer().Serialize(families);
    latencies->Observe(static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count()));
    bytes_transferred->Increment(static_cast<double>(body.size()));
    scrapes->Increment();
    return body;
  }

  static void OnConnection(void* cls, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    Impl* impl = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      Conn* c = new Conn;
      c->fd = info != nullptr ? info->connect_fd : -1;
      c->accepted = Clock::now();
      c->pending_at = impl->pending.insert(impl->pending.end(), c);
      ++impl->open;
      *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      Conn* c = static_cast<Conn*>(*socket_context);
      if (c == nullptr) return;
      if (c->pending) impl->pending.erase(c->pending_at);
      if (c->shut) --impl->shut;
      --impl->open;
      delete c;
      *socket_context = nullptr;
    }
  }

  // Called once the request line and headers are in (then again for any request body):
  // GET (or HEAD) /metrics answers the exposition, another path 404, another method 405.
  // Every answer closes the connection, so the request deadline covers a connection's
  // whole life before its answer.
  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, size_t* upload_data_size,
                              void** request_context) {
    Impl* impl = static_cast<Impl*>(cls);
    if (*request_context != nullptr) {  // a request body, after the answer: dropped
      *upload_data_size = 0;
      return MHD_YES;
    }
    *request_context = impl;
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info != nullptr && info->socket_context != nullptr) {
      Conn* c = static_cast<Conn*>(info->socket_context);
      if (c->pending) {
        impl->pending.erase(c->pending_at);
        c->pending = false;
      }
    }
    unsigned int status = MHD_HTTP_OK;
    std::string body;
    const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                     std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (std::strcmp(url, "/metrics") != 0) {
      status = MHD_HTTP_NOT_FOUND;
      body = "Not Found: this endpoint serves GET /metrics\n";
    } else if (!get) {
      status = MHD_HTTP_METHOD_NOT_ALLOWED;
      body = "Method Not Allowed: GET /metrics\n";
    } else {
      body = impl->Scrape();
    }
    MHD_Response* response = MHD_create_response_from_buffer(
        body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes it
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    const MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
  }

  // Shuts down the oldest connections still waiting for their request: those past the
  // deadline, and as many as keep the open ones within the bound. libmicrohttpd sees the
  // end of the stream and closes them (its socket stays open until OnConnection's
  // CLOSED, so the descriptor is still this connection's).
  void Enforce() {
    const Clock::time_point expired = Clock::now() - kRequestDeadline;
    while (!pending.empty() &&
           (open - shut > kMaxConnections || pending.front()->accepted <= expired)) {
      Conn* c = pending.front();
      pending.pop_front();
      c->pending = false;
      c->shut = true;
      ++shut;
      if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
    }
  }

  void Loop() {
    epoll_event events[2];
    while (!stop.load()) {
      // Until libmicrohttpd's next timeout or the oldest pending request's deadline.
      long long wait_ms = -1;
      MHD_UNSIGNED_LONG_LONG mhd_ms = 0;
      if (MHD_get_timeout(daemon, &mhd_ms) == MHD_YES) {
        wait_ms = static_cast<long long>(std::min<MHD_UNSIGNED_LONG_LONG>(mhd_ms, INT_MAX));
      }
      if (!pending.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              pending.front()->accepted + kRequestDeadline - Clock::now())
                              .count() +
                          1;
        const long long deadline_ms = std::max<long long>(0, left);
        wait_ms = wait_ms < 0 ? deadline_ms : std::min(wait_ms, deadline_ms);
      }
      const int n = epoll_wait(epoll_fd, events, 2, static_cast<int>(wait_ms));
      if (n < 0 && errno != EINTR) break;  // (not expected: a bad epoll descriptor)
      if (stop.load()) break;
      MHD_run(daemon);
      Enforce();
    }
  }

  // Set up by Start before the loop runs; then the loop thread's alone.
  SourceCollectable collectable;
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* bytes_transferred = nullptr;
  prometheus::Counter* scrapes = nullptr;
  prometheus::Summary* latencies = nullptr;
  MHD_Daemon* daemon = nullptr;
  int epoll_fd = -1;  // libmicrohttpd's epoll descriptor and wake_fd
  int wake_fd = -1;   // an eventfd the destructor writes to end the loop
  std::atomic<bool> stop{false};
  std::thread loop;
  // The loop thread's: connections waiting for their request, oldest first; how many
  // libmicrohttpd holds open; how many of them we shut down and it has not closed yet.
  std::list<Conn*> pending;
  int open = 0;
  int shut = 0;
};
#else
struct Exporter::Impl {};
#endif

Exporter::Exporter(std::unique_ptr<Impl> impl, std::string endpoint)
    : impl_(std::move(impl)), endpoint_(std::move(endpoint)) {}

// Stops serving (Impl's destructor) before the source, which reads the node, goes away.
Exporter::~Exporter() = default;

StatusOr<std::unique_ptr<Exporter>> Exporter::Start(const std::string& host, int port,
                                                    Source source) {
  if (port < 1 || port > 65535) {
    return InvalidArgument("metrics_port " + std::to_string(port) + " is outside 1..65535");
  }
  const std::string endpoint = host + ":" + std::to_string(port);
#ifndef LAYERPS_HAVE_PROMETHEUS
  (void)source;
  return FailedPrecondition("cannot serve metrics on " + endpoint +
                            ": LayerPS was built without prometheus-cpp and libmicrohttpd");
#else
  const std::string failed =
      "cannot serve metrics on " + endpoint + " (in use, or not an address of this host): ";
  // Our own listening socket, so that a port in use and an unknown host say so.
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);  // "[::1]"
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const int gai = getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  if (gai != 0) return Unavailable(failed + gai_strerror(gai));
  int listen_fd = -1;
  std::string why = "no address";
  for (addrinfo* a = addresses; a != nullptr && listen_fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(addresses);
  if (listen_fd < 0) return Unavailable(failed + why);

  auto impl = std::make_unique<Impl>(std::move(source));
  // libmicrohttpd owns listen_fd from here on (it closes it on stop).
  impl->daemon = MHD_start_daemon(
      MHD_USE_EPOLL, 0, nullptr, nullptr, &Impl::OnRequest, impl.get(),  //
      MHD_OPTION_LISTEN_SOCKET, listen_fd,                               //
      MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned int>(kMaxConnections + kAcceptHeadroom),  //
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(kIdleTimeout.count()),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(kConnectionMemory),  //
      MHD_OPTION_NOTIFY_CONNECTION, &Impl::OnConnection, impl.get(),               //
      MHD_OPTION_END);
  if (impl->daemon == nullptr) {
    return Unavailable("cannot serve metrics on " + endpoint + ": libmicrohttpd did not start");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl->daemon, MHD_DAEMON_INFO_EPOLL_FD);
  impl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  impl->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  bool ok = info != nullptr && impl->wake_fd >= 0 && impl->epoll_fd >= 0;
  for (const int fd : {info != nullptr ? info->epoll_fd : -1, impl->wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ok = ok && epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  if (!ok) return Unavailable("cannot serve metrics on " + endpoint + ": " + std::strerror(errno));
  Impl* raw = impl.get();
  impl->loop = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<Exporter>(new Exporter(std::move(impl), endpoint));
#endif
}

StatusOr<std::unique_ptr<Exporter>> MaybeStart(const std::string& host, int port,
                                               const std::string& what, Source source) {
  if (port == 0) return std::unique_ptr<Exporter>();
  StatusOr<std::unique_ptr<Exporter>> e = Exporter::Start(host, port, std::move(source));
  if (!e.ok()) return Status(e.status().code(), what + ": " + e.status().message());
  return e;
}

}  // namespace metrics
}  // namespace ps
