// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "placement/plan_util.h"

#include <cstdio>

namespace ps {
namespace placement {
namespace internal {

StatusOr<Plan> NewPlan(const std::string& strategy, const ModelProfile& profile,
                       const ClusterSpec& cluster, const PlanOptions& options) {
  PS_RETURN_IF_ERROR(profile.Validate());
  PS_RETURN_IF_ERROR(cluster.Validate());
  PS_RETURN_IF_ERROR(options.Validate());
  Plan plan;
  plan.strategy = strategy;
  plan.model = profile.name;
  plan.cluster = cluster;
  plan.batch = options.batch;
  for (const LayerProfile& l : profile.layers) {
    LayerPlacement p;
    p.layer = l.name;
    plan.layers.push_back(std::move(p));
  }
  plan.roles.conv_workers = Range(0, cluster.workers);
  return plan;
}

void SpreadEven(uint64_t bytes, const std::vector<int>& servers, LayerPlacement* placement) {
  placement->servers.clear();
  placement->server_bytes.clear();
  if (bytes == 0 || servers.empty()) return;
  const uint64_t n = servers.size();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t share = bytes / n + (i < bytes % n ? 1 : 0);
    if (share == 0) continue;
    placement->servers.push_back(servers[i]);
    placement->server_bytes.push_back(share);
  }
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> r;
  for (int i = begin; i < end; ++i) r.push_back(i);
  return r;
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string HumanSeconds(double s) {
  char buf[32];
  if (s >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f us", s * 1e6);
  }
  return buf;
}

std::string Ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", r);
  return buf;
}

}  // namespace internal
}  // namespace placement
}  // namespace ps
