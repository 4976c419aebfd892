// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-bench: push/pull throughput and latency of a LayerPS cluster, next to a raw
// ZeroMQ baseline measured in the same run over the same kind of endpoint.
//
// It starts a local cluster in this process (scheduler, servers and workers as objects,
// each with its own transport, talking over tcp://127.0.0.1, ipc:// or inproc://), or,
// with --join, becomes one worker of a cluster started elsewhere (LAYERPS_* variables or
// the --scheduler family of flags). See docs/benchmarks.md and bench/RESULTS.md.
//
// Every case: declare a fresh table, calibrate the request count on a short warm-up, run
// --repeats timed repeats (each ~--seconds), verify the values moved (sampled on every
// pulled reply, exhaustively on the final state), report median/min/max over repeats.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <zmq.hpp>

#include "common/hash.h"
#include "common/wire_type.h"
#include "ps/flags.h"
#include "ps/ps.h"
#include "tools/cli.h"
#include "worker/packing.h"

// ---- Flags ----------------------------------------------------------------------------
DEFINE_bool(quick, false,
            "Preset for a smoke run (< 1 minute): tcp, 1x1, dense 4K/256K/4M, "
            "in flight 1 and 8, push/pull/pushpull, a small sparse case, the 100-tensor step, "
            "3 repeats of 0.1 s. Flags given explicitly still override the preset");
DEFINE_bool(targets, false,
            "Preset that measures the issue-3 targets in one run: dense 1x1 tcp "
            "push/pull at 256K/4M/32M with 8 in flight, 4K pushpull with 1 in flight, sparse "
            "100k keys x 16 of 10M with 8 in flight, ipc vs tcp at 4M, the 100 x 4K step");
DEFINE_string(modes, "dense",
              "Comma list of request kinds: dense, sparse, step (a training "
              "step of --step_tensors tensors of --step_bytes each, each its own table, pushed "
              "three ways: one Push per tensor ('step'), one Worker::PushMany ('stepmany'), "
              "and packed by the caller into one table ('stepfused'); each compared with one "
              "push of the same total bytes)");
DEFINE_string(ops, "push,pull,pushpull", "Comma list of operations: push, pull, pushpull");
DEFINE_string(sizes, "4K,64K,256K,1M,4M,31M,32M,100003",
              "Dense: comma list of bytes per "
              "request (suffix K/M/G = 2^10/2^20/2^30; odd sizes are rounded up to whole floats)");
DEFINE_string(inflight, "1,8,32", "Comma list of requests kept in flight per worker");
DEFINE_bool(sorted_keys, false,
            "Sparse: every key batch holds distinct keys in ascending order (drawn until "
            "that many distinct, then sorted, once before timing), as ps-lite requires of "
            "its callers; LayerPS then packs without a hash table");
DEFINE_bool(wait_one, true,
            "With 1 in flight, wait for each dense request (and each sparse push or pull) "
            "with Worker::Wait, as a training loop does, instead of a callback");
DEFINE_string(topologies, "1x1",
              "Comma list of SERVERSxWORKERS for the local cluster (ignored "
              "with --join)");
DEFINE_string(sweep_streams, "",
              "Comma list of connections per peer (Options::streams, 1..16): every local "
              "cluster is started once per value in this run, beside one raw baseline, and "
              "the case labels say streams=N. Empty (default): --streams alone");
DEFINE_string(transports, "tcp",
              "Comma list of endpoint kinds for the local cluster and the raw "
              "baseline: tcp (127.0.0.1), ipc (unix sockets in /tmp), inproc (same process)");
DEFINE_int32(repeats, 5, "Timed repeats per case (median, min, max are over these), 1..1000");
DEFINE_double(seconds, 0.3,
              "Target duration of one repeat in seconds (the request count is "
              "calibrated on a warm-up), 0.01..60");
DEFINE_int32(min_requests, 16, "Least requests per repeat");
DEFINE_int32(max_requests, 200000, "Most requests per repeat");
DEFINE_bool(baseline, true,
            "Also measure raw ZeroMQ over the same kind of endpoint (one-way "
            "streaming of the same bytes for push/pull, round trips with the same window for "
            "pushpull), one raw repeat before each LayerPS repeat, and print the ratio");
DEFINE_bool(verify, true, "Check the values moved (sampled per reply, full final state)");
DEFINE_string(wire_dtype, "fp32",
              "How the tables' values travel: fp32, fp16 or bf16 (TableSpec::wire_dtype). "
              "fp16/bf16 round the values, so they are not verified");
DEFINE_string(sparse_keys, "100000", "Sparse: comma list of keys per request");
DEFINE_uint64(key_space, 10000000, "Sparse: keys are drawn from [0, key_space)");
DEFINE_int32(dim, 16, "Sparse: floats per row, 1..4096");
DEFINE_string(dist, "uniform", "Sparse: comma list of key distributions: uniform, zipf");
DEFINE_double(zipf_s, 1.1, "Sparse: exponent of the Zipf distribution (> 0)");
DEFINE_int32(key_batches, 4, "Sparse: distinct key batches per worker, cycled through");
DEFINE_int32(step_tensors, 100, "Step mode: tensors per step");
DEFINE_string(step_bytes, "4K", "Step mode: bytes per tensor");
DEFINE_bool(join, false,
            "Join an existing cluster as one worker (address from --scheduler or "
            "LAYERPS_SCHEDULER, token from --token/LAYERPS_TOKEN) instead of starting one");
DEFINE_string(json, "", "Write the results as JSON to this file");
DEFINE_string(csv, "", "Write the results as CSV to this file (one row per case)");
DEFINE_string(plot, "",
              "Draw the results to this image (runs layerps-bench-plot on the JSON; writes "
              "IMAGE.json when --json is not given; needs /usr/bin/python3 + matplotlib)");
DEFINE_string(plot_script, "",
              "Path of the plot script (default: layerps-bench-plot beside this program, "
              "else the source tree's bench/plot.py)");
DEFINE_bool(progress, true, "Print one progress line per case to stderr");

namespace ps {
namespace bench {
namespace {

// --wire_dtype, checked in Main.
WireDType WireDTypeFlag() {
  auto w = ParseWireDType(FLAGS_wire_dtype);
  return w.ok() ? *w : WireDType::kFloat32;
}

// v as a pull returns it: rounded once to the wire type (the servers sum in float32, and
// the pushed values, small integers, travel exactly).
float OnWire(float v) {
  const auto t = static_cast<pack::WireType>(WireDTypeFlag());
  uint16_t h = 0;
  float out = v;
  if (t == pack::WireType::kFloat32) return v;
  pack::ToWire(&v, 1, t, &h);
  pack::FromWire(&h, 1, t, &out);
  return out;
}

using Clock = std::chrono::steady_clock;
double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Exit codes as the daemons' (docs/errors.md): 2 for a bad command line or
// configuration, 1 for a failure at run time.
[[noreturn]] void Die(const std::string& why, int code = 2) {
  std::fprintf(stderr, "layerps-bench: %s\n", why.c_str());
  std::exit(code);
}

// A Status from starting or joining a cluster: a configuration the user must change
// (kInvalidArgument, kFailedPrecondition: e.g. no scheduler address) exits 2, anything
// that went wrong at run time (kTimeout, kUnavailable...) exits 1.
[[noreturn]] void DieStatus(const std::string& what, const Status& s) {
  const bool config = s.code() == StatusCode::kInvalidArgument ||
                      s.code() == StatusCode::kFailedPrecondition;
  Die(what + ": " + s.ToString(), config ? 2 : 1);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

uint64_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string suf(end);
  double mul = 1;
  if (suf == "K" || suf == "k" || suf == "KiB")
    mul = 1024.0;
  else if (suf == "M" || suf == "m" || suf == "MiB")
    mul = 1048576.0;
  else if (suf == "G" || suf == "g" || suf == "GiB")
    mul = 1073741824.0;
  else if (!suf.empty() && suf != "B")
    Die("bad size '" + s + "'");
  if (!(v > 0)) Die("bad size '" + s + "'");
  return static_cast<uint64_t>(v * mul);
}

// One convention for every byte count a person reads: binary units (K = 1024 bytes,
// M = 1024 K, the units --sizes takes), whole when exact, else with one decimal
// (720000 bytes -> "703.1K"); under 1 K the plain count with "B".
std::string HumanBytes(uint64_t b) {
  char buf[32];
  const auto scaled = [&](uint64_t unit, const char* suffix) {
    if (b % unit == 0)
      std::snprintf(buf, sizeof buf, "%" PRIu64 "%s", b / unit, suffix);
    else
      std::snprintf(buf, sizeof buf, "%.1f%s", static_cast<double>(b) / unit, suffix);
  };
  if (b >= (uint64_t{1} << 30))
    scaled(uint64_t{1} << 30, "G");
  else if (b >= (uint64_t{1} << 20))
    scaled(uint64_t{1} << 20, "M");
  else if (b >= 1024)
    scaled(1024, "K");
  else
    std::snprintf(buf, sizeof buf, "%" PRIu64 "B", b);
  return buf;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}
double Median(const std::vector<double>& v) { return Percentile(v, 0.5); }

// ---- Cases and results ------------------------------------------------------------------

struct Case {
  std::string system = "layerps";  // layerps | raw-zmq
  std::string transport = "tcp";
  int servers = 1, workers = 1;
  std::string mode = "dense";  // dense | sparse | step | stepmany | stepfused; raw: oneway | rtt
  std::string op = "push";     // push | pull | pushpull
  uint64_t bytes = 0;          // dense: value bytes per request; step: total bytes per step
  int inflight = 1;
  uint64_t keys = 0;  // sparse: keys per request
  uint32_t dim = 0;
  std::string dist;  // sparse: uniform | zipf
  int tensors = 0;   // step: tensors per step
  int streams = 0;   // --sweep_streams: the cluster's Options::streams (0: not swept)

