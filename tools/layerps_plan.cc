// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-plan: prints a placement plan for a model on a cluster, and every strategy's
// predictions side by side (docs/placement.md). Exit 0 on success, 2 on any bad input
// (one line on stderr), 1 when a file cannot be written.
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "ps/optcnn.h"
#include "ps/placement.h"

DEFINE_string(model, "",
              "Model: alexnet, vgg16, resnet50, inception_v3, bigfc, or a profile FILE.json "
              "(docs/placement.md)");
DEFINE_int32(workers, 4, "Workers W (>= 1)");
DEFINE_int32(servers, 2, "Servers S (>= 1)");
DEFINE_int32(batch, 32, "Samples per worker per step b (>= 1)");
DEFINE_string(bandwidth, "10Gbit",
              "Every NIC's bandwidth, each direction: 1Gbit, 100Mbit, 25Gbps, 1.25GB/s...");
DEFINE_string(server_bandwidth, "", "Servers' NIC bandwidth; default: --bandwidth");
DEFINE_string(worker_bandwidth, "", "Workers' NIC bandwidth; default: --bandwidth");
DEFINE_string(server_loopback, "",
              "The servers and suffix ranks share one host whose loopback moves this much "
              "(8Gbit...): their transfers among themselves cross no NIC (give --server_link "
              "too when they also share that host's NIC); 0 or none: each server has its own "
              "machine (the default)");
DEFINE_string(worker_loopback, "",
              "The workers share one host whose loopback moves this much (8Gbit...): their "
              "ring all-reduce crosses no NIC (give --worker_link too when they also share "
              "that host's NIC); 0 or none: each worker has its own machine (the default)");
DEFINE_string(worker_link, "",
              "The workers share one link of this bandwidth (one host's NIC, a rack's "
              "uplink), which carries their traffic with the servers (not among themselves); "
              "0 or none: no shared link (the default)");
DEFINE_string(server_link, "",
              "The servers share one link of this bandwidth for their traffic with the "
              "workers; 0 or none: no shared link (the default)");
DEFINE_string(latency, "50us", "One-way message latency: 50us, 0.2ms, 1s...");
DEFINE_string(worker_flops, "5T", "FLOP/s a worker sustains: 5T, 900G, 2.5e12...");
DEFINE_string(server_flops, "5T", "FLOP/s a server sustains (park's PS worker, FC nodes)");
DEFINE_string(worker_memory, "16GiB", "Memory of a worker: 16GiB, 512MB...");
DEFINE_string(server_memory, "64GiB", "Memory of a server");
DEFINE_string(cluster, "",
              "Cluster spec FILE.json; flags given explicitly on the command line override it");
DEFINE_string(strategy, "auto",
              "auto (every strategy LayerPS can execute, the fastest predicted chosen; 'all' "
              "is the same), or one of the strategies listed above (Strategies)");
DEFINE_string(cut, "",
              "park: cut before this layer (it must be a cut point), or 'none'; default: "
              "searched");
DEFINE_string(dedicated_servers, "",
              "park: comma-separated server ranks holding the suffix; default: the last one");
DEFINE_int32(fc_nodes, 0,
             "stanza: number of FC nodes; 0: every count predicted (1..8, the powers of two "
             "and min(workers, servers)) and the fastest that fits kept");
DEFINE_double(min_cut_gain, 0.10,
              "park: a cut must predict a step this fraction shorter than no cut");
DEFINE_bool(park_conv_suffix, false,
            "park: also search cuts that leave conv layers in the suffix (run by the PS worker)");
DEFINE_double(backward_factor, 2.0, "Training FLOPs = (1 + this) x forward FLOPs");
DEFINE_double(embedding_rows_touched, 1.0,
              "Fraction of an embedding's rows a worker touches per step, in (0, 1]: what a "
              "sparse table moves through the servers (hybrid, uniform)");
