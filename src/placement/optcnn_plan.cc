// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN strategies as LayerPS runs them: the rule of ParallelStrategy::executable (data
// parallelism up to the first FC layer, then FC nodes running each FC layer channel- or
// sample-parallel) and ExecutionPlan, which turns such a strategy into a uniform or
// Stanza plan (docs/optcnn.md). NotExecutableReason is declared in optcnn_internal.h for
// EvaluateStrategy (optcnn_strategies.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "placement/optcnn_internal.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace {

bool AllDevicesData(const Degrees& d, int devices) { return d.n == devices && d.Product() == devices; }

int FirstFc(const std::vector<LayerChoice>& layers) {
  for (size_t v = 0; v < layers.size(); ++v) {
    if (layers[v].kind == LayerKind::kFc) return static_cast<int>(v);
  }
  return -1;
}

}  // namespace

namespace internal {

std::string NotExecutableReason(const std::vector<LayerChoice>& layers, int devices) {
  const int n = static_cast<int>(layers.size());
  const int first_fc = FirstFc(layers);
  const int prefix_end = first_fc < 0 ? n : first_fc;
  for (int v = 0; v < prefix_end; ++v) {
    if (!AllDevicesData(layers[v].degrees, devices)) {
      return "layer '" + layers[v].layer + "' is " + layers[v].degrees.ToString() +
             ": layers before the first FC layer run data-parallel on all " +
             std::to_string(devices) + " devices (n" + std::to_string(devices) + ")";
    }
  }
  if (first_fc < 0) return "";
  bool all_data = true;
  for (int v = first_fc; v < n; ++v) all_data = all_data && AllDevicesData(layers[v].degrees, devices);
  if (all_data) return "";
  // FC nodes: every FC layer either channel-parallel on its own number of FC nodes (cK,
  // or one device) or sample-parallel (nK, run whole by every FC node: a replica); the
  // element-wise layers between them run on every FC node.
  for (int v = first_fc; v < n; ++v) {
    const LayerChoice& l = layers[v];
    if (l.kind == LayerKind::kOther) continue;  // element-wise: runs on every FC node
    if (l.kind != LayerKind::kFc) {
      return "layer '" + l.layer + "' (" + LayerKindName(l.kind) +
             ") follows the first FC layer: FC nodes run FC and element-wise layers only";
    }
    const Degrees& e = l.degrees;
    if (e.h != 1 || e.w != 1 || (e.n > 1 && e.c > 1)) {
      return "layer '" + l.layer + "' is " + e.ToString() +
             ": FC nodes run each FC layer channel-parallel (cK) or sample-parallel (nK), "
             "not both";
    }
  }
  return "";
}

}  // namespace internal

using internal::NotExecutableReason;

StatusOr<Plan> ExecutionPlan(const ModelProfile& model, const ClusterSpec& cluster,
                             const PlanOptions& options, const ParallelStrategy& strategy,
                             int num_devices) {
  if (cluster.workers != num_devices) {
    return InvalidArgument("optcnn execution plan: the strategy is for " +
                           std::to_string(num_devices) + " devices, the cluster has " +
                           std::to_string(cluster.workers) + " workers");
  }
  if (strategy.layers.size() != model.layers.size()) {
    return InvalidArgument("optcnn execution plan: the strategy has " +
                           std::to_string(strategy.layers.size()) + " layers, the model " +
                           std::to_string(model.layers.size()));
  }
  const std::string why = NotExecutableReason(strategy.layers, num_devices);
  if (!why.empty()) {
    return FailedPrecondition("optcnn strategy '" + strategy.name +
                              "' is beyond the split step's placement plans (layerps.placement."
                              "LayerwiseTrainer runs it from the --json report): " + why);
  }
  const int first_fc = FirstFc(strategy.layers);
  bool all_data = true;
  for (const LayerChoice& c : strategy.layers) all_data = all_data && AllDevicesData(c.degrees, num_devices);
  if (all_data) {
    StatusOr<Plan> plan = UniformPlan(model, cluster, options);
    if (!plan.ok()) return plan.status();
    plan->reason = "optcnn strategy '" + strategy.name + "': every layer data-parallel on " +
                   std::to_string(num_devices) + " devices; " + plan->reason;
    return plan;
  }
  // As many FC nodes as the widest FC layer's degree. All sample-parallel: Stanza's
  // replicas (each FC node trains on its conv workers' samples); else channel-parallel
  // execution, where a sample-parallel FC layer runs whole on every FC node.
  int nodes = 1;
  bool any_channel = false;
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    const LayerChoice& c = strategy.layers[i];
    if (c.kind != LayerKind::kFc) continue;
    any_channel = any_channel || c.degrees.n == 1;
    nodes = std::max(nodes, c.degrees.Product());
  }
  const bool channel = any_channel;
  if (!channel) {
    for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
      const LayerChoice& c = strategy.layers[i];
      if (c.kind == LayerKind::kFc && c.degrees.n != nodes) {
        return FailedPrecondition("optcnn strategy '" + strategy.name + "': layer '" + c.layer +
                                  "' is " + c.degrees.ToString() + ", others n" +
                                  std::to_string(nodes) +
                                  ": sample-parallel FC layers run as one group of replicas");
      }
    }
  }
  if (!channel && nodes == num_devices) {
    return FailedPrecondition("optcnn strategy '" + strategy.name +
                              "': FC layers sample-parallel on every device but earlier layers "
                              "too would be data parallelism; this mix is not executed");
  }
  if (nodes > cluster.servers) {
    return FailedPrecondition("optcnn strategy '" + strategy.name + "' runs its FC layers on " +
                              std::to_string(nodes) + " FC nodes, one beside each of as many "
                              "servers, but the cluster has " + std::to_string(cluster.servers) +
                              " servers");
  }
  PlanOptions o = options;
  o.fc_nodes = nodes;
  StatusOr<Plan> plan = StanzaPlan(model, cluster, o);
  if (!plan.ok()) return plan.status();
  if (plan->cut_layer != strategy.layers[first_fc].layer) {
    return FailedPrecondition("optcnn execution plan: stanza cuts before '" + plan->cut_layer +
                              "', the strategy's FC layers start at '" +
                              strategy.layers[first_fc].layer + "'");
  }
  plan->fc_parallel = channel ? "channel" : "data";
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    LayerPlacement& p = plan->layers[i];
    if (strategy.layers[i].kind != LayerKind::kFc) continue;
    const Degrees& e = strategy.layers[i].degrees;
    p.config = e.ToString();
    if (!channel || e.n > 1 || p.servers.empty()) continue;  // replicas: every FC node
    // Layer l's rows on FC nodes 0..K_l-1 (the contiguous tile rule: tile t on device t).
    const int k = e.c;
    const uint64_t m = model.layers[i].param_bytes;
    p.servers.resize(k);
    p.server_bytes.assign(k, m / k);
  }
  std::string fc;
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    if (strategy.layers[i].kind != LayerKind::kFc) continue;
    fc += (fc.empty() ? "" : ", ") + strategy.layers[i].layer + " " + strategy.layers[i].degrees.ToString();
  }
  plan->reason = "optcnn strategy '" + strategy.name + "': layers before '" + plan->cut_layer +
                 "' data-parallel on " + std::to_string(num_devices) + " conv workers; " + fc +
                 " on " + std::to_string(nodes) + " FC node(s), " + plan->fc_parallel +
                 "-parallel; " + plan->reason;
  return plan;
}

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