  std::string Label() const {
    std::string s = system + " " + transport + " " + std::to_string(servers) + "x" +
                    std::to_string(workers) + " " + mode + " " + op;
    if (mode == "sparse")
      s += " keys=" + std::to_string(keys) + "x" + std::to_string(dim) + " " + dist;
    else if (mode == "step" || mode == "stepmany" || mode == "stepfused")
      s += " " + std::to_string(tensors) + "x" + HumanBytes(bytes / tensors);
    else
      s += " " + HumanBytes(bytes);
    if (streams > 0) s += " streams=" + std::to_string(streams);
    // Raw one-way streaming keeps no window (the sender never waits for an answer), so
    // it carries no in-flight count that could be read as comparable to LayerPS's.
    if (system == "raw-zmq" && mode == "oneway") return s + " (no window)";
    return s + " inflight=" + std::to_string(inflight);
  }
};

struct Result {
  Case c;
  std::vector<double> gbps, ops, keys_per_s;  // one per repeat
  std::vector<double> lat_us;                 // per request, pooled over repeats
  uint64_t requests_per_repeat = 0;
  uint64_t wire_bytes = 0;  // payload bytes per request, one direction
  bool verified = false;
  std::string verify_note;
  std::string error;
  std::vector<double> raw_ops;  // the raw ZeroMQ repeat run right before each repeat
  double ratio = 0;             // LayerPS / raw ZeroMQ (same run), 0 = none
  std::string ratio_of;         // what the ratio compares
};

// ---- Raw ZeroMQ baseline --------------------------------------------------------------
// Two "nodes" shaped like LayerPS's: each owns a context (1 I/O thread) and a ROUTER it
// receives on, and a DEALER to the other's ROUTER. Payloads are sent zero-copy from
// pre-faulted buffers; the receiver keeps what ZeroMQ allocated, as LayerPS does.

void NoFree(void*, void*) {}

std::string RawEndpoint(const std::string& transport, const std::string& tag) {
  static std::atomic<int> n{0};
  const std::string id = std::to_string(getpid()) + "-" + tag + "-" + std::to_string(n++);
  if (transport == "ipc") return "ipc:///tmp/layerps-bench-" + id + ".sock";
  if (transport == "inproc") return "inproc://layerps-bench-" + id;
  return "tcp://127.0.0.1:0";
}

constexpr int kRawRecvTimeoutMs = 30000;

struct RawNode {
  std::shared_ptr<zmq::context_t> ctx;
  zmq::socket_t router, dealer;
  std::string endpoint;
  RawNode(std::shared_ptr<zmq::context_t> c, const std::string& bind)
      : ctx(std::move(c)),
        router(*ctx, zmq::socket_type::router),
        dealer(*ctx, zmq::socket_type::dealer) {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::rcvhwm, 100000);
    // Every wait is bounded: a message that never comes fails the case, not the run.
    router.set(zmq::sockopt::rcvtimeo, kRawRecvTimeoutMs);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::sndhwm, 100000);
    router.bind(bind);
    endpoint = router.get(zmq::sockopt::last_endpoint);
  }
};

// Receives one message on a ROUTER: [identity, payload]. Returns the payload.
bool RawRecv(zmq::socket_t& router, zmq::message_t* payload) {
  zmq::message_t id;
  if (!router.recv(id)) return false;
  if (!id.more()) return false;
  if (!router.recv(*payload)) return false;
  while (payload->more()) {  // tolerate extra parts
    zmq::message_t extra;
    if (!router.recv(extra)) return false;
  }
  return true;
}

void RawSend(zmq::socket_t& dealer, const char* buf, size_t size) {
  zmq::message_t m(const_cast<char*>(buf), size, &NoFree, nullptr);
  dealer.send(m, zmq::send_flags::none);
}

// One repeat of the raw baseline: `n` messages of `size` bytes. oneway: stream them and
// wait for one ack; rtt: keep `window` in flight, each echoed back with `size` bytes.
struct RawPair {
  std::shared_ptr<zmq::context_t> ctx_a, ctx_b;
  std::unique_ptr<RawNode> a, b;
  std::vector<char> buf_a, buf_b;

  RawPair(const std::string& transport, size_t size) {
    if (transport == "inproc") {
      ctx_a = ctx_b = std::make_shared<zmq::context_t>(1);
    } else {
      ctx_a = std::make_shared<zmq::context_t>(1);
      ctx_b = std::make_shared<zmq::context_t>(1);
    }
    a = std::make_unique<RawNode>(ctx_a, RawEndpoint(transport, "a"));
    b = std::make_unique<RawNode>(ctx_b, RawEndpoint(transport, "b"));
    a->dealer.connect(b->endpoint);
    b->dealer.connect(a->endpoint);
    buf_a.assign(size, 'a');
    buf_b.assign(size, 'b');
    for (size_t i = 0; i < size; i += 4096) buf_a[i] = static_cast<char>(i / 4096);
  }
  ~RawPair() {
    a.reset();
    b.reset();
  }

  // Returns seconds, appends per-message latency (rtt only); sets *ok = false on a bad size.
  double Run(bool rtt, uint64_t n, int window, std::vector<double>* lat, bool* ok) {
    const size_t size = buf_a.size();
    std::atomic<bool> bad{false};
    std::thread peer([&] {
      zmq::message_t m;
      for (uint64_t i = 0; i < n; ++i) {
        if (!RawRecv(b->router, &m)) {
          bad = true;
          return;
        }
        if (m.size() != size || (size > 0 && static_cast<const char*>(m.data())[0] != buf_a[0]))
          bad = true;
        if (rtt) RawSend(b->dealer, buf_b.data(), size);
      }
      if (!rtt) RawSend(b->dealer, buf_b.data(), 1);  // ack
    });
    const auto t0 = Clock::now();
    zmq::message_t m;
    if (!rtt) {
      for (uint64_t i = 0; i < n; ++i) RawSend(a->dealer, buf_a.data(), size);
      if (!RawRecv(a->router, &m)) bad = true;  // no ack within kRawRecvTimeoutMs
    } else {
      std::vector<Clock::time_point> sent(n);
      uint64_t issued = 0, done = 0;
      for (; issued < std::min<uint64_t>(n, window); ++issued) {
        sent[issued] = Clock::now();
        RawSend(a->dealer, buf_a.data(), size);
      }
      while (done < n) {
        if (!RawRecv(a->router, &m)) {
          bad = true;  // no echo within kRawRecvTimeoutMs
          break;
        }
        if (m.size() != size) bad = true;
        lat->push_back(Secs(Clock::now() - sent[done]) * 1e6);
        ++done;
        if (issued < n) {
          sent[issued] = Clock::now();
          RawSend(a->dealer, buf_a.data(), size);
          ++issued;
        }
      }
    }
    const double t = Secs(Clock::now() - t0);
    peer.join();
    if (bad) *ok = false;
    return t;
  }
};

uint64_t Calibrate(double warm_seconds, uint64_t warm_n) {
  const double rate = warm_n / std::max(warm_seconds, 1e-6);
  const double n = rate * FLAGS_seconds;
  return static_cast<uint64_t>(std::clamp<double>(n, FLAGS_min_requests, FLAGS_max_requests));
}

// Raw baselines, created on first use and kept for the whole run, so that every LayerPS
// repeat is paired with a raw repeat right before it (the machine's load drifts; paired
// repeats keep the ratio honest).
class RawBaselines {
 public:
  struct Entry {
    Case c;
    std::unique_ptr<RawPair> pair;
    uint64_t n = 0;
    Result pooled;
  };