DEFINE_bool(json, false, "Print JSON (the comparison, or the one plan) instead of tables");
DEFINE_string(write_plan, "", "Write the chosen plan as JSON to this file (with "
              "--strategy=optcnn: the plan that runs --optcnn_run on LayerPS)");
DEFINE_string(optcnn_run, "optcnn",
              "With --strategy=optcnn --write_plan: which strategy's execution plan to write "
              "(optcnn: the search's pick; data; owt; model). Exit 2 when LayerPS cannot run it");
DEFINE_string(write_profile, "", "Write the model profile as JSON to this file");
DEFINE_bool(layers, true, "Print the per-layer table");

namespace {

namespace pl = ps::placement;
const char* kProg = "layerps-plan";

[[noreturn]] void Bad(const std::string& line) { ps::cli::Fail(kProg, line); }

bool Given(const char* flag) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(flag, &info) && !info.is_default;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  *out = ss.str();
  return true;
}

void WriteFileOrDie(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::fprintf(stderr, "%s: cannot write %s\n", kProg, path.c_str());
      std::exit(1);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "%s: cannot write %s\n", kProg, path.c_str());
    std::exit(1);
  }
}

pl::ModelProfile LoadModel(const std::string& name) {
  if (name.empty()) Bad("--model is required");
  for (const std::string& b : pl::BuiltinProfileNames()) {
    if (b == name) return *pl::BuiltinProfile(name);
  }
  std::string text;
  const bool looks_like_path = name.find('/') != std::string::npos ||
                               (name.size() > 5 && name.substr(name.size() - 5) == ".json");
  if (!ReadFile(name, &text) && looks_like_path) Bad("cannot read model file '" + name + "'");
  if (text.empty() && !looks_like_path) {
    std::string known;
    for (const std::string& b : pl::BuiltinProfileNames()) known += (known.empty() ? "" : ", ") + b;
    Bad("unknown model '" + name + "': not a built-in (" + known + ") nor a readable file");
  }
  ps::StatusOr<pl::ModelProfile> m = pl::ModelProfileFromJson(text);
  if (!m.ok()) Bad(name + ": " + m.status().message());
  return *m;
}

template <typename T>
T ParseOrBad(const ps::StatusOr<T>& v, const char* flag) {
  if (!v.ok()) Bad("--" + std::string(flag) + ": " + v.status().message());
  return *v;
}

