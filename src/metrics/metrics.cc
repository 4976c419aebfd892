// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "metrics/metrics.h"

#ifdef LAYERPS_HAVE_PROMETHEUS
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#endif

#include <limits>
#include <map>
#include <stdexcept>
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
struct Exporter::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<SourceCollectable> collectable;
};
#else
struct Exporter::Impl {};
#endif

Exporter::Exporter(std::unique_ptr<Impl> impl, std::string endpoint)
    : impl_(std::move(impl)), endpoint_(std::move(endpoint)) {}

Exporter::~Exporter() {
#ifdef LAYERPS_HAVE_PROMETHEUS
  // Stop serving before the source (which reads the node) goes away.
  if (impl_) impl_->exposer.reset();
#endif
}

// How many scrapes are served at once, and how long a client has to send its request (and
// to take the answer) before the connection is closed.
constexpr int kMetricsThreads = 8;
constexpr int kMetricsRequestTimeoutMs = 2000;

StatusOr<std::unique_ptr<Exporter>> Exporter::Start(const std::string& host, int port,
                                                    Source source) {
  if (port < 1 || port > 65535) {
    return InvalidArgument("metrics_port " + std::to_string(port) + " is outside 1..65535");
  }
  const std::string endpoint = host + ":" + std::to_string(port);
#ifndef LAYERPS_HAVE_PROMETHEUS
  (void)source;
  return FailedPrecondition("cannot serve metrics on " + endpoint +
                            ": LayerPS was built without prometheus-cpp");
#else
  auto impl = std::make_unique<Impl>();
  try {
    // Several threads and a short request timeout: CivetWeb gives each connection a
    // thread until its request is read, so with one thread and its default 30 s timeout
    // a single idle client blinded every scrape (docs/observability.md, "Endpoint").
    impl->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", endpoint,                                   //
        "num_threads", std::to_string(kMetricsThreads),                //
        "request_timeout_ms", std::to_string(kMetricsRequestTimeoutMs)});
  } catch (const std::exception& e) {
    return Unavailable("cannot serve metrics on " + endpoint + " (in use, or not an address "
                       "of this host): " + e.what());
  }
  impl->collectable = std::make_shared<SourceCollectable>(std::move(source));
  impl->exposer->RegisterCollectable(impl->collectable);
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