  // push/pull: one-way streaming of the same bytes; pushpull: round trips with the same
  // window. Null when the case has no raw counterpart or the pair cannot be set up.
  Entry* For(const Case& lc, uint64_t bytes) {
    if (lc.mode != "dense" && lc.mode != "sparse") return nullptr;
    const bool rtt = lc.op == "pushpull";
    std::string tr = lc.transport;
    if (tr.rfind("join-", 0) == 0) tr = tr.substr(5);
    const int window = rtt ? lc.inflight : 1;
    for (auto& e : entries_) {
      if (e->c.transport == tr && e->c.mode == (rtt ? "rtt" : "oneway") && e->c.bytes == bytes &&
          e->c.inflight == window) {
        return e.get();
      }
    }
    auto e = std::make_unique<Entry>();
    Case& c = e->c;
    c.system = "raw-zmq";
    c.transport = tr;
    c.mode = rtt ? "rtt" : "oneway";
    c.op = rtt ? "pingpong" : "stream";
    c.bytes = bytes;
    c.inflight = window;
    e->pooled.c = c;
    e->pooled.wire_bytes = bytes;
    e->pooled.verified = true;
    e->pooled.verify_note = "sizes and first byte checked";
    try {
      e->pair = std::make_unique<RawPair>(tr, bytes);
      bool ok = true;
      std::vector<double> lat;
      const uint64_t warm = std::max<uint64_t>(4, 2 * window);
      const double tw = e->pair->Run(rtt, warm, window, &lat, &ok);
      e->n = Calibrate(tw, warm);
      e->pooled.requests_per_repeat = e->n;
    } catch (const zmq::error_t& err) {
      e->pooled.error = err.what();
      e->pair.reset();
    }
    entries_.push_back(std::move(e));
    return entries_.back()->pair ? entries_.back().get() : nullptr;
  }

  // One timed repeat; returns its ops/s and pools it into the entry's row.
  double Repeat(Entry* e) {
    bool ok = true;
    std::vector<double> lat;
    const double t = e->pair->Run(e->c.mode == "rtt", e->n, e->c.inflight, &lat, &ok);
    const double ops = e->n / t;
    e->pooled.ops.push_back(ops);
    e->pooled.gbps.push_back(ops * static_cast<double>(e->c.bytes) / 1e9);
    e->pooled.lat_us.insert(e->pooled.lat_us.end(), lat.begin(), lat.end());
    if (!ok) {
      e->pooled.verified = false;
      e->pooled.verify_note = "a message had the wrong size or content";
    }
    return ops;
  }

  std::vector<Result> Results() const {
    std::vector<Result> out;
    for (const auto& e : entries_) out.push_back(e->pooled);
    return out;
  }

 private:
  std::vector<std::unique_ptr<Entry>> entries_;
};

// ---- The LayerPS cluster -----------------------------------------------------------------

struct Cluster {
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<Worker>> workers;
  bool joined = false;

  Status StartLocal(const Options& base, const std::string& transport, int S, int W) {
    Options o = base;
    o.num_servers = S;
    o.num_workers = W;
    o.bind_address.clear();
    if (transport == "ipc") {
      o.scheduler_address = "ipc:///tmp/layerps-bench-" + std::to_string(getpid()) + "-sched.sock";
    } else if (transport == "inproc") {
      static int n = 0;
      o.scheduler_address = "inproc://layerps-bench-sched-" + std::to_string(n++);
    } else {
      o.scheduler_address = "tcp://127.0.0.1:0";
    }
    scheduler = std::make_unique<Scheduler>(o);
    PS_RETURN_IF_ERROR(scheduler->Start());
    o.scheduler_address = scheduler->address();
    for (int i = 0; i < S; ++i) servers.push_back(std::make_unique<Server>(o));
    for (int i = 0; i < W; ++i) workers.push_back(std::make_unique<Worker>(o));
    std::vector<Status> st(S + W);
    std::vector<std::thread> th;
    for (int i = 0; i < S; ++i) th.emplace_back([&, i] { st[i] = servers[i]->Start(); });
    for (int i = 0; i < W; ++i) th.emplace_back([&, i] { st[S + i] = workers[i]->Start(); });
    for (auto& t : th) t.join();
    for (const auto& s : st) PS_RETURN_IF_ERROR(s);
    return Status::OK();
  }

  Status Join(const Options& o) {
    joined = true;
    workers.push_back(std::make_unique<Worker>(o));
    return workers[0]->Start();
  }

  void Shutdown() {
    for (auto& w : workers) w->Stop();
    if (scheduler) scheduler->Join(std::chrono::seconds(10));
    for (auto& s : servers) s->Stop();
    if (scheduler) scheduler->Stop();
    workers.clear();
    servers.clear();
    scheduler.reset();
  }
};

// A reusable barrier for the local worker threads.
class Latch {
 public:
  explicit Latch(int n) : n_(n) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  uint64_t gen_ = 0;
};

// g[i] for dense pushes: small integers, so sums stay exact in float32.
inline float G(uint64_t i) { return static_cast<float>(i % 7 + 1); }

// Keys for sparse requests.
std::vector<Key> MakeKeys(uint64_t n, uint64_t space, const std::string& dist, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<Key> keys(n);
  const double s = FLAGS_zipf_s;
  const double N = static_cast<double>(space);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t rank;
    if (dist == "zipf") {
      // Inverse CDF of the continuous power law on [1, N+1), floored: Zipf-like ranks.
      const double u = u01(rng);
      double x;
      if (std::fabs(s - 1.0) < 1e-9)
        x = std::exp(u * std::log(N + 1));
      else
        x = std::pow((std::pow(N + 1, 1 - s) - 1) * u + 1, 1 / (1 - s));
      rank = std::min<uint64_t>(space, std::max<uint64_t>(1, static_cast<uint64_t>(x))) - 1;
    } else {
      rank = rng() % space;
    }
    keys[i] = rank * 0x9E3779B97F4A7C15ull;  // a bijection: hot ranks become scattered ids
  }
  return keys;
}

// --sorted_keys: `keys` made distinct (a repeated key is replaced by a fresh uniform one,
// scattered as MakeKeys scatters) and sorted ascending.
void SortDistinct(std::vector<Key>* keys, uint64_t space, uint64_t seed) {
  std::mt19937_64 rng(seed * 7777 + 1);
  std::unordered_set<Key> seen;
  seen.reserve(keys->size() * 2);
  for (Key& k : *keys) {
    while (!seen.insert(k).second) k = (rng() % space) * 0x9E3779B97F4A7C15ull;
  }
  std::sort(keys->begin(), keys->end());
}

// Per-worker state of one case.
struct WorkerCase {
  Worker* w = nullptr;
  int rank = 0;
  std::vector<TableId> tables;  // dense/sparse: 1; step: tensors
  TableId fused_table = kInvalidTable;
  std::vector<float> in;                      // pushed values (dense/step) or rows (sparse)
  std::vector<std::vector<float>> out;        // one per in-flight slot
  std::vector<std::vector<Key>> key_batches;  // sparse
  std::vector<uint64_t> batch_uses;           // sparse: how often each batch was pushed
  std::vector<float> fused;                   // stepfused: packing buffer
  std::vector<DenseRef> refs;                 // stepmany: the tensors of one step
  std::vector<double> lat_us;
  uint64_t pushes = 0;       // requests that pushed values
  std::string error;         // first failure
  std::string verify_error;  // first wrong value
};

class LayerPSRunner {
 public:
  LayerPSRunner(Cluster* cl, RawBaselines* raws, const Case& c, uint64_t case_id)
      : cl_(cl), raws_(raws), c_(c), id_(case_id) {}

