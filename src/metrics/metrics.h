// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Metrics: what a node exports to Prometheus. The rest of the code only fills Samples
// from counters it already keeps (ServerStats, TrafficStats, ...) and observes Latency
// histograms; the HTTP exporter (prometheus-cpp's text format, served by libmicrohttpd)
// lives in metrics.cc alone, started when Options::metrics_port is set
// (docs/observability.md lists every metric).
//
// Thread-safety: Latency::Observe and Export may be called from any thread; an Exporter
// calls its Source on its own HTTP thread, for each scrape.
#ifndef PS_METRICS_METRICS_H_
#define PS_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {
namespace metrics {

enum class Type { kCounter, kGauge, kHistogram };

// One time series of a scrape. Samples of one name form one family (same help and type).
struct Sample {
  std::string name;  // e.g. "layerps_server_requests_total"
  std::string help;
  Type type = Type::kCounter;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;  // counter, gauge
  // Histogram: cumulative counts per upper bound (ascending, +Inf implied by count).
  std::vector<std::pair<double, uint64_t>> buckets;
  uint64_t count = 0;
  double sum = 0;
};

using Source = std::function<void(std::vector<Sample>*)>;

// A latency histogram with fixed bounds from 50 us to 10 s, lock-free.
class Latency {
 public:
  static constexpr size_t kBounds = 16;
  void Observe(double seconds);
  // Appends this histogram as one sample.
  void Export(const std::string& name, const std::string& help,
              std::vector<std::pair<std::string, std::string>> labels,
              std::vector<Sample>* out) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds + 1> counts_{};  // last: above every bound
  std::atomic<uint64_t> sum_ns_{0};
};

// Serves GET /metrics on host:port over HTTP while it lives: one thread, event-driven
// (libmicrohttpd), so idle and slow clients delay no scrape (docs/observability.md,
// "Endpoint"). Another path answers 404, another method 405.
class Exporter {
 public:
  // Connections open at once: past it, the oldest connection still waiting for its
  // request is closed (so a flood of idle ones cannot lock scrapes out).
  static constexpr int kMaxConnections = 512;
  // Connections libmicrohttpd may accept past kMaxConnections before the loop closes the
  // oldest (it accepts up to 10 at a time); at its limit new ones wait in the backlog.
  static constexpr int kAcceptHeadroom = 32;
  // A client has this long from its connection to the end of its request's headers.
  static constexpr std::chrono::seconds kRequestDeadline{5};
  // A connection with no traffic for this long is closed (a client not taking its answer).
  static constexpr std::chrono::seconds kIdleTimeout{5};
  // Memory for one connection's request (libmicrohttpd's pool): larger headers are
  // refused (431) and the connection closed.
  static constexpr size_t kConnectionMemory = 16 * 1024;

  // kInvalidArgument for a port outside 1..65535; kUnavailable, naming host:port, when it
  // cannot be bound (in use, or not an address of this host); kFailedPrecondition when
  // LayerPS was built without prometheus-cpp and libmicrohttpd.
  static StatusOr<std::unique_ptr<Exporter>> Start(const std::string& host, int port,
                                                   Source source);
  // Stops serving (closes every connection) before `source` is destroyed.
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;
  // "host:port" it listens on.
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Impl;
  explicit Exporter(std::unique_ptr<Impl> impl, std::string endpoint);
  std::unique_ptr<Impl> impl_;
  std::string endpoint_;
};

// Helpers for the sources: one counter or gauge sample.
Sample Counter(const std::string& name, const std::string& help, double value,
               std::vector<std::pair<std::string, std::string>> labels = {});
Sample Gauge(const std::string& name, const std::string& help, double value,
             std::vector<std::pair<std::string, std::string>> labels = {});
// A node's traffic: layerps_peer_{bytes,messages}_total{peer,direction} and
// layerps_table_bytes_total{table,direction} (payload bytes of data messages). `table` is
// the table's name, as every metric labels tables (`table_name`: id -> name; an id it does
// not know, and the peer tensors of the collectives, which belong to no table, are named
// "#<id>" and "collectives").
void AppendTraffic(const TrafficStats& traffic, std::vector<Sample>* out,
                   const std::function<std::string(TableId)>& table_name = nullptr);

// Starts an exporter for a node when options ask for one (port 0: none, returns null).
// `what` names the node in errors ("server", "worker"...).
StatusOr<std::unique_ptr<Exporter>> MaybeStart(const std::string& host, int port,
                                               const std::string& what, Source source);

}  // namespace metrics
}  // namespace ps

#endif  // PS_METRICS_METRICS_H_
