// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Helpers the strategies share: an empty plan for a model, even splits of a layer's bytes,
// and the human units used in the plans' reasons.
#ifndef PS_PLACEMENT_PLAN_UTIL_H_
#define PS_PLACEMENT_PLAN_UTIL_H_

#include <string>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace internal {

// Validates the inputs and returns a plan with one kPs placement per layer (no servers
// yet), every worker a conv worker, and no cut.
StatusOr<Plan> NewPlan(const std::string& strategy, const ModelProfile& profile,
                       const ClusterSpec& cluster, const PlanOptions& options);

// Places the layer's `bytes` evenly over `servers` (the first bytes % n servers get one
// byte more); no servers when bytes == 0.
void SpreadEven(uint64_t bytes, const std::vector<int>& servers, LayerPlacement* placement);

std::vector<int> Range(int begin, int end);  // begin, begin + 1, ..., end - 1

std::string HumanBytes(double bytes);  // "553.4 MB" (powers of 1000)
std::string HumanSeconds(double s);    // "12.3 ms"
std::string Ratio(double r);           // "8.92x"

}  // namespace internal
}  // namespace placement
}  // namespace ps

#endif  // PS_PLACEMENT_PLAN_UTIL_H_