  Result Run() {
    Result r;
    r.c = c_;
    const int W = static_cast<int>(cl_->workers.size());
    const bool pulls = c_.op != "push";
    const bool pushes = c_.op != "pull";
    const size_t slots = static_cast<size_t>(c_.inflight);
    elems_ = (c_.bytes + 3) / 4;
    if (c_.mode == "sparse") {
      r.wire_bytes = c_.keys * 8 + (pushes ? c_.keys * c_.dim * 4 : 0);
      if (c_.op == "pull") r.wire_bytes = c_.keys * c_.dim * 4;
    } else {
      r.wire_bytes = elems_ * 4;
    }
    ws_.resize(W);
    // Declare the tables (every worker declares the same specs).
    const std::string prefix = "bench-" + std::to_string(getpid()) + "-" + std::to_string(id_);
    for (int i = 0; i < W; ++i) {
      WorkerCase& s = ws_[i];
      s.w = cl_->workers[i].get();
      s.rank = static_cast<int>(s.w->rank());
      std::vector<TableSpec> specs;
      if (c_.mode == "dense") {
        specs.push_back(TableSpec::Dense(prefix, elems_));
      } else if (c_.mode == "sparse") {
        specs.push_back(TableSpec::Sparse(prefix, c_.dim));
      } else {  // step / stepfused
        const uint64_t per = elems_ / c_.tensors;
        if (c_.mode == "step" || c_.mode == "stepmany") {
          for (int t = 0; t < c_.tensors; ++t)
            specs.push_back(TableSpec::Dense(prefix + "-t" + std::to_string(t), per));
        } else {
          specs.push_back(TableSpec::Dense(prefix + "-fused", per * c_.tensors));
        }
      }
      for (auto& spec : specs) {
        spec.wire_dtype = WireDTypeFlag();
        auto id = s.w->DeclareTable(spec);
        if (!id.ok()) {
          r.error = "DeclareTable: " + id.status().ToString();
          return r;
        }
        s.tables.push_back(*id);
      }
      if (c_.mode == "sparse") {
        s.in.assign(c_.keys * c_.dim, 1.0f);
        for (int b = 0; b < FLAGS_key_batches; ++b) {
          s.key_batches.push_back(MakeKeys(c_.keys, FLAGS_key_space, c_.dist,
                                           1000003ull * (s.rank + 1) + b + 7919ull * id_));
          if (FLAGS_sorted_keys) SortDistinct(&s.key_batches.back(), FLAGS_key_space, b);
        }
        s.batch_uses.assign(FLAGS_key_batches, 0);
        if (pulls) s.out.assign(slots, std::vector<float>(c_.keys * c_.dim));
      } else {
        s.in.resize(elems_);
        for (uint64_t j = 0; j < elems_; ++j) s.in[j] = G(j);
        if (pulls) s.out.assign(slots, std::vector<float>(elems_));
        if (c_.mode == "stepfused") s.fused.resize(elems_);
      }
    }
    // Pull-only cases read values pushed once beforehand.
    if (c_.op == "pull") {
      for (auto& s : ws_) {
        if (c_.mode == "sparse") {
          for (size_t b = 0; b < s.key_batches.size(); ++b) {
            Ticket t = s.w->PushSparse(s.tables[0], s.key_batches[b].data(), c_.keys, s.in.data(),
                                       s.in.size());
            Status st = s.w->Wait(t, std::chrono::seconds(120));
            if (!st.ok()) {
              r.error = "pre-push: " + st.ToString();
              return r;
            }
            ++s.batch_uses[b];
          }
        } else if (s.rank == 0 || cl_->joined) {
          Ticket t = s.w->Push(s.tables[0], s.in.data(), elems_);
          Status st = s.w->Wait(t, std::chrono::seconds(120));
          if (!st.ok()) {
            r.error = "pre-push: " + st.ToString();
            return r;
          }
          ++s.pushes;
        }
      }
      if (cl_->joined) cl_->workers[0]->Barrier(Group::kWorkers, std::chrono::seconds(120));
    }
    // Warm-up and calibration.
    const uint64_t warm = std::max<uint64_t>(4, 2 * slots);
    const double tw = RunAll(warm, nullptr);
    if (!FirstError().empty()) {
      r.error = FirstError();
      return r;
    }
    const uint64_t n = Calibrate(tw, warm);
    r.requests_per_repeat = n;
    RawBaselines::Entry* raw = raws_ ? raws_->For(c_, r.wire_bytes) : nullptr;
    for (int rep = 0; rep < FLAGS_repeats; ++rep) {
      if (raw) r.raw_ops.push_back(raws_->Repeat(raw));
      const double t = RunAll(n, &r.lat_us);
      if (!FirstError().empty()) {
        r.error = FirstError();
        return r;
      }
      const double ops = static_cast<double>(n) * W / t;
      r.ops.push_back(ops);
      r.gbps.push_back(ops * static_cast<double>(r.wire_bytes) / 1e9);
      if (c_.mode == "sparse") r.keys_per_s.push_back(ops * c_.keys);
    }
    Verify(&r);
    return r;
  }

 private:
  std::string FirstError() const {
    for (const auto& s : ws_)
      if (!s.error.empty()) return s.error;
    return "";
  }

  // Runs n requests on every worker at once; returns the wall time of the slowest.
  double RunAll(uint64_t n, std::vector<double>* lat) {
    const int W = static_cast<int>(ws_.size());
    Latch start(W + 1);
    std::vector<std::thread> th;
    // Each worker thread takes its own start time: on a busy machine this thread may run
    // again only after the workers have finished, and a start taken here would make the
    // warm-up look instantaneous (the calibration then asked for max_requests, and one
    // case of a 0.05 s run took over a minute).
    std::vector<Clock::time_point> starts(W), ends(W);
    for (int i = 0; i < W; ++i) {
      th.emplace_back([&, i] {
        ws_[i].lat_us.clear();
        start.ArriveAndWait();
        starts[i] = Clock::now();
        RunWorker(&ws_[i], n);
        ends[i] = Clock::now();
      });
    }
    if (cl_->joined) ws_[0].w->Barrier(Group::kWorkers, std::chrono::seconds(300));
    start.ArriveAndWait();
    for (auto& t : th) t.join();
    const auto t0 = *std::min_element(starts.begin(), starts.end());
    const auto t1 = *std::max_element(ends.begin(), ends.end());
    if (lat)
      for (auto& s : ws_) lat->insert(lat->end(), s.lat_us.begin(), s.lat_us.end());
    return Secs(t1 - t0);
  }

  // Checks a completed pull in slot `slot` (sampled elements).
  void CheckPulled(WorkerCase* s, size_t slot, uint64_t batch) {
    if (!FLAGS_verify || !s->verify_error.empty()) return;
    // Narrowed values (--wire_dtype): a sum rounded to fp16/bf16 stays an integer but is
    // no longer a multiple of the pushed value; the final check below is exact.
    const bool narrowed = WireDTypeFlag() != WireDType::kFloat32;
    const std::vector<float>& out = s->out[slot];
    if (c_.mode == "sparse") {
      const uint32_t dim = c_.dim;
      const size_t step = std::max<size_t>(1, c_.keys / 61);
      for (size_t i = 0; i < c_.keys; i += step) {
        const float v = out[i * dim];
        bool ok = v >= 0 && v == std::floor(v);
        for (uint32_t j = 1; j < dim && ok; ++j) ok = out[i * dim + j] == v;
        if (c_.op == "pull" && ok) ok = v >= 1;  // every key was pre-pushed at least once
        if (!ok) {
          s->verify_error = "sparse row " + std::to_string(i) + " of batch " +
                            std::to_string(batch) + " holds " + std::to_string(v) +
                            " (not a consistent push count)";
          return;
        }
      }
      return;
    }
    const size_t step = std::max<size_t>(1, elems_ / 61);
    for (size_t i = 0; i < elems_; i += step) {
      const float k = out[i] / G(i);
      const bool ok =
          c_.op == "pull" && !cl_->joined ? out[i] == G(i)
          : narrowed ? (std::isfinite(out[i]) && out[i] >= G(i) && out[i] == std::floor(out[i]))
                     : (k >= 1 && k == std::floor(k));
      if (!ok) {
        s->verify_error = "element " + std::to_string(i) + " = " + std::to_string(out[i]) +
                          ", expected a multiple of " + std::to_string(G(i));
        return;
      }
    }
  }

