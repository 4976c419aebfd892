// Copyright LayerPS authors. Licensed under Apache-2.0.
#include <fstream>
#include <sstream>

#include "ps/placement.h"

namespace ps {
namespace placement {

StatusOr<Plan> ReadPlanFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read plan file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  StatusOr<Plan> plan = PlanFromJson(text.str());
  if (!plan.ok()) return plan.status().WithContext("plan file '" + path + "'");
  return plan;
}

std::vector<LayerServers> TablePlacementOf(const Plan& plan) {
  std::vector<LayerServers> out;
  for (const LayerPlacement& l : plan.layers) {
    if (l.servers.empty()) continue;
    LayerServers ls;
    ls.layer = l.layer;
    for (int r : l.servers) {
      if (r >= 0) ls.servers.push_back(static_cast<uint32_t>(r));
    }
    if (!ls.servers.empty()) out.push_back(std::move(ls));
  }
  return out;
}

}  // namespace placement
}  // namespace ps
