// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// stanza: layer separation (PAPERS.md §3). The model is cut at the conv/fc boundary; the
// workers ("conv nodes") train the prefix through the PS; N_f FC nodes (on server
// machines) each hold a replica of the FC layers and train them on their conv nodes'
// activations. FC parameters never cross the network except among the replicas.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "placement/plan_util.h"
#include "ps/placement.h"

namespace ps {
namespace placement {

using internal::HumanBytes;
using internal::HumanSeconds;

StatusOr<Plan> StanzaPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                          const PlanOptions& options) {
  StatusOr<Plan> made = internal::NewPlan("stanza", profile, cluster, options);
  if (!made.ok()) return made.status();
  Plan plan = std::move(made).value();
  StatusOr<CutPoint> boundary = FcBoundaryCut(profile);
  if (!boundary.ok()) {
    return FailedPrecondition("stanza does not apply: " + boundary.status().message());
  }
  const int W = cluster.workers;
  const int S = cluster.servers;
  const uint64_t b = options.batch;
  const int cut = boundary->index;
  const uint64_t act = boundary->activation_bytes;
  double prefix_flops = 0;  // training FLOPs per sample
  for (int i = 0; i < cut; ++i) prefix_flops += profile.TrainFlopsPerSample(i, options.backward_factor);
  const double t_conv = b * prefix_flops / cluster.worker_flops;
  uint64_t fc_bytes = 0;
  for (size_t i = cut; i < profile.layers.size(); ++i) fc_bytes += profile.layers[i].param_bytes;
  // An FC node's link time with n FC nodes (PAPERS.md §3): 2 (activations in, their
  // gradients out) x the conv nodes it serves x b x A, plus, when n > 1, the ring
  // all-reduce of the FC gradients among the replicas, 2 (n - 1) / n x their bytes.
  auto t_link = [&](int n) {
    const uint64_t served = (W + n - 1) / n;
    const double sync = n > 1 ? 2.0 * (n - 1) / n * static_cast<double>(fc_bytes) : 0.0;
    return (2.0 * served * b * act + sync) * 8.0 / cluster.server_bandwidth_bps;
  };
  const int limit = std::min(W, S);
  int nf = options.fc_nodes;
  std::string why;
  if (nf > 0) {
    if (nf > limit) {
      return InvalidArgument(
          "stanza: " + std::to_string(nf) +
          " FC nodes asked, at most min(workers, servers) = " + std::to_string(limit));
    }
    why = "N_f = " + std::to_string(nf) + " (given)";
  } else {
    // The smallest n whose link time is within the conv compute; when none is, the n
    // with the shortest link time (the smallest of equals).
    nf = 0;
    int fastest = 1;
    for (int n = 1; n <= limit; ++n) {
      if (t_link(n) <= t_conv) {
        nf = n;
        break;
      }
      if (t_link(n) < t_link(fastest)) fastest = n;
    }
    const bool within = nf > 0;
    if (!within) nf = fastest;
    why = "N_f = " + std::to_string(nf) + ": an FC node's link moves " + HumanSeconds(t_link(nf)) +
          (within ? " <= " : " > ") + "the conv compute " + HumanSeconds(t_conv) +
          (within ? "" : " (the link stays the bottleneck)");
  }
  plan.roles.fc_nodes = internal::Range(S - nf, S);
  std::vector<int> others = internal::Range(0, S - nf);
  if (others.empty()) others = internal::Range(0, S);
  plan.roles.ps_servers = others;
  plan.roles.fc_node_of_worker.resize(W);
  // In 64 bits: w * nf reaches 2^32 at the maxima (65536 workers and FC nodes).
  for (int w = 0; w < W; ++w) {
    plan.roles.fc_node_of_worker[w] = static_cast<int>(int64_t{w} * nf / W);
  }
  plan.cut = cut;
  plan.cut_layer = profile.layers[cut].name;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    LayerPlacement& p = plan.layers[i];
    const uint64_t m = profile.layers[i].param_bytes;
    if (static_cast<int>(i) < cut) {
      internal::SpreadEven(m, others, &p);
    } else {
      p.mode = TrainMode::kFcNode;
      if (m > 0) {
        p.servers = plan.roles.fc_nodes;
        p.server_bytes.assign(nf, m);
      }
    }
  }
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  plan.reason = "layers from '" + plan.cut_layer + "' on (" + HumanBytes(fc_bytes) +
                ") train on FC node(s) " + std::to_string(S - nf) +
                (nf > 1 ? ".." + std::to_string(S - 1) : "") + "; " + why;
  return plan;
}

}  // namespace placement
}  // namespace ps