  void RunWorker(WorkerCase* s, uint64_t n) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<size_t> free_slots;
    std::vector<uint64_t> slot_batch(c_.inflight, 0);
    std::vector<bool> slot_used(c_.inflight, false);
    for (int i = c_.inflight - 1; i >= 0; --i) free_slots.push_back(i);
    uint64_t completed = 0;
    std::string error;
    const bool pulls = c_.op != "push";
    const bool pushes = c_.op != "pull";
    for (uint64_t j = 0; j < n; ++j) {
      size_t slot;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return !free_slots.empty(); });
        if (!error.empty()) break;  // stop issuing after a failure
        slot = free_slots.back();
        free_slots.pop_back();
      }
      if (slot_used[slot] && pulls) CheckPulled(s, slot, slot_batch[slot]);
      slot_used[slot] = true;
      const auto t0 = Clock::now();
      auto done = [&, slot, t0](const Status& st) {
        const double us = Secs(Clock::now() - t0) * 1e6;
        std::lock_guard<std::mutex> l(mu);
        s->lat_us.push_back(us);
        if (!st.ok() && error.empty()) error = st.ToString();
        free_slots.push_back(slot);
        ++completed;
        cv.notify_one();
      };
      if (pushes) ++s->pushes;
      // One in flight: the synchronous API (Worker::Wait on the ticket), unless --nowait_one.
      const bool wait = FLAGS_wait_one && c_.inflight == 1;
      const Worker::Callback cb = wait ? Worker::Callback() : Worker::Callback(done);
      auto finish = [&](Ticket t) {
        if (wait) done(s->w->Wait(t, std::chrono::seconds(120)));
      };
      if (c_.mode == "dense") {
        float* out = pulls ? s->out[slot].data() : nullptr;
        if (c_.op == "push")
          finish(s->w->Push(s->tables[0], s->in.data(), elems_, cb));
        else if (c_.op == "pull")
          finish(s->w->Pull(s->tables[0], out, elems_, cb));
        else
          finish(s->w->PushPull(s->tables[0], s->in.data(), out, elems_, cb));
      } else if (c_.mode == "sparse") {
        const uint64_t b = j % s->key_batches.size();
        slot_batch[slot] = b;
        const Key* keys = s->key_batches[b].data();
        const size_t len = c_.keys * c_.dim;
        if (pushes) ++s->batch_uses[b];
        if (c_.op == "push")
          finish(s->w->PushSparse(s->tables[0], keys, c_.keys, s->in.data(), len, cb));
        else if (c_.op == "pull")
          finish(s->w->PullSparse(s->tables[0], keys, c_.keys, s->out[slot].data(), len, cb));
        else {
          // No sparse push-pull call: push then pull, both in flight (one "request").
          auto both = std::make_shared<std::atomic<int>>(2);
          auto first = std::make_shared<Status>();
          auto fin = [both, first, done](const Status& st) {
            if (!st.ok()) *first = st;
            if (both->fetch_sub(1) == 1) done(*first);
          };
          s->w->PushSparse(s->tables[0], keys, c_.keys, s->in.data(), len, fin);
          s->w->PullSparse(s->tables[0], keys, c_.keys, s->out[slot].data(), len, fin);
        }
      } else if (c_.mode == "stepmany") {
        // One step: every tensor its own table, all in one Worker::PushMany request.
        const uint64_t per = elems_ / c_.tensors;
        if (s->refs.empty()) {
          for (int t = 0; t < c_.tensors; ++t)
            s->refs.push_back(DenseRef{s->tables[t], s->in.data() + t * per, per});
        }
        s->w->PushMany(s->refs, done);
      } else if (c_.mode == "step") {
        // One step: every tensor pushed as its own table, all in flight.
        const uint64_t per = elems_ / c_.tensors;
        auto left = std::make_shared<std::atomic<int>>(c_.tensors);
        auto first = std::make_shared<Status>();
        auto fin = [left, first, done](const Status& st) {
          if (!st.ok()) *first = st;
          if (left->fetch_sub(1) == 1) done(*first);
        };
        for (int t = 0; t < c_.tensors; ++t) {
          s->w->Push(s->tables[t], s->in.data() + t * per, per, fin);
        }
      } else {  // stepfused: pack the tensors into one buffer, push it as one table
        const uint64_t per = elems_ / c_.tensors;
        {
          // The previous fused push must be done before the buffer is rewritten.
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return completed == j; });
        }
        std::vector<const float*> srcs(c_.tensors);
        std::vector<size_t> lens(c_.tensors, per);
        for (int t = 0; t < c_.tensors; ++t) srcs[t] = s->in.data() + t * per;
        pack::Fuse(srcs.data(), lens.data(), c_.tensors, pack::WireType::kFloat32, s->fused.data());
        s->w->Push(s->tables[0], s->fused.data(), per * c_.tensors, done);
      }
    }
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return free_slots.size() == static_cast<size_t>(c_.inflight); });
    if (!error.empty() && s->error.empty()) s->error = error;
    l.unlock();
    if (pulls) {
      for (int i = 0; i < c_.inflight; ++i)
        if (slot_used[i]) CheckPulled(s, i, slot_batch[i]);
    }
  }

  // Final state: exact for a local cluster, consistent multiples when joined.
  void Verify(Result* r) {
    for (const auto& s : ws_) {
      if (!s.verify_error.empty()) {
        r->verify_note = s.verify_error;
        return;
      }
    }
    if (!FLAGS_verify) {
      r->verify_note = "not verified (--noverify)";
      return;
    }
    const bool narrowed = WireDTypeFlag() != WireDType::kFloat32;
    if (narrowed && cl_->joined) {
      r->verify_note = std::string("not verified (--wire_dtype=") + FLAGS_wire_dtype +
                       " with --join: other workers' pushes round too)";
      return;
    }
    Worker* w = ws_[0].w;
    uint64_t total = 0;
    for (const auto& s : ws_) total += s.pushes;
    if (c_.mode == "sparse") {
      // Expected count of every key of worker 0's batch 0.
      const auto& keys = ws_[0].key_batches[0];
      std::unordered_map<Key, double> expect;
      expect.reserve(keys.size() * 2);
      for (Key k : keys) expect[k] = 0;
      for (const auto& s : ws_) {
        for (size_t b = 0; b < s.key_batches.size(); ++b) {
          if (s.batch_uses[b] == 0) continue;
          for (Key k : s.key_batches[b]) {
            auto it = expect.find(k);
            if (it != expect.end()) it->second += s.batch_uses[b];
          }
        }
      }
      std::vector<float> rows(keys.size() * c_.dim);
      Status st = w->Wait(
          w->PullSparse(ws_[0].tables[0], keys.data(), keys.size(), rows.data(), rows.size()),
          std::chrono::seconds(120));
      if (!st.ok()) {
        r->verify_note = "final pull: " + st.ToString();
        return;
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        const double want = expect[keys[i]];
        for (uint32_t j = 0; j < c_.dim; ++j) {
          const float v = rows[i * c_.dim + j];
          if (cl_->joined ? !(v >= want) : v != OnWire(static_cast<float>(want))) {
            r->verify_note = "key " + std::to_string(keys[i]) + " holds " + std::to_string(v) +
                             ", expected " + std::to_string(want);
            return;
          }
        }
      }
      r->verified = true;
      r->verify_note =
          "every reply sampled; final rows of " + std::to_string(keys.size()) + " keys exact";
      return;
    }
    // Dense, step, stepfused: every element = (number of pushes) * G(i).
    std::vector<float> out(elems_);
    const bool per_tensor = c_.mode == "step" || c_.mode == "stepmany";
    const uint64_t per = per_tensor ? elems_ / c_.tensors : elems_;
    for (size_t t = 0; t < ws_[0].tables.size(); ++t) {
      Status st =
          w->Wait(w->Pull(ws_[0].tables[t], out.data() + t * per, per), std::chrono::seconds(120));
      if (!st.ok()) {
        r->verify_note = "final pull: " + st.ToString();
        return;
      }
    }
    const uint64_t checked = per_tensor ? per * c_.tensors : elems_;
    for (uint64_t i = 0; i < checked; ++i) {
      const float want = OnWire(static_cast<float>(total) * G(i));
      const float k = out[i] / G(i);
      if (cl_->joined ? !(k >= total && k == std::floor(k)) : out[i] != want) {
        r->verify_note = "element " + std::to_string(i) + " = " + std::to_string(out[i]) +
                         ", expected " + std::to_string(want);
        return;
      }
    }
    r->verified = true;
    r->verify_note = std::string("every reply sampled; final ") + std::to_string(checked) +
                     " elements exact (" + std::to_string(total) + " pushes" +
                     (narrowed ? ", sums rounded once to " + FLAGS_wire_dtype : "") + ")";
  }

  Cluster* cl_;
  RawBaselines* raws_;
  Case c_;
  uint64_t id_;
  uint64_t elems_ = 0;
  std::vector<WorkerCase> ws_;
};