pl::ClusterSpec LoadCluster() {
  pl::ClusterSpec c;
  if (!FLAGS_cluster.empty()) {
    std::string text;
    if (!ReadFile(FLAGS_cluster, &text)) Bad("cannot read --cluster file '" + FLAGS_cluster + "'");
    ps::StatusOr<pl::ClusterSpec> parsed = pl::ClusterSpecFromJson(text);
    if (!parsed.ok()) Bad(FLAGS_cluster + ": " + parsed.status().message());
    c = *parsed;
  }
  const bool base = FLAGS_cluster.empty();  // without a file, every flag's value applies
  if (base || Given("workers")) c.workers = FLAGS_workers;
  if (base || Given("servers")) c.servers = FLAGS_servers;
  if (base || Given("bandwidth")) {
    c.server_bandwidth_bps = c.worker_bandwidth_bps =
        ParseOrBad(pl::ParseBandwidth(FLAGS_bandwidth), "bandwidth");
  }
  if (!FLAGS_server_bandwidth.empty()) {
    c.server_bandwidth_bps =
        ParseOrBad(pl::ParseBandwidth(FLAGS_server_bandwidth), "server_bandwidth");
  }
  if (!FLAGS_worker_bandwidth.empty()) {
    c.worker_bandwidth_bps =
        ParseOrBad(pl::ParseBandwidth(FLAGS_worker_bandwidth), "worker_bandwidth");
  }
  // 0 or "none" turns a shared link or the loopback off (one a --cluster file set).
  auto optional_bandwidth = [](const std::string& v, const char* flag) {
    return v == "0" || v == "none" ? 0.0 : ParseOrBad(pl::ParseBandwidth(v), flag);
  };
  if (!FLAGS_server_loopback.empty()) {
    c.server_loopback_bps = optional_bandwidth(FLAGS_server_loopback, "server_loopback");
  }
  if (!FLAGS_worker_loopback.empty()) {
    c.worker_loopback_bps = optional_bandwidth(FLAGS_worker_loopback, "worker_loopback");
  }
  if (!FLAGS_worker_link.empty()) {
    c.worker_link_bps = optional_bandwidth(FLAGS_worker_link, "worker_link");
  }
  if (!FLAGS_server_link.empty()) {
    c.server_link_bps = optional_bandwidth(FLAGS_server_link, "server_link");
  }
  if (base || Given("latency"))
    c.latency_s = ParseOrBad(pl::ParseDuration(FLAGS_latency), "latency");
  if (base || Given("worker_flops")) {
    c.worker_flops = ParseOrBad(pl::ParseSiValue(FLAGS_worker_flops), "worker_flops");
  }
  if (base || Given("server_flops")) {
    c.server_flops = ParseOrBad(pl::ParseSiValue(FLAGS_server_flops), "server_flops");
  }
  if (base || Given("worker_memory")) {
    c.worker_memory_bytes = ParseOrBad(pl::ParseBytes(FLAGS_worker_memory), "worker_memory");
  }
  if (base || Given("server_memory")) {
    c.server_memory_bytes = ParseOrBad(pl::ParseBytes(FLAGS_server_memory), "server_memory");
  }
  if (c.workers < 1) Bad("--workers must be >= 1, got " + std::to_string(c.workers));
  if (c.servers < 1) Bad("--servers must be >= 1, got " + std::to_string(c.servers));
  ps::Status s = c.Validate();
  if (!s.ok()) Bad(s.message());
  return c;
}

pl::PlanOptions LoadOptions() {
  pl::PlanOptions o;
  if (FLAGS_batch < 1) Bad("--batch must be >= 1, got " + std::to_string(FLAGS_batch));
  o.batch = static_cast<uint32_t>(FLAGS_batch);
  o.cut_layer = FLAGS_cut;
  if (FLAGS_fc_nodes < 0) Bad("--fc_nodes must be >= 0");
  o.fc_nodes = FLAGS_fc_nodes;
  o.min_cut_gain = FLAGS_min_cut_gain;
  o.park_conv_suffix = FLAGS_park_conv_suffix;
  o.backward_factor = FLAGS_backward_factor;
  o.embedding_rows_touched = FLAGS_embedding_rows_touched;
  if (ps::Status v = o.Validate(); !v.ok()) Bad("--" + v.message());
  std::stringstream ss(FLAGS_dedicated_servers);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long r = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || r < 0 || r > 65535) {
      Bad("--dedicated_servers: '" + item + "' is not a server rank");
    }
    o.dedicated_servers.push_back(static_cast<int>(r));
  }
  ps::Status s = o.Validate();
  if (!s.ok()) Bad(s.message());
  return o;
}

