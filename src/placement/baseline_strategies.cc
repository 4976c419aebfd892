// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The placements without a cut: uniform (ps-lite's even key ranges), balanced (the
// bytes-balanced map LayerPS's scheduler builds today, cluster_map.cc AssignRanges), the
// all-reduce (no server) and Parallax's hybrid of the two.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "placement/plan_util.h"
#include "ps/placement.h"

namespace ps {
namespace placement {

using internal::HumanBytes;

StatusOr<Plan> UniformPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                           const PlanOptions& options) {
  StatusOr<Plan> made = internal::NewPlan("uniform", profile, cluster, options);
  if (!made.ok()) return made.status();
  Plan plan = std::move(made).value();
  const std::vector<int> all = internal::Range(0, cluster.servers);
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    internal::SpreadEven(profile.layers[i].param_bytes, all, &plan.layers[i]);
  }
  plan.roles.ps_servers = all;
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  plan.reason = "every layer's tables split evenly over all " + std::to_string(cluster.servers) +
                " servers; each worker pushes and pulls all " +
                HumanBytes(static_cast<double>(profile.TotalParamBytes())) + " every step";
  return plan;
}

StatusOr<Plan> BalancedPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                            const PlanOptions& options) {
  StatusOr<Plan> made = internal::NewPlan("balanced", profile, cluster, options);
  if (!made.ok()) return made.status();
  Plan plan = std::move(made).value();
  const int S = cluster.servers;
  // Largest layer first. A layer is cut into chunks of chunk_bytes; its min(chunks, S)
  // contiguous ranges go to the least-loaded servers, the larger shares first: so big
  // layers spread over every server and small ones land whole where there is room.
  std::vector<size_t> order(profile.layers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&profile](size_t a, size_t b) {
    return profile.layers[a].param_bytes > profile.layers[b].param_bytes;
  });
  std::vector<uint64_t> load(S, 0);
  const uint64_t chunk = options.chunk_bytes;
  for (size_t i : order) {
    const uint64_t bytes = profile.layers[i].param_bytes;
    LayerPlacement& p = plan.layers[i];
    if (bytes == 0) continue;
    const uint64_t chunks = (bytes + chunk - 1) / chunk;
    const uint64_t parts = std::min<uint64_t>(chunks, S);
    std::vector<int> by_load = internal::Range(0, S);
    std::stable_sort(by_load.begin(), by_load.end(),
                     [&load](int a, int b) { return load[a] < load[b]; });
    uint64_t begin = 0;
    std::vector<std::pair<int, uint64_t>> shares;
    for (uint64_t k = 0; k < parts; ++k) {
      const uint64_t n = chunks / parts + (k < chunks % parts ? 1 : 0);
      const uint64_t first = begin * chunk;
      const uint64_t last = std::min((begin + n) * chunk, bytes);
      shares.emplace_back(by_load[k], last - first);
      load[by_load[k]] += last - first;
      begin += n;
    }
    std::sort(shares.begin(), shares.end());
    for (const auto& [server, share] : shares) {
      p.servers.push_back(server);
      p.server_bytes.push_back(share);
    }
  }
  plan.roles.ps_servers = internal::Range(0, S);
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  plan.reason = "tables cut into " + HumanBytes(static_cast<double>(chunk)) +
                " chunks, largest layer first, onto the least-loaded servers (" +
                HumanBytes(static_cast<double>(*lo)) + " to " +
                HumanBytes(static_cast<double>(*hi)) + " per server); no cut";
  return plan;
}

StatusOr<Plan> AllReducePlan(const ModelProfile& profile, const ClusterSpec& cluster,
                             const PlanOptions& options) {
  StatusOr<Plan> made = internal::NewPlan("allreduce", profile, cluster, options);
  if (!made.ok()) return made.status();
  Plan plan = std::move(made).value();
  for (LayerPlacement& p : plan.layers) p.mode = TrainMode::kAllReduce;
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  const int W = cluster.workers;
  plan.reason = "every gradient summed by ring all-reduce among the " + std::to_string(W) +
                " workers: each worker sends and receives " +
                HumanBytes(2.0 * (W - 1) / W * static_cast<double>(profile.TotalParamBytes())) +
                " per step, the servers idle";
  return plan;
}

StatusOr<Plan> HybridPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                          const PlanOptions& options) {
  uint64_t sparse = 0;
  for (const LayerProfile& l : profile.layers) {
    if (l.kind == LayerKind::kEmbedding) sparse += l.param_bytes;
  }
  if (sparse == 0) {
    return FailedPrecondition("the model has no embedding layer (the hybrid would be the all-reduce)");
  }
  StatusOr<Plan> made = internal::NewPlan("hybrid", profile, cluster, options);
  if (!made.ok()) return made.status();
  Plan plan = std::move(made).value();
  const std::vector<int> all = internal::Range(0, cluster.servers);
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    if (profile.layers[i].kind == LayerKind::kEmbedding) {
      internal::SpreadEven(profile.layers[i].param_bytes, all, &plan.layers[i]);
    } else {
      plan.layers[i].mode = TrainMode::kAllReduce;
    }
  }
  plan.roles.ps_servers = all;
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  char touched[32];
  std::snprintf(touched, sizeof(touched), "%.3g", options.embedding_rows_touched);
  plan.reason = "embeddings (" + HumanBytes(static_cast<double>(sparse)) +
                ") as sparse tables on the servers, " + touched +
                " of their rows moved per step; the other " +
                HumanBytes(static_cast<double>(profile.TotalParamBytes() - sparse)) +
                " by ring all-reduce";
  return plan;
}

}  // namespace placement
}  // namespace ps