// ---- Output ------------------------------------------------------------------------------

struct Summary {
  double med = 0, min = 0, max = 0;
};
Summary Summarize(const std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  s.med = Median(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20)
      o += ' ';
    else
      o += ch;
  }
  return o;
}

void PrintTable(const std::vector<Result>& rs) {
  // Two ratio columns, each with one meaning: "vs raw" is LayerPS ops/s over raw ZeroMQ's
  // for the same bytes (dense and sparse rows); "step/push" is a step's time over one
  // push of the same total bytes (step rows).
  std::printf("\n%-58s %9s %23s %12s %12s %9s %9s %7s %9s %s\n", "case", "bytes",
              "GB/s med [min, max]", "ops/s med", "keys/s med", "p50 us", "p99 us", "vs raw",
              "step/push", "verified");
  for (const auto& r : rs) {
    if (!r.error.empty()) {
      std::printf("%-58s ERROR %s\n", r.c.Label().c_str(), r.error.c_str());
      continue;
    }
    const Summary g = Summarize(r.gbps), o = Summarize(r.ops), k = Summarize(r.keys_per_s);
    char range[64];
    std::snprintf(range, sizeof range, "%.3f [%.3f, %.3f]", g.med, g.min, g.max);
    char vs_raw[16] = "-", step_push[16] = "-";
    const bool step_row = r.c.mode != "dense" && r.c.mode != "sparse";
    if (r.ratio > 0)
      std::snprintf(step_row ? step_push : vs_raw, sizeof vs_raw, "%.2f", r.ratio);
    char keys[24] = "-";
    if (!r.keys_per_s.empty()) std::snprintf(keys, sizeof keys, "%.3gM", k.med / 1e6);
    char p50[16] = "-", p99[16] = "-";
    if (!r.lat_us.empty()) {
      std::snprintf(p50, sizeof p50, "%.0f", Percentile(r.lat_us, 0.5));
      std::snprintf(p99, sizeof p99, "%.0f", Percentile(r.lat_us, 0.99));
    }
    std::printf("%-58s %9s %23s %12.0f %12s %9s %9s %7s %9s %s\n", r.c.Label().c_str(),
                HumanBytes(r.wire_bytes).c_str(), range, o.med, keys, p50, p99, vs_raw, step_push,
                r.verified ? "yes" : ("NO: " + r.verify_note).c_str());
  }
}

void WriteCsv(const std::string& path, const std::vector<Result>& rs) {
  std::ofstream f(path);
  if (!f) Die("cannot write " + path, 1);
  f << "system,transport,servers,workers,mode,op,bytes,inflight,keys,dim,dist,tensors,requests_per_"
       "repeat,"
       "repeats,gbps_median,gbps_min,gbps_max,ops_median,ops_min,ops_max,keys_per_s_median,p50_us,"
       "p99_us,"
       "ratio,ratio_of,verified,error\n";
  for (const auto& r : rs) {
    const Summary g = Summarize(r.gbps), o = Summarize(r.ops), k = Summarize(r.keys_per_s);
    f << r.c.system << ',' << r.c.transport << ',' << r.c.servers << ',' << r.c.workers << ','
      << r.c.mode << ',' << r.c.op << ',' << r.wire_bytes << ',' << r.c.inflight << ',' << r.c.keys
      << ',' << r.c.dim << ',' << r.c.dist << ',' << r.c.tensors << ',' << r.requests_per_repeat
      << ',' << r.gbps.size() << ',' << g.med << ',' << g.min << ',' << g.max << ',' << o.med << ','
      << o.min << ',' << o.max << ',' << k.med << ',' << Percentile(r.lat_us, 0.5) << ','
      << Percentile(r.lat_us, 0.99) << ',' << r.ratio << ',' << r.ratio_of << ','
      << (r.verified ? 1 : 0) << ",\"" << JsonEscape(r.error) << "\"\n";
  }
}

// The CPU model from /proc/cpuinfo ("model name"), or "" where there is none.
std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