std::string Commas(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Mb(double bytes) { return Fixed(bytes / 1e6, 2); }

std::string Ms(double s) { return Fixed(s * 1e3, 2); }

std::string Ranks(const std::vector<int>& v) {
  if (v.empty()) return "-";
  // Contiguous runs as a..b.
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(v[i]);
    if (j > i) out += ".." + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

std::string Where(const pl::LayerPlacement& p) {
  std::string mode = pl::TrainModeName(p.mode);
  if (p.servers.empty()) return mode;
  return mode + " @ s" + Ranks(p.servers);
}

void PrintLayers(const pl::ModelProfile& m, const pl::Plan& plan) {
  std::printf("\nLayers, placed by %s:\n", plan.strategy.c_str());
  std::printf("%4s  %-28s %-6s %12s %10s %12s  %s\n", "#", "layer", "kind", "params", "MFLOPs",
              "act floats", "where");
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const pl::LayerProfile& l = m.layers[i];
    if (plan.cut == static_cast<int>(i)) {
      for (const pl::CutPoint& c : pl::FindCutPoints(m)) {
        if (c.index != plan.cut) continue;
        std::printf("%4s  ---- cut: the suffix reads %s's %s floats per sample ----\n", "",
                    m.layers[c.producer].name.c_str(), Commas(c.activation_bytes / 4).c_str());
      }
    }
    std::printf("%4zu  %-28s %-6s %12s %10s %12s  %s\n", i, l.name.c_str(),
                pl::LayerKindName(l.kind), Commas(l.param_bytes / 4).c_str(),
                Fixed(l.flops_per_sample / 1e6, 1).c_str(), Commas(l.activation_bytes / 4).c_str(),
                Where(plan.layers[i]).c_str());
  }
}

// Whether any layer of the plan keeps tables on the servers (allreduce, and a hybrid
// without embeddings, use none).
bool UsesServers(const pl::Plan& p) {
  for (const pl::LayerPlacement& l : p.layers) {
    if (!l.servers.empty()) return true;
  }
  return false;
}

// `uniform` is the baseline of the "PS/uni" column, the strategy's PS bytes as a fraction
// of uniform's (0.11: 89% fewer; computed even when the uniform strategy is not among
// those compared). A strategy that uses no server has "-" in the PS and server columns.
void PrintComparison(const pl::Comparison& cmp, const pl::Plan& uniform_plan) {
  const pl::Plan* uniform = &uniform_plan;
  std::printf("\nStrategies (per step; MB = 10^6 bytes):\n");
  std::printf("  %-9s %-16s %-13s %10s %12s %9s %10s %9s %9s %10s %10s\n", "strategy", "cut",
              "busiest NIC", "NIC MB", "PS MB", "PS/uni", "step ms", "comm ms", "comp ms",
              "worker MB", "server MB");
  for (size_t i = 0; i < cmp.plans.size(); ++i) {
    const pl::Plan& p = cmp.plans[i];
    const pl::PlanPrediction& d = p.prediction;
    const pl::NodeLoad& busy = d.nodes[d.busiest];
    const std::string nic =
        std::string(busy.is_server ? "server " : "worker ") + std::to_string(busy.rank);
    const bool servers = UsesServers(p);
    const std::string ratio =
        uniform && servers
            ? Fixed(static_cast<double>(d.worker_bytes) / uniform->prediction.worker_bytes, 3)
            : "-";
    std::printf("%s %-9s %-16s %-13s %10s %12s %9s %10s %9s %9s %10s %10s%s\n",
                static_cast<int>(i) == cmp.chosen ? "*" : " ", p.strategy.c_str(),
                p.cut < 0 ? "none" : p.cut_layer.c_str(), nic.c_str(),
                Mb(static_cast<double>(d.busiest_nic_bytes)).c_str(),
                servers ? Mb(static_cast<double>(d.worker_bytes)).c_str() : "-", ratio.c_str(),
                Ms(d.step_s).c_str(), Ms(d.comm_s).c_str(),
                Ms(d.worker_compute_s + d.server_compute_s).c_str(),
                Mb(static_cast<double>(d.max_worker_memory)).c_str(),
                servers ? Mb(static_cast<double>(d.max_server_memory)).c_str() : "-",
                d.fits_memory ? "" : "  (does not fit)");
  }
  for (const pl::Plan& p : cmp.plans)
    std::printf("  %-9s %s\n", p.strategy.c_str(), p.reason.c_str());
  for (const std::string& s : cmp.skipped) std::printf("  skipped: %s\n", s.c_str());
  std::printf("\nChosen: %s\n", cmp.reason.c_str());
}

// --strategy=optcnn (docs/optcnn.md): per-layer parallel configurations over the workers
// as devices, next to data, model and OWT parallelism. Not part of "all": its plan splits
// layers over devices rather than placing tables on servers.
int RunOptcnn(const pl::ModelProfile& model, const pl::ClusterSpec& cluster,
              const pl::PlanOptions& options) {
  pl::optcnn::Options o;
  o.num_devices = cluster.workers;
  o.batch_size = static_cast<int>(options.batch) * cluster.workers;
  o.backward_factor = 1.0 + options.backward_factor;
  // Progress on stderr for searches that take more than a second (many devices: the cost
  // tables grow as configurations^2 x devices, docs/optcnn.md "Cost").
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  o.progress = [&](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start < std::chrono::seconds(1) || now - last < std::chrono::seconds(2)) return;
    last = now;
    std::fprintf(stderr, "layerps-plan: optcnn: costing configuration pairs, %llu of %llu (%.0f%%)\n",
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
  };
  ps::StatusOr<pl::optcnn::Report> rep = pl::optcnn::Optimize(model, cluster, o);
  if (!rep.ok()) Bad(rep.status().ToString());
  std::cout << (FLAGS_json ? pl::optcnn::ReportToJson(*rep) + "\n"
                           : pl::optcnn::FormatReport(*rep));
  if (FLAGS_write_plan.empty()) return 0;
  const pl::optcnn::ParallelStrategy* run = nullptr;
  if (FLAGS_optcnn_run == "optcnn") run = &rep->optcnn;
  for (const pl::optcnn::ParallelStrategy& b : rep->baselines) {
    if (b.name == FLAGS_optcnn_run) run = &b;
  }
  if (run == nullptr) {
    Bad("unknown --optcnn_run '" + FLAGS_optcnn_run + "' (optcnn, data, model, owt)");
  }
  ps::StatusOr<pl::Plan> plan =
      pl::optcnn::ExecutionPlan(model, cluster, options, *run, rep->num_devices);
  if (!plan.ok()) Bad(plan.status().message());
  WriteFileOrDie(FLAGS_write_plan, pl::PlanToJson(*plan));
  if (!FLAGS_json) std::printf("\nWrote %s: %s\n", FLAGS_write_plan.c_str(), plan->reason.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const pl::StrategyRegistry registry = pl::DefaultStrategies();
  std::string usage =
      "layerps-plan: a layer placement plan for a model on a cluster, and the strategies'\n"
      "predictions side by side (bytes per step at the busiest NIC, PS bytes, step time,\n"
      "memory). Formulas and formats: docs/placement.md.\n\n"
      "Usage: layerps-plan --model=vgg16 --workers=4 --servers=2 --batch=32 --bandwidth=1Gbit\n"
      "       [--strategy=all|NAME] [--cut=LAYER|none] [--json] [--write_plan=FILE]\n\n"
      "Strategies:\n";
  for (const pl::Strategy& s : registry.strategies()) {
    usage += "  " + s.name + std::string(s.name.size() < 10 ? 10 - s.name.size() : 1, ' ') +
             s.summary + "\n";
  }
  usage += "  optcnn    per-layer sample/channel/height/width degrees over the workers (OptCNN),\n"
           "            next to data, model and OWT parallelism; only with --strategy=optcnn\n";
  usage += "\nExit status: 0 ok, 2 bad input (one line on stderr), 1 a file could not be written.";
  ps::cli::ParseOrExit(argc, argv, usage.c_str());

  const pl::ModelProfile model = LoadModel(FLAGS_model);
  const pl::ClusterSpec cluster = LoadCluster();
  const pl::PlanOptions options = LoadOptions();
  if (FLAGS_strategy == "optcnn") return RunOptcnn(model, cluster, options);
  std::vector<std::string> names;
  if (FLAGS_strategy != "all" && FLAGS_strategy != "auto") {
    if (registry.Find(FLAGS_strategy) == nullptr) {
      std::string known;
      for (const std::string& n : registry.Names()) known += (known.empty() ? "" : ", ") + n;
      Bad("unknown --strategy '" + FLAGS_strategy + "' (auto, all, " + known + ", optcnn)");
    }
    names.push_back(FLAGS_strategy);
  }
  ps::StatusOr<pl::Comparison> cmp = pl::ComparePlans(model, cluster, options, registry, names);
  if (!cmp.ok()) Bad(cmp.status().message());
  if (names.empty()) {
    // What auto does not compare, and why (each is still available by name).
    cmp->skipped.push_back(
        "optcnn: not compared (its per-layer search splits layers over devices; run it with "
        "--strategy=optcnn, whose executable picks are stanza plans)");
  }
  ps::StatusOr<pl::Plan> uniform = pl::UniformPlan(model, cluster, options);
  if (!uniform.ok()) Bad(uniform.status().message());
  const pl::Plan& chosen = cmp->plans[cmp->chosen];

  if (!FLAGS_write_profile.empty())
    WriteFileOrDie(FLAGS_write_profile, pl::ModelProfileToJson(model));
  if (!FLAGS_write_plan.empty()) WriteFileOrDie(FLAGS_write_plan, pl::PlanToJson(chosen));
  if (FLAGS_json) {
    std::cout << (names.size() == 1 ? pl::PlanToJson(chosen) : pl::ComparisonToJson(*cmp));
    return 0;
  }

  const std::vector<pl::CutPoint> cuts = pl::FindCutPoints(model);
  std::printf("Model %s: %zu layers, %s parameters (%s MB), %s GFLOPs per sample, %zu cut points\n",
              model.name.c_str(), model.layers.size(), Commas(model.TotalParamBytes() / 4).c_str(),
              Mb(static_cast<double>(model.TotalParamBytes())).c_str(),
              Fixed(model.TotalFlopsPerSample() / 1e9, 2).c_str(), cuts.size());
  auto flops = [](double f) {
    return f >= 1e12 ? Fixed(f / 1e12, 2) + " TFLOP/s" : Fixed(f / 1e9, 2) + " GFLOP/s";
  };
  std::printf(
      "Cluster: %d workers (%s Gbit/s, %s), %d servers (%s Gbit/s, %s), latency %s us; batch "
      "%u per worker\n",
      cluster.workers, Fixed(cluster.worker_bandwidth_bps / 1e9, 3).c_str(),
      flops(cluster.worker_flops).c_str(), cluster.servers,
      Fixed(cluster.server_bandwidth_bps / 1e9, 3).c_str(), flops(cluster.server_flops).c_str(),
      Fixed(cluster.latency_s * 1e6, 1).c_str(), options.batch);
  if (cluster.worker_link_bps > 0 || cluster.server_link_bps > 0) {
    std::printf("Shared links: workers %s, servers %s\n",
                cluster.worker_link_bps > 0
                    ? (Fixed(cluster.worker_link_bps / 1e9, 3) + " Gbit/s").c_str()
                    : "none",
                cluster.server_link_bps > 0
                    ? (Fixed(cluster.server_link_bps / 1e9, 3) + " Gbit/s").c_str()
                    : "none");
  }
  if (cluster.server_loopback_bps > 0) {
    std::printf("The servers and suffix ranks share one host: %s Gbit/s among them (loopback)\n",
                Fixed(cluster.server_loopback_bps / 1e9, 3).c_str());
  }
  if (cluster.worker_loopback_bps > 0) {
    std::printf("The workers share one host: %s Gbit/s among them (loopback)\n",
                Fixed(cluster.worker_loopback_bps / 1e9, 3).c_str());
  }
  if (model.reference_flops > 0) {
    std::printf("Compute: the profile's measured layer times (forward + backward, on a thread "
                "at %s), scaled by each node's FLOP/s\n",
                flops(model.reference_flops).c_str());
  }
  if (FLAGS_layers) PrintLayers(model, chosen);
  PrintComparison(*cmp, *uniform);
  return 0;
}
