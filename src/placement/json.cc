// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// JSON for profiles, cluster specs and plans (docs/placement.md, "Formats"). Readers are
// strict: unknown keys, wrong types, negative sizes and non-finite numbers are errors
// that name the field (and layer), so that a typo never silently becomes a default.
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace {

// Keys keep the order they are written in, so that files read like the docs.
using json = nlohmann::ordered_json;

constexpr int kFormatVersion = 1;
// The most bytes a layer holds (ModelProfile::Validate): no share of one is larger, so a
// layer's shares add up without wrapping around.
constexpr uint64_t kMaxLayerBytes = uint64_t{1} << 40;

// Reads the fields of one JSON object, remembering where it is for the messages.
class Reader {
 public:
  Reader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  Status IsObject() const {
    if (!obj_.is_object()) return Error("", "must be a JSON object");
    return Status::OK();
  }
  // Every key must be one of `known`.
  Status OnlyKeys(const std::set<std::string>& known) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!known.count(it.key())) return Error(it.key(), "unknown key");
    }
    return Status::OK();
  }
  bool Has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& At(const std::string& key) const { return obj_.at(key); }

  Status String(const std::string& key, bool required, std::string* out) const {
    if (!Has(key)) return required ? Error(key, "is required") : Status::OK();
    if (!obj_.at(key).is_string()) return Error(key, "must be a string");
    *out = obj_.at(key).get<std::string>();
    return Status::OK();
  }
  Status Uint(const std::string& key, bool required, uint64_t* out) const {
    if (!Has(key)) return required ? Error(key, "is required") : Status::OK();
    const json& v = obj_.at(key);
    if (v.is_number_unsigned()) {
      *out = v.get<uint64_t>();
      return Status::OK();
    }
    if (v.is_number_integer() || (v.is_number_float() && v.get<double>() < 0)) {
      return Error(key, "must not be negative");
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && d < 1.8e19) {
        *out = static_cast<uint64_t>(d);
        return Status::OK();
      }
    }
    return Error(key, "must be a non-negative integer");
  }
  Status Int(const std::string& key, bool required, int64_t lo, int64_t hi, int64_t* out) const {
    if (!Has(key)) return required ? Error(key, "is required") : Status::OK();
    const json& v = obj_.at(key);
    if (!v.is_number_integer()) return Error(key, "must be an integer");
    const int64_t i = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (i < lo || i > hi) {
      return Error(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = i;
    return Status::OK();
  }
  Status Double(const std::string& key, bool required, double* out) const {
    if (!Has(key)) return required ? Error(key, "is required") : Status::OK();
    const json& v = obj_.at(key);
    if (!v.is_number()) return Error(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Error(key, "must be finite");
    if (d < 0) return Error(key, "must not be negative");
    *out = d;
    return Status::OK();
  }
  // A number, or a string parsed by `parse` (units such as "10Gbit" or "50us").
  Status Quantity(const std::string& key, const std::function<StatusOr<double>(std::string)>& parse,
                  double* out) const {
    if (!Has(key)) return Status::OK();
    const json& v = obj_.at(key);
    if (v.is_string()) {
      StatusOr<double> d = parse(v.get<std::string>());
      if (!d.ok()) return Error(key, d.status().message());
      *out = *d;
      return Status::OK();
    }
    return Double(key, false, out);
  }
  Status Strings(const std::string& key, std::vector<std::string>* out) const {
    if (!Has(key)) return Status::OK();
    const json& v = obj_.at(key);
    if (!v.is_array()) return Error(key, "must be an array of strings");
    out->clear();
    for (const json& e : v) {
      if (!e.is_string()) return Error(key, "must be an array of strings");
      out->push_back(e.get<std::string>());
    }
    return Status::OK();
  }
  Status Ints(const std::string& key, std::vector<int>* out) const {
    if (!Has(key)) return Status::OK();
    const json& v = obj_.at(key);
    if (!v.is_array()) return Error(key, "must be an array of integers");
    out->clear();
    for (const json& e : v) {
      // An unsigned value is compared as one: 2^64 - 1 must not read as -1.
      const bool in_range =
          e.is_number_unsigned()  ? e.get<uint64_t>() <= uint64_t{1} << 20
          : e.is_number_integer() ? e.get<int64_t>() >= -1 && e.get<int64_t>() <= 1 << 20
                                  : false;
      if (!in_range) return Error(key, "must be an array of integers in [-1, 2^20]");
      out->push_back(static_cast<int>(e.get<int64_t>()));
    }
    return Status::OK();
  }
  // Non-negative integers, each at most `max` (`max_text` names it in the message).
  Status Uints(const std::string& key, uint64_t max, const std::string& max_text,
               std::vector<uint64_t>* out) const {
    if (!Has(key)) return Status::OK();
    const json& v = obj_.at(key);
    const std::string what = "must be an array of integers in [0, " + max_text + "]";
    if (!v.is_array()) return Error(key, what);
    out->clear();
    for (const json& e : v) {
      if (!e.is_number_unsigned() || e.get<uint64_t>() > max) return Error(key, what);
      out->push_back(e.get<uint64_t>());
    }
    return Status::OK();
  }
  Status Error(const std::string& key, const std::string& what) const {
    return InvalidArgument(where_ + (key.empty() ? "" : ": '" + key + "'") + " " + what);
  }
  const std::string& where() const { return where_; }

 private:
  const json& obj_;
  std::string where_;
};

StatusOr<json> Parse(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument("bad JSON in " + what + ": " + e.what());
  }
}

Status CheckFormat(const Reader& r, const std::string& format) {
  std::string f;
  PS_RETURN_IF_ERROR(r.String("format", false, &f));
  if (!f.empty() && f != format)
    return r.Error("format", "is '" + f + "', expected '" + format + "'");
  int64_t version = kFormatVersion;
  PS_RETURN_IF_ERROR(r.Int("version", false, 1, 1000, &version));
  if (version != kFormatVersion) {
    return r.Error("version", std::to_string(version) + " is not supported (this LayerPS reads " +
                                  std::to_string(kFormatVersion) + ")");
  }
  return Status::OK();
}

// ---- ModelProfile -----------------------------------------------------------------------

json ShapeToJson(const LayerShape& s) {
  json j = {{"in_channels", s.in_channels}, {"in_height", s.in_height},
            {"in_width", s.in_width},       {"out_channels", s.out_channels},
            {"out_height", s.out_height},   {"out_width", s.out_width},
            {"kernel_h", s.kernel_h},       {"kernel_w", s.kernel_w},
            {"stride", s.stride},           {"padding", s.padding}};
  if (s.padding_w >= 0) j["padding_w"] = s.padding_w;
  return j;
}

Status ShapeFromJson(const json& j, const std::string& where, LayerShape* s) {
  Reader r(j, where + ": shape");
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(
      r.OnlyKeys({"in_channels", "in_height", "in_width", "out_channels", "out_height", "out_width",
                  "kernel_h", "kernel_w", "stride", "padding", "padding_w"}));
  struct Field {
    const char* key;
    uint32_t* out;
  } fields[] = {{"in_channels", &s->in_channels}, {"in_height", &s->in_height},
                {"in_width", &s->in_width},       {"out_channels", &s->out_channels},
                {"out_height", &s->out_height},   {"out_width", &s->out_width},
                {"kernel_h", &s->kernel_h},       {"kernel_w", &s->kernel_w},
                {"stride", &s->stride},           {"padding", &s->padding}};
  for (const Field& f : fields) {
    int64_t v = *f.out;
    PS_RETURN_IF_ERROR(r.Int(f.key, false, 0, UINT32_MAX, &v));
    *f.out = static_cast<uint32_t>(v);
  }
  int64_t pw = s->padding_w;
  PS_RETURN_IF_ERROR(r.Int("padding_w", false, -1, INT32_MAX, &pw));
  s->padding_w = static_cast<int32_t>(pw);
  return Status::OK();
}

json LayerToJson(const LayerProfile& l) {
  json j = {{"name", l.name},
            {"kind", LayerKindName(l.kind)},
            {"param_bytes", l.param_bytes},
            {"flops_per_sample", l.flops_per_sample},
            {"activation_bytes", l.activation_bytes},
            {"inputs", l.inputs},
            {"tables", l.tables}};
  const LayerShape zero;
  const LayerShape& s = l.shape;
  const bool has_shape = s.in_channels || s.in_height || s.in_width || s.out_channels ||
                         s.out_height || s.out_width || s.kernel_h || s.kernel_w ||
                         s.stride != zero.stride || s.padding || s.padding_w != zero.padding_w;
  if (has_shape) j["shape"] = ShapeToJson(s);
  if (l.train_seconds_per_sample > 0) j["train_seconds_per_sample"] = l.train_seconds_per_sample;
  return j;
}

Status LayerFromJson(const json& j, size_t index, LayerProfile* l) {
  std::string where = "layer " + std::to_string(index);
  if (j.is_object() && j.contains("name") && j.at("name").is_string()) {
    where += " '" + j.at("name").get<std::string>() + "'";
  }
  Reader r(j, where);
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(r.OnlyKeys({"name", "kind", "param_bytes", "flops_per_sample",
                                 "train_seconds_per_sample", "activation_bytes", "inputs",
                                 "tables", "shape"}));
  PS_RETURN_IF_ERROR(r.String("name", true, &l->name));
  std::string kind;
  PS_RETURN_IF_ERROR(r.String("kind", true, &kind));
  StatusOr<LayerKind> k = ParseLayerKind(kind);
  if (!k.ok()) return r.Error("kind", k.status().message());
  l->kind = *k;
  PS_RETURN_IF_ERROR(r.Uint("param_bytes", false, &l->param_bytes));
  PS_RETURN_IF_ERROR(r.Double("flops_per_sample", false, &l->flops_per_sample));
  PS_RETURN_IF_ERROR(r.Double("train_seconds_per_sample", false, &l->train_seconds_per_sample));
  PS_RETURN_IF_ERROR(r.Uint("activation_bytes", false, &l->activation_bytes));
  PS_RETURN_IF_ERROR(r.Strings("inputs", &l->inputs));
  PS_RETURN_IF_ERROR(r.Strings("tables", &l->tables));
  if (r.Has("shape")) PS_RETURN_IF_ERROR(ShapeFromJson(r.At("shape"), where, &l->shape));
  return Status::OK();
}

json ProfileToJsonValue(const ModelProfile& p) {
  json layers = json::array();
  for (const LayerProfile& l : p.layers) layers.push_back(LayerToJson(l));
  json j = {{"format", "layerps.model_profile"},
            {"version", kFormatVersion},
            {"name", p.name},
            {"input_bytes_per_sample", p.input_bytes_per_sample},
            {"layers", layers}};
  if (p.reference_flops > 0) j["reference_flops"] = p.reference_flops;
  return j;
}

// ---- ClusterSpec ------------------------------------------------------------------------

json ClusterToJsonValue(const ClusterSpec& c) {
  json j = {{"servers", c.servers},
          {"workers", c.workers},
          {"server_bandwidth_bps", c.server_bandwidth_bps},
          {"worker_bandwidth_bps", c.worker_bandwidth_bps},
          {"latency_s", c.latency_s},
          {"worker_flops", c.worker_flops},
          {"server_flops", c.server_flops},
          {"server_memory_bytes", c.server_memory_bytes},
          {"worker_memory_bytes", c.worker_memory_bytes}};
  if (c.server_loopback_bps > 0) j["server_loopback_bps"] = c.server_loopback_bps;
  if (c.worker_loopback_bps > 0) j["worker_loopback_bps"] = c.worker_loopback_bps;
  if (c.worker_link_bps > 0) j["worker_link_bps"] = c.worker_link_bps;
  if (c.server_link_bps > 0) j["server_link_bps"] = c.server_link_bps;
  return j;
}

Status ClusterFromJsonValue(const json& j, const std::string& where, ClusterSpec* c) {
  Reader r(j, where);
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(
      r.OnlyKeys({"format", "version", "servers", "workers", "bandwidth", "server_bandwidth_bps",
                  "worker_bandwidth_bps", "latency_s", "worker_flops", "server_flops",
                  "server_memory_bytes", "worker_memory_bytes", "server_loopback_bps",
                  "worker_loopback_bps", "worker_link_bps", "server_link_bps"}));
  PS_RETURN_IF_ERROR(CheckFormat(r, "layerps.cluster"));
  int64_t v = c->servers;
  PS_RETURN_IF_ERROR(r.Int("servers", false, 1, 65536, &v));
  c->servers = static_cast<int>(v);
  v = c->workers;
  PS_RETURN_IF_ERROR(r.Int("workers", false, 1, 65536, &v));
  c->workers = static_cast<int>(v);
  auto bw = [](const std::string& s) { return ParseBandwidth(s); };
  if (r.Has("bandwidth")) {
    double both = 0;
    PS_RETURN_IF_ERROR(r.Quantity("bandwidth", bw, &both));
    c->server_bandwidth_bps = c->worker_bandwidth_bps = both;  // 0 fails Validate below
  }
  PS_RETURN_IF_ERROR(r.Quantity("server_bandwidth_bps", bw, &c->server_bandwidth_bps));
  PS_RETURN_IF_ERROR(r.Quantity("worker_bandwidth_bps", bw, &c->worker_bandwidth_bps));
  PS_RETURN_IF_ERROR(r.Quantity("server_loopback_bps", bw, &c->server_loopback_bps));
  PS_RETURN_IF_ERROR(r.Quantity("worker_loopback_bps", bw, &c->worker_loopback_bps));
  PS_RETURN_IF_ERROR(r.Quantity("worker_link_bps", bw, &c->worker_link_bps));
  PS_RETURN_IF_ERROR(r.Quantity("server_link_bps", bw, &c->server_link_bps));
  PS_RETURN_IF_ERROR(r.Quantity(
      "latency_s", [](const std::string& s) { return ParseDuration(s); }, &c->latency_s));
  auto si = [](const std::string& s) { return ParseSiValue(s); };
  PS_RETURN_IF_ERROR(r.Quantity("worker_flops", si, &c->worker_flops));
  PS_RETURN_IF_ERROR(r.Quantity("server_flops", si, &c->server_flops));
  for (auto [key, out] :
       {std::pair<const char*, uint64_t*>{"server_memory_bytes", &c->server_memory_bytes},
        {"worker_memory_bytes", &c->worker_memory_bytes}}) {
    if (r.Has(key) && r.At(key).is_string()) {
      StatusOr<uint64_t> bytes = ParseBytes(r.At(key).get<std::string>());
      if (!bytes.ok()) return r.Error(key, bytes.status().message());
      *out = *bytes;
    } else {
      PS_RETURN_IF_ERROR(r.Uint(key, false, out));
    }
  }
  Status s = c->Validate();
  if (!s.ok()) return InvalidArgument(where + ": " + s.message());
  return Status::OK();
}

// ---- Plan -------------------------------------------------------------------------------

json PredictionToJson(const PlanPrediction& p) {
  json nodes = json::array();
  for (const NodeLoad& n : p.nodes) {
    nodes.push_back({{"role", n.is_server ? "server" : "worker"},
                     {"rank", n.rank},
                     {"duty", n.duty},
                     {"bytes_in", n.bytes_in},
                     {"bytes_out", n.bytes_out},
                     {"nic_s", n.nic_s},
                     {"compute_s", n.compute_s},
                     {"memory_bytes", n.memory_bytes},
                     {"memory_limit_bytes", n.memory_limit_bytes}});
  }
  return {{"nodes", nodes},
          {"busiest", p.busiest},
          {"busiest_nic_bytes", p.busiest_nic_bytes},
          {"worker_bytes", p.worker_bytes},
          {"network_bytes", p.network_bytes},
          {"worker_compute_s", p.worker_compute_s},
          {"server_compute_s", p.server_compute_s},
          {"comm_s", p.comm_s},
          {"loopback_bytes", p.loopback_bytes},
          {"loopback_s", p.loopback_s},
          {"worker_loopback_bytes", p.worker_loopback_bytes},
          {"worker_loopback_s", p.worker_loopback_s},
          {"latency_s", p.latency_s},
          {"step_s", p.step_s},
          {"max_worker_memory", p.max_worker_memory},
          {"max_server_memory", p.max_server_memory},
          {"fits_memory", p.fits_memory},
          {"memory_note", p.memory_note}};
}

Status PredictionFromJson(const json& j, PlanPrediction* p) {
  Reader r(j, "plan: prediction");
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(
      r.OnlyKeys({"nodes", "busiest", "busiest_nic_bytes", "worker_bytes", "network_bytes",
                  "worker_compute_s", "server_compute_s", "comm_s", "loopback_bytes",
                  "loopback_s", "worker_loopback_bytes", "worker_loopback_s", "latency_s", "step_s",
                  "max_worker_memory", "max_server_memory", "fits_memory", "memory_note"}));
  if (r.Has("nodes")) {
    if (!r.At("nodes").is_array()) return r.Error("nodes", "must be an array");
    for (const json& e : r.At("nodes")) {
      Reader n(e, "plan: prediction node " + std::to_string(p->nodes.size()));
      PS_RETURN_IF_ERROR(n.IsObject());
      PS_RETURN_IF_ERROR(n.OnlyKeys({"role", "rank", "duty", "bytes_in", "bytes_out", "nic_s",
                                     "compute_s", "memory_bytes", "memory_limit_bytes"}));
      NodeLoad load;
      std::string role;
      PS_RETURN_IF_ERROR(n.String("role", true, &role));
      if (role != "server" && role != "worker") return n.Error("role", "must be server or worker");
      load.is_server = role == "server";
      int64_t rank = 0;
      PS_RETURN_IF_ERROR(n.Int("rank", true, 0, 65535, &rank));
      load.rank = static_cast<int>(rank);
      PS_RETURN_IF_ERROR(n.String("duty", false, &load.duty));
      PS_RETURN_IF_ERROR(n.Uint("bytes_in", false, &load.bytes_in));
      PS_RETURN_IF_ERROR(n.Uint("bytes_out", false, &load.bytes_out));
      PS_RETURN_IF_ERROR(n.Double("nic_s", false, &load.nic_s));
      PS_RETURN_IF_ERROR(n.Double("compute_s", false, &load.compute_s));
      PS_RETURN_IF_ERROR(n.Uint("memory_bytes", false, &load.memory_bytes));
      PS_RETURN_IF_ERROR(n.Uint("memory_limit_bytes", false, &load.memory_limit_bytes));
      p->nodes.push_back(std::move(load));
    }
  }
  int64_t busiest = -1;
  PS_RETURN_IF_ERROR(
      r.Int("busiest", false, -1, static_cast<int64_t>(p->nodes.size()) - 1, &busiest));
  p->busiest = static_cast<int>(busiest);
  PS_RETURN_IF_ERROR(r.Uint("busiest_nic_bytes", false, &p->busiest_nic_bytes));
  PS_RETURN_IF_ERROR(r.Uint("worker_bytes", false, &p->worker_bytes));
  PS_RETURN_IF_ERROR(r.Uint("network_bytes", false, &p->network_bytes));
  PS_RETURN_IF_ERROR(r.Double("worker_compute_s", false, &p->worker_compute_s));
  PS_RETURN_IF_ERROR(r.Double("server_compute_s", false, &p->server_compute_s));
  PS_RETURN_IF_ERROR(r.Double("comm_s", false, &p->comm_s));
  PS_RETURN_IF_ERROR(r.Uint("loopback_bytes", false, &p->loopback_bytes));
  PS_RETURN_IF_ERROR(r.Double("loopback_s", false, &p->loopback_s));
  PS_RETURN_IF_ERROR(r.Uint("worker_loopback_bytes", false, &p->worker_loopback_bytes));
  PS_RETURN_IF_ERROR(r.Double("worker_loopback_s", false, &p->worker_loopback_s));
  PS_RETURN_IF_ERROR(r.Double("latency_s", false, &p->latency_s));
  PS_RETURN_IF_ERROR(r.Double("step_s", false, &p->step_s));
  PS_RETURN_IF_ERROR(r.Uint("max_worker_memory", false, &p->max_worker_memory));
  PS_RETURN_IF_ERROR(r.Uint("max_server_memory", false, &p->max_server_memory));
  if (r.Has("fits_memory")) {
    if (!r.At("fits_memory").is_boolean()) return r.Error("fits_memory", "must be true or false");
    p->fits_memory = r.At("fits_memory").get<bool>();
  }
  PS_RETURN_IF_ERROR(r.String("memory_note", false, &p->memory_note));
  return Status::OK();
}

json PlanToJsonValue(const Plan& plan) {
  json layers = json::array();
  for (const LayerPlacement& l : plan.layers) {
    json entry = {{"layer", l.layer},
                  {"mode", TrainModeName(l.mode)},
                  {"servers", l.servers},
                  {"server_bytes", l.server_bytes}};
    if (!l.config.empty()) entry["config"] = l.config;
    layers.push_back(std::move(entry));
  }
  const PlanRoles& r = plan.roles;
  return {{"format", "layerps.plan"},
          {"version", kFormatVersion},
          {"strategy", plan.strategy},
          {"model", plan.model},
          {"batch", plan.batch},
          {"cut", plan.cut < 0 ? json(nullptr) : json(plan.cut)},
          {"cut_layer", plan.cut_layer},
          {"reason", plan.reason},
          {"fc_parallel", plan.fc_parallel},
          {"cluster", ClusterToJsonValue(plan.cluster)},
          {"roles",
           {{"conv_workers", r.conv_workers},
            {"ps_servers", r.ps_servers},
            {"dedicated_servers", r.dedicated_servers},
            {"ps_worker", r.ps_worker < 0 ? json(nullptr) : json(r.ps_worker)},
            {"fc_nodes", r.fc_nodes},
            {"fc_node_of_worker", r.fc_node_of_worker}}},
          {"layers", layers},
          {"prediction", PredictionToJson(plan.prediction)}};
}

// The checks a plan can pass without its model: ranks inside the cluster, matching
// lengths; ValidatePlan checks it against a model.
Status CheckPlanRanks(const Plan& plan) {
  const int S = plan.cluster.servers, W = plan.cluster.workers;
  auto check = [](const std::vector<int>& v, int limit, const std::string& what) -> Status {
    for (int x : v) {
      if (x < 0 || x >= limit) {
        return InvalidArgument("plan: " + what + " names rank " + std::to_string(x) +
                               ", but the cluster has ranks 0.." + std::to_string(limit - 1));
      }
    }
    return Status::OK();
  };
  PS_RETURN_IF_ERROR(check(plan.roles.conv_workers, W, "conv_workers"));
  PS_RETURN_IF_ERROR(check(plan.roles.ps_servers, S, "ps_servers"));
  PS_RETURN_IF_ERROR(check(plan.roles.dedicated_servers, S, "dedicated_servers"));
  PS_RETURN_IF_ERROR(check(plan.roles.fc_nodes, S, "fc_nodes"));
  // The cost model counts each FC node's workers by these indices (PredictPlan), even
  // when the plan has no FC layer.
  const std::vector<int>& of_worker = plan.roles.fc_node_of_worker;
  if (of_worker.size() > static_cast<size_t>(W)) {
    return InvalidArgument("plan: fc_node_of_worker has " + std::to_string(of_worker.size()) +
                           " entries, but the cluster has " + std::to_string(W) + " workers");
  }
  for (int f : of_worker) {
    if (f < 0 || static_cast<size_t>(f) >= plan.roles.fc_nodes.size()) {
      return InvalidArgument("plan: fc_node_of_worker names FC node " + std::to_string(f) +
                             ", but fc_nodes has " + std::to_string(plan.roles.fc_nodes.size()));
    }
  }
  if (plan.roles.ps_worker >= S) {
    return InvalidArgument("plan: ps_worker names server rank " +
                           std::to_string(plan.roles.ps_worker) +
                           ", but the cluster has ranks 0.." + std::to_string(S - 1));
  }
  for (const LayerPlacement& l : plan.layers) {
    PS_RETURN_IF_ERROR(check(l.servers, S, "layer '" + l.layer + "' servers"));
    if (l.servers.size() != l.server_bytes.size()) {
      return InvalidArgument("plan: layer '" + l.layer +
                             "': servers and server_bytes differ in length");
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<ModelProfile> ModelProfileFromJson(const std::string& text) {
  StatusOr<json> parsed = Parse(text, "model profile");
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  Reader r(j, "model profile");
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(r.OnlyKeys(
      {"format", "version", "name", "input_bytes_per_sample", "reference_flops", "layers"}));
  PS_RETURN_IF_ERROR(CheckFormat(r, "layerps.model_profile"));
  ModelProfile p;
  PS_RETURN_IF_ERROR(r.String("name", true, &p.name));
  PS_RETURN_IF_ERROR(r.Uint("input_bytes_per_sample", false, &p.input_bytes_per_sample));
  PS_RETURN_IF_ERROR(r.Double("reference_flops", false, &p.reference_flops));
  if (!r.Has("layers") || !r.At("layers").is_array()) {
    return r.Error("layers", "must be an array of layers");
  }
  for (const json& e : r.At("layers")) {
    LayerProfile l;
    PS_RETURN_IF_ERROR(LayerFromJson(e, p.layers.size(), &l));
    p.layers.push_back(std::move(l));
  }
  Status s = p.Validate();
  if (!s.ok()) return InvalidArgument("model profile '" + p.name + "': " + s.message());
  return p;
}

std::string ModelProfileToJson(const ModelProfile& profile) {
  return ProfileToJsonValue(profile).dump(2) + "\n";
}

StatusOr<ClusterSpec> ClusterSpecFromJson(const std::string& text) {
  StatusOr<json> parsed = Parse(text, "cluster spec");
  if (!parsed.ok()) return parsed.status();
  ClusterSpec c;
  PS_RETURN_IF_ERROR(ClusterFromJsonValue(*parsed, "cluster spec", &c));
  return c;
}

std::string ClusterSpecToJson(const ClusterSpec& cluster) {
  json j = ClusterToJsonValue(cluster);
  j["format"] = "layerps.cluster";
  j["version"] = kFormatVersion;
  return j.dump(2) + "\n";
}

StatusOr<Plan> PlanFromJson(const std::string& text) {
  StatusOr<json> parsed = Parse(text, "plan");
  if (!parsed.ok()) return parsed.status();
  Reader r(*parsed, "plan");
  PS_RETURN_IF_ERROR(r.IsObject());
  PS_RETURN_IF_ERROR(
      r.OnlyKeys({"format", "version", "strategy", "model", "batch", "cut", "cut_layer", "reason",
                  "fc_parallel", "cluster", "roles", "layers", "prediction"}));
  PS_RETURN_IF_ERROR(CheckFormat(r, "layerps.plan"));
  Plan plan;
  PS_RETURN_IF_ERROR(r.String("strategy", true, &plan.strategy));
  PS_RETURN_IF_ERROR(r.String("model", true, &plan.model));
  int64_t v = 0;
  PS_RETURN_IF_ERROR(r.Int("batch", true, 1, 1 << 24, &v));
  plan.batch = static_cast<uint32_t>(v);
  v = -1;
  PS_RETURN_IF_ERROR(r.Int("cut", false, 1, 1 << 24, &v));
  plan.cut = static_cast<int>(v);
  PS_RETURN_IF_ERROR(r.String("cut_layer", false, &plan.cut_layer));
  PS_RETURN_IF_ERROR(r.String("reason", false, &plan.reason));
  PS_RETURN_IF_ERROR(r.String("fc_parallel", false, &plan.fc_parallel));
  if (plan.fc_parallel != "data" && plan.fc_parallel != "channel") {
    return r.Error("fc_parallel", "must be \"data\" or \"channel\", not \"" + plan.fc_parallel + "\"");
  }
  if (!r.Has("cluster")) return r.Error("cluster", "is required");
  PS_RETURN_IF_ERROR(ClusterFromJsonValue(r.At("cluster"), "plan: cluster", &plan.cluster));
  if (r.Has("roles")) {
    Reader roles(r.At("roles"), "plan: roles");
    PS_RETURN_IF_ERROR(roles.IsObject());
    PS_RETURN_IF_ERROR(roles.OnlyKeys({"conv_workers", "ps_servers", "dedicated_servers",
                                       "ps_worker", "fc_nodes", "fc_node_of_worker"}));
    PS_RETURN_IF_ERROR(roles.Ints("conv_workers", &plan.roles.conv_workers));
    PS_RETURN_IF_ERROR(roles.Ints("ps_servers", &plan.roles.ps_servers));
    PS_RETURN_IF_ERROR(roles.Ints("dedicated_servers", &plan.roles.dedicated_servers));
    int64_t w = -1;
    PS_RETURN_IF_ERROR(roles.Int("ps_worker", false, 0, 65535, &w));
    plan.roles.ps_worker = static_cast<int>(w);
    PS_RETURN_IF_ERROR(roles.Ints("fc_nodes", &plan.roles.fc_nodes));
    PS_RETURN_IF_ERROR(roles.Ints("fc_node_of_worker", &plan.roles.fc_node_of_worker));
  }
  if (!r.Has("layers") || !r.At("layers").is_array()) {
    return r.Error("layers", "must be an array of placements");
  }
  for (const json& e : r.At("layers")) {
    Reader l(e, "plan: layer " + std::to_string(plan.layers.size()));
    PS_RETURN_IF_ERROR(l.IsObject());
    PS_RETURN_IF_ERROR(l.OnlyKeys({"layer", "mode", "servers", "server_bytes", "config"}));
    LayerPlacement p;
    PS_RETURN_IF_ERROR(l.String("layer", true, &p.layer));
    std::string mode;
    PS_RETURN_IF_ERROR(l.String("mode", true, &mode));
    StatusOr<TrainMode> m = ParseTrainMode(mode);
    if (!m.ok()) return l.Error("mode", m.status().message());
    p.mode = *m;
    PS_RETURN_IF_ERROR(l.Ints("servers", &p.servers));
    PS_RETURN_IF_ERROR(l.Uints("server_bytes", kMaxLayerBytes, "2^40", &p.server_bytes));
    PS_RETURN_IF_ERROR(l.String("config", false, &p.config));
    plan.layers.push_back(std::move(p));
  }
  if (r.Has("prediction"))
    PS_RETURN_IF_ERROR(PredictionFromJson(r.At("prediction"), &plan.prediction));
  PS_RETURN_IF_ERROR(CheckPlanRanks(plan));
  return plan;
}

std::string PlanToJson(const Plan& plan) { return PlanToJsonValue(plan).dump(2) + "\n"; }

std::string ComparisonToJson(const Comparison& comparison) {
  json plans = json::array();
  for (const Plan& p : comparison.plans) plans.push_back(PlanToJsonValue(p));
  json j = {{"format", "layerps.comparison"},
            {"version", kFormatVersion},
            {"chosen", comparison.chosen >= 0 && comparison.chosen < static_cast<int>(plans.size())
                           ? json(comparison.plans[comparison.chosen].strategy)
                           : json(nullptr)},
            {"reason", comparison.reason},
            {"skipped", comparison.skipped},
            {"plans", plans}};
  return j.dump(2) + "\n";
}

}  // namespace placement
}  // namespace ps