// Where the results came from, for the JSON and the plot's footer: version, commit,
// machine (host name and CPU model), cores and date (UTC, ISO 8601).
void WriteJson(const std::string& path, const std::vector<Result>& rs, const std::string& cmdline,
               const Options& options) {
  std::ofstream f(path);
  if (!f) Die("cannot write " + path, 1);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char date[32] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  const std::string cpu = CpuModel();
  f << "{\n  \"command\": \"" << JsonEscape(cmdline) << "\",\n  \"version\": \""
    << JsonEscape(Version()) << "\",\n  \"commit\": \"" << JsonEscape(BuildCommit())
    << "\",\n  \"host\": \"" << JsonEscape(host) << "\",\n  \"machine\": \""
    << JsonEscape(cpu.empty() ? std::string(host) : std::string(host) + ", " + cpu)
    << "\",\n  \"cpus\": " << std::thread::hardware_concurrency()
    << ",\n  \"streams\": " << options.ResolvedStreams()
    << ",\n  \"io_threads\": " << options.ResolvedIoThreads() << ",\n  \"date\": \"" << date
    << "\",\n  \"results\": [\n";
  for (size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    auto arr = [&](const std::vector<double>& v) {
      std::ostringstream o;
      o << '[';
      for (size_t j = 0; j < v.size(); ++j) o << (j ? ", " : "") << v[j];
      o << ']';
      return o.str();
    };
    const Summary g = Summarize(r.gbps), o = Summarize(r.ops);
    f << "    {\"label\": \"" << JsonEscape(r.c.Label()) << "\", \"system\": \"" << r.c.system
      << "\", \"transport\": \"" << r.c.transport << "\", \"servers\": " << r.c.servers
      << ", \"workers\": " << r.c.workers << ", \"mode\": \"" << r.c.mode << "\", \"op\": \""
      << r.c.op << "\", \"bytes\": " << r.wire_bytes << ", \"inflight\": " << r.c.inflight
      << ", \"keys\": " << r.c.keys << ", \"dim\": " << r.c.dim << ", \"dist\": \"" << r.c.dist
      << "\", \"tensors\": " << r.c.tensors
      << ", \"requests_per_repeat\": " << r.requests_per_repeat << ", \"gbps\": " << arr(r.gbps)
      << ", \"ops_per_s\": " << arr(r.ops) << ", \"keys_per_s\": " << arr(r.keys_per_s)
      << ", \"raw_ops_per_s\": " << arr(r.raw_ops) << ", \"gbps_median\": " << g.med
      << ", \"ops_median\": " << o.med << ", \"p50_us\": " << Percentile(r.lat_us, 0.5)
      << ", \"p99_us\": " << Percentile(r.lat_us, 0.99) << ", \"ratio\": " << r.ratio
      << ", \"ratio_of\": \"" << JsonEscape(r.ratio_of)
      << "\", \"verified\": " << (r.verified ? "true" : "false") << ", \"verify_note\": \""
      << JsonEscape(r.verify_note) << "\", \"error\": \"" << JsonEscape(r.error) << "\"}"
      << (i + 1 < rs.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

// The plot script: --plot_script, else layerps-bench-plot installed beside this program,
// else the source tree's bench/plot.py (a build tree).
std::string PlotScript() {
  if (!FLAGS_plot_script.empty()) return FLAGS_plot_script;
  char self[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    if (access((dir + "layerps-bench-plot").c_str(), R_OK) == 0) return dir + "layerps-bench-plot";
  }
  return LAYERPS_BENCH_PLOT_SCRIPT;
}

// Ratios measured in the same run: LayerPS against raw ZeroMQ of the same bytes (push and
// pull against one-way streaming, pushpull against round trips with the same window), the
// step cases against one push of the same total bytes, and ipc/inproc against tcp.
void ComputeRatios(std::vector<Result>* rs) {
  auto find = [&](auto pred) -> const Result* {
    for (const auto& r : *rs)
      if (r.error.empty() && !r.ops.empty() && pred(r)) return &r;
    return nullptr;
  };
  for (auto& r : *rs) {
    if (!r.error.empty() || r.ops.empty() || r.c.system != "layerps") continue;
    const Case& c = r.c;
    if (c.mode == "dense" || c.mode == "sparse") {
      if (!r.raw_ops.empty()) {
        r.ratio = Median(r.ops) / Median(r.raw_ops);
        r.ratio_of = std::string("ops/s vs raw-zmq ") + (c.op == "pushpull" ? "rtt" : "oneway") +
                     " (paired repeats)";
      }
    } else {
      const Result* one = find([&](const Result& x) {
        return x.c.system == "layerps" && x.c.mode == "dense" && x.c.op == "push" &&
               x.c.inflight == 1 && x.c.transport == c.transport && x.c.servers == c.servers &&
               x.c.workers == c.workers && x.wire_bytes == r.wire_bytes;
      });
      if (one) {
        r.ratio = Median(one->ops) / Median(r.ops);  // step time / one-push time
        r.ratio_of = "step time / one push of the same bytes";
      }
    }
  }
}

// Extra ratios for the summary: same-host transports against tcp.
void PrintTransportRatios(const std::vector<Result>& rs) {
  bool header = false;
  for (const auto& r : rs) {
    if (r.c.system != "layerps" || r.c.transport == "tcp" || !r.error.empty() || r.ops.empty())
      continue;
    for (const auto& t : rs) {
      if (t.c.system == r.c.system && t.c.transport == "tcp" && t.c.mode == r.c.mode &&
          t.c.op == r.c.op && t.wire_bytes == r.wire_bytes && t.c.inflight == r.c.inflight &&
          t.c.servers == r.c.servers && t.c.workers == r.c.workers && t.c.keys == r.c.keys &&
          !t.ops.empty()) {
        if (!header) {
          std::printf("\nSame-host transports vs tcp (ops/s medians, same run):\n");
          header = true;
        }
        std::printf("  %-58s %s/tcp = %.2f\n", r.c.Label().c_str(), r.c.transport.c_str(),
                    Median(r.ops) / Median(t.ops));
      }
    }
  }
}

int Main(int argc, char** argv) {
  const char* usage =
      "layerps-bench: push/pull throughput and latency of LayerPS, with a raw ZeroMQ baseline.\n\n"
      "Usage: layerps-bench [flags]\n"
      "  Starts a local cluster in this process for every transport x topology and runs every\n"
      "  case (mode x op x size or key count x in-flight count) on it; with --join it is one\n"
      "  worker of an existing cluster (layerps-launch sets LAYERPS_SCHEDULER etc.).\n"
      "  Throughput: GB/s counts the value bytes of one direction (pushed, or pulled for pull;\n"
      "  sparse push counts keys + rows). Byte counts in binary units (K = 1024 bytes).\n"
      "  vs raw: LayerPS ops/s over raw ZeroMQ ops/s for the same message bytes (push/pull vs\n"
      "  one-way streaming, which keeps no window; pushpull vs round trips with the same\n"
      "  window), each LayerPS repeat paired with a raw repeat run just before it. step/push:\n"
      "  for step cases, the step's time over one push of the same total bytes. With several workers,\n"
      "  ops/s and GB/s are totals. ipc/inproc cases also print their ratio to the tcp case.\n"
      "  Every case verifies the values it moved (exit code 1 if any case fails).\n"
      "  --noshared_memory turns off the same-host shared-memory path of ipc://.\n"
      "  See docs/benchmarks.md.\n"
      "  Examples:\n"
      "    layerps-bench --quick\n"
      "    layerps-bench --targets --json=r.json --csv=r.csv --plot=r.png\n"
      "    layerps-bench --modes=sparse --ops=push,pull --sparse_keys=100000 --dist=uniform,zipf\n"
      "    layerps-bench --transports=tcp,ipc --sizes=4M --ops=push --inflight=8";
  const std::string cmdline = [&] {
    std::string s;
    for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
    return s;
  }();
  cli::ParseOrExit(argc, argv, usage);
  auto is_default = [](const char* name) {
    gflags::CommandLineFlagInfo info;
    return gflags::GetCommandLineFlagInfo(name, &info) && info.is_default;
  };
  auto preset = [&](const char* name, const char* value) {
    if (is_default(name)) gflags::SetCommandLineOption(name, value);
  };
  if (FLAGS_quick) {
    preset("sizes", "4K,256K,4M");
    preset("inflight", "1,8");
    preset("modes", "dense,sparse,step");
    preset("sparse_keys", "10000");
    preset("key_space", "1000000");
    preset("repeats", "3");
    preset("seconds", "0.1");
    preset("step_tensors", "20");
  }
  if (FLAGS_repeats < 1 || FLAGS_repeats > 1000) Die("--repeats must be 1..1000");
  if (!(FLAGS_seconds >= 0.01 && FLAGS_seconds <= 60)) Die("--seconds must be 0.01..60");
  if (FLAGS_dim < 1 || FLAGS_dim > 4096) Die("--dim must be 1..4096");
  if (!ParseWireDType(FLAGS_wire_dtype).ok()) Die("--wire_dtype must be fp32, fp16 or bf16");
  if (FLAGS_key_space < 1) Die("--key_space must be >= 1");
  if (!(FLAGS_zipf_s > 0)) Die("--zipf_s must be > 0");
  if (FLAGS_key_batches < 1 || FLAGS_key_batches > 64) Die("--key_batches must be 1..64");
  if (FLAGS_step_tensors < 1 || FLAGS_step_tensors > 10000) Die("--step_tensors must be 1..10000");
  if (FLAGS_min_requests < 1 || FLAGS_max_requests < FLAGS_min_requests)
    Die("bad --min_requests/--max_requests");

  auto base = OptionsFromFlags();
  if (!base.ok()) Die(base.status().ToString());

  // Build the case list.
  struct Topo {
    int s, w;
  };
  std::vector<Topo> topos;
  for (const auto& t : Split(FLAGS_topologies)) {
    int s = 0, w = 0;
    if (std::sscanf(t.c_str(), "%dx%d", &s, &w) != 2 || s < 1 || w < 1 || s > 64 || w > 64) {
      Die("bad topology '" + t + "' (want SxW, e.g. 2x4)");
    }
    topos.push_back({s, w});
  }
  std::vector<int> inflight;
  for (const auto& s : Split(FLAGS_inflight)) {
    const int v = std::atoi(s.c_str());
    if (v < 1 || v > 4096) Die("bad --inflight value '" + s + "'");
    inflight.push_back(v);
  }
  std::vector<uint64_t> sizes;
  for (const auto& s : Split(FLAGS_sizes)) sizes.push_back((ParseBytes(s) + 3) / 4 * 4);
  const std::vector<std::string> ops = Split(FLAGS_ops), modes = Split(FLAGS_modes),
                                 transports = Split(FLAGS_transports), dists = Split(FLAGS_dist);
  for (const auto& o : ops)
    if (o != "push" && o != "pull" && o != "pushpull") Die("bad --ops value '" + o + "'");
  for (const auto& m : modes)
    if (m != "dense" && m != "sparse" && m != "step") Die("bad --modes value '" + m + "'");
  for (const auto& t : transports)
    if (t != "tcp" && t != "ipc" && t != "inproc") Die("bad --transports value '" + t + "'");
  for (const auto& d : dists)
    if (d != "uniform" && d != "zipf") Die("bad --dist value '" + d + "'");
  std::vector<uint64_t> sparse_keys;
  for (const auto& s : Split(FLAGS_sparse_keys)) {
    const uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (v < 1 || v > (1u << 26)) Die("bad --sparse_keys value '" + s + "'");
    sparse_keys.push_back(v);
  }
  const uint64_t step_bytes = (ParseBytes(FLAGS_step_bytes) + 3) / 4 * 4;

  struct Group {
    std::string transport;
    Topo topo;
    std::vector<Case> cases;
    int streams = 0;  // --sweep_streams: this cluster's Options::streams (0: --streams)
  };
  std::vector<Group> groups;
  auto add_group = [&](const std::string& tr, Topo tp, bool targets_ipc) {
    Group g{tr, tp, {}};
    Case base_case;
    base_case.transport = tr;
    base_case.servers = tp.s;
    base_case.workers = tp.w;
    for (const auto& m : modes) {
      if (m == "dense") {
        for (const auto& o : ops)
          for (uint64_t b : sizes)
            for (int f : inflight) {
              Case c = base_case;
              c.mode = "dense";
              c.op = o;
              c.bytes = b;
              c.inflight = f;
              g.cases.push_back(c);
            }
      } else if (m == "sparse" && !targets_ipc) {
        for (const auto& o : ops)
          for (uint64_t k : sparse_keys)
            for (const auto& d : dists)
              for (int f : inflight) {
                Case c = base_case;
                c.mode = "sparse";
                c.op = o;
                c.keys = k;
                c.dim = FLAGS_dim;
                c.dist = d;
                c.inflight = f;
                g.cases.push_back(c);
              }
      } else if (m == "step" && !targets_ipc) {
        Case c = base_case;
        c.tensors = FLAGS_step_tensors;
        c.bytes = step_bytes * FLAGS_step_tensors;
        c.inflight = 1;
        c.op = "push";
        c.mode = "step";
        g.cases.push_back(c);
        c.mode = "stepmany";
        g.cases.push_back(c);
        c.mode = "stepfused";
        g.cases.push_back(c);
        c.mode = "dense";
        g.cases.push_back(c);  // the reference: one push of the same bytes
      }
    }
    groups.push_back(std::move(g));
  };
  if (FLAGS_targets) {
    // Dense 1x1 tcp: push/pull at 256K/4M/32M x 8, pushpull 4K x 1; sparse; step; ipc 4M.
    Topo one{1, 1};
    Group g{"tcp", one, {}};
    Case c;
    for (const char* op : {"push", "pull"})
      for (uint64_t b : {256ull << 10, 4ull << 20, 32ull << 20}) {
        c = Case();
        c.op = op;
        c.bytes = b;
        c.inflight = 8;
        g.cases.push_back(c);
      }
    c = Case();
    c.op = "pushpull";
    c.bytes = 4096;
    c.inflight = 1;
    g.cases.push_back(c);
    for (const char* op : {"push", "pull"}) {
      c = Case();
      c.mode = "sparse";
      c.op = op;
      c.keys = 100000;
      c.dim = 16;
      c.dist = "uniform";
      c.inflight = 8;
      g.cases.push_back(c);
    }
    for (const char* m : {"step", "stepmany", "stepfused", "dense"}) {
      c = Case();
      c.mode = m;
      c.op = "push";
      c.tensors = 100;
      c.bytes = 100 * 4096;
      c.inflight = 1;
      g.cases.push_back(c);
    }
    c = Case();
    c.op = "push";
    c.bytes = 4u << 20;
    c.inflight = 8;
    g.cases.push_back(c);  // tcp ref for ipc
    groups.push_back(g);
    Group gi{"ipc", one, {}};
    for (const char* op : {"push", "pull"}) {
      c = Case();
      c.transport = "ipc";
      c.op = op;
      c.bytes = 4u << 20;
      c.inflight = 8;
      gi.cases.push_back(c);
    }
    groups.push_back(gi);
  } else if (FLAGS_join) {
    add_group("joined", Topo{0, 0}, false);
  } else {
    for (const auto& tr : transports)
      for (const auto& tp : topos) add_group(tr, tp, false);
  }
  // --sweep_streams: every group once per value.
  if (!FLAGS_sweep_streams.empty()) {
    if (FLAGS_join) Die("--sweep_streams starts local clusters: not with --join");
    std::vector<Group> swept;
    for (const auto& s : Split(FLAGS_sweep_streams)) {
      const int v = std::atoi(s.c_str());
      if (v < 1 || v > 16) Die("bad --sweep_streams value '" + s + "' (1..16)");
      for (Group g : groups) {
        g.streams = v;
        for (auto& c : g.cases) c.streams = v;
        swept.push_back(std::move(g));
      }
    }
    groups.swap(swept);
  }
  // Deduplicate (the step reference may repeat a dense case).
  for (auto& g : groups) {
    std::vector<Case> uniq;
    for (const auto& c : g.cases) {
      bool dup = false;
      for (const auto& u : uniq) dup = dup || (u.Label() == c.Label());
      if (!dup) uniq.push_back(c);
    }
    g.cases = uniq;
  }
  size_t total = 0;
  for (const auto& g : groups) total += g.cases.size();

  std::vector<Result> results;
  size_t done = 0;
  const auto started = Clock::now();
  auto progress = [&](const Result& r) {
    ++done;
    if (!FLAGS_progress) return;
    const double el = Secs(Clock::now() - started);
    const double eta = el / done * (total - done);
    std::fprintf(stderr, "[%zu/%zu %.0fs, eta %.0fs] %s: %s\n", done, total, el, eta,
                 r.c.Label().c_str(),
                 !r.error.empty() ? ("ERROR " + r.error).c_str()
                 : r.ops.empty()
                     ? "no data"
                     : (std::to_string(Median(r.gbps)).substr(0, 6) + " GB/s, " +
                        std::to_string(static_cast<uint64_t>(Median(r.ops))) + " ops/s" +
                        (r.raw_ops.empty()
                             ? std::string()
                             : ", raw " + std::to_string(static_cast<uint64_t>(Median(r.raw_ops))) +
                                   " ops/s, vs raw " +
                                   std::to_string(Median(r.ops) / Median(r.raw_ops)).substr(0, 4)) +
                        (r.verified ? "" : ", NOT VERIFIED: " + r.verify_note))
                           .c_str());
  };
  RawBaselines raws;
  uint64_t case_id = 0;
  for (auto& g : groups) {
    Cluster cl;
    Options opts = *base;
    if (g.streams > 0) opts.streams = g.streams;
    Status st = FLAGS_join ? cl.Join(opts) : cl.StartLocal(opts, g.transport, g.topo.s, g.topo.w);
    if (!st.ok()) DieStatus(FLAGS_join ? "cannot join the cluster" : "cannot start the cluster", st);
    for (auto c : g.cases) {
      if (FLAGS_join) {
        const std::string& a = base->scheduler_address;
        c.transport = "join-" + a.substr(0, a.find(':'));
        c.servers = cl.workers[0]->num_servers();
        c.workers = cl.workers[0]->num_workers();
      }
      LayerPSRunner runner(&cl, FLAGS_baseline ? &raws : nullptr, c, case_id++);
      results.push_back(runner.Run());
      progress(results.back());
    }
    cl.Shutdown();
  }
  {
    std::vector<Result> all = raws.Results();
    all.insert(all.end(), results.begin(), results.end());
    results.swap(all);
  }
  ComputeRatios(&results);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string streams =
      FLAGS_sweep_streams.empty()
          ? std::to_string(base->ResolvedStreams()) + " stream(s) per peer, " +
                std::to_string(base->ResolvedIoThreads()) + " I/O thread(s) per node"
          : "streams per peer swept over " + FLAGS_sweep_streams +
                (base->io_threads > 0 ? ", " + std::to_string(base->io_threads) + " I/O thread(s)"
                                      : ", one I/O thread per stream");
  std::printf("layerps-bench on %s, %u CPUs; %d repeats of ~%.2fs per case; %s\n", host,
              std::thread::hardware_concurrency(), FLAGS_repeats, FLAGS_seconds, streams.c_str());
  PrintTable(results);
  PrintTransportRatios(results);
  std::string json = FLAGS_json;
  if (!FLAGS_plot.empty() && json.empty()) json = FLAGS_plot + ".json";
  if (!json.empty()) WriteJson(json, results, cmdline, *base);
  if (!FLAGS_csv.empty()) WriteCsv(FLAGS_csv, results);
  if (!FLAGS_plot.empty()) {
    const std::string cmd =
        "/usr/bin/python3 '" + PlotScript() + "' '" + json + "' '" + FLAGS_plot + "'";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "layerps-bench: plotting failed: %s\n", cmd.c_str());
  }
  bool ok = true;
  for (const auto& r : results) ok = ok && r.error.empty() && r.verified;
  if (!ok) std::fprintf(stderr, "layerps-bench: some cases failed or were not verified\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace ps

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  // A run stopped from outside (a test's timeout) still shows the cases it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return ps::bench::Main(argc, argv);
}
