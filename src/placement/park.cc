// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// park: resource-aware layer placement (PAPERS.md §1). The model is cut at a single-tensor
// cut point k; the suffix's tables live on dedicated server(s) and the suffix runs there
// (the "PS worker"), so its gradients never cross the network: the workers send b x A_{k-1}
// activations instead. k* = argmin of the predicted step time over the cut points whose
// suffix has no conv layer (PlanOptions::park_conv_suffix widens this to all) and "no cut"
// (a cut must win by PlanOptions::min_cut_gain), unless the caller forces one.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "placement/plan_util.h"
#include "ps/placement.h"

namespace ps {
namespace placement {

using internal::HumanBytes;
using internal::HumanSeconds;
using internal::Ratio;

namespace {

// The plan for one cut (-1: none) from the common base.
StatusOr<Plan> ParkAt(const Plan& base, const ModelProfile& profile, const PlanOptions& options,
                      int cut, const std::vector<int>& dedicated, const std::vector<int>& others) {
  Plan plan = base;
  const std::vector<int> all = internal::Range(0, base.cluster.servers);
  if (cut < 0) {
    for (size_t i = 0; i < profile.layers.size(); ++i) {
      internal::SpreadEven(profile.layers[i].param_bytes, all, &plan.layers[i]);
    }
    plan.roles.ps_servers = all;
  } else {
    plan.cut = cut;
    plan.cut_layer = profile.layers[cut].name;
    for (size_t i = 0; i < profile.layers.size(); ++i) {
      const bool suffix = static_cast<int>(i) >= cut;
      plan.layers[i].mode = suffix ? TrainMode::kOnServer : TrainMode::kPs;
      internal::SpreadEven(profile.layers[i].param_bytes, suffix ? dedicated : others,
                           &plan.layers[i]);
    }
    plan.roles.ps_servers = others;
    plan.roles.dedicated_servers = dedicated;
    plan.roles.ps_worker = dedicated.front();
  }
  PS_RETURN_IF_ERROR(PredictPlan(profile, options, &plan));
  return plan;
}

std::string CutList(const ModelProfile& profile, const std::vector<CutPoint>& cuts) {
  std::string s;
  for (size_t i = 0; i < cuts.size(); ++i) {
    if (i == 12) return s + ", ... (" + std::to_string(cuts.size()) + " in all)";
    s += (i ? ", " : "") + profile.layers[cuts[i].index].name;
  }
  return s.empty() ? "none" : s;
}

}  // namespace

StatusOr<Plan> ParkPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                        const PlanOptions& options) {
  StatusOr<Plan> made = internal::NewPlan("park", profile, cluster, options);
  if (!made.ok()) return made.status();
  const Plan base = std::move(made).value();
  const int S = cluster.servers;

  std::vector<int> dedicated = options.dedicated_servers;
  if (dedicated.empty()) dedicated.push_back(S - 1);
  std::set<int> seen;
  for (int s : dedicated) {
    if (s < 0 || s >= S) {
      return InvalidArgument("park: dedicated server " + std::to_string(s) +
                             " does not exist (servers are 0.." + std::to_string(S - 1) + ")");
    }
    if (!seen.insert(s).second) {
      return InvalidArgument("park: dedicated server " + std::to_string(s) + " given twice");
    }
  }
  // The prefix spreads over the servers that are not dedicated (all of them when every
  // server is dedicated, e.g. a single server).
  std::vector<int> others;
  for (int s = 0; s < S; ++s) {
    if (!seen.count(s)) others.push_back(s);
  }
  if (others.empty()) others = internal::Range(0, S);

  const std::vector<CutPoint> cuts = FindCutPoints(profile);
  const std::string servers_text = dedicated.size() == 1
                                       ? "server " + std::to_string(dedicated[0])
                                       : std::to_string(dedicated.size()) + " dedicated servers";

  // A forced cut (or none).
  if (!options.cut_layer.empty()) {
    int forced = -1;
    if (options.cut_layer != "none") {
      forced = profile.LayerIndex(options.cut_layer);
      if (forced < 0) {
        return InvalidArgument("park: no layer '" + options.cut_layer + "' in model '" +
                               profile.name + "'");
      }
      bool ok = false;
      for (const CutPoint& c : cuts) ok |= c.index == forced;
      if (!ok) {
        return InvalidArgument(
            "park: cannot cut before '" + options.cut_layer +
            "': the suffix would read more than one tensor; cut points: " + CutList(profile, cuts));
      }
    }
    StatusOr<Plan> plan = ParkAt(base, profile, options, forced, dedicated, others);
    if (!plan.ok()) return plan.status();
    plan->reason = forced < 0 ? "no cut (forced): every layer trained by the workers through the PS"
                              : "cut forced before '" + options.cut_layer + "': " +
                                    (forced + 1 == static_cast<int>(profile.layers.size())
                                         ? "layer " + std::to_string(forced)
                                         : "layers " + std::to_string(forced) + ".." +
                                               std::to_string(profile.layers.size() - 1)) +
                                    " run on " + servers_text + ", predicted " +
                                    HumanSeconds(plan->prediction.step_s) + " per step";
    return plan;
  }

  StatusOr<Plan> none = ParkAt(base, profile, options, -1, dedicated, others);
  if (!none.ok()) return none.status();
  const Plan* best = nullptr;
  std::vector<Plan> tried;
  tried.reserve(cuts.size());
  // The cuts RALP considers: those whose suffix has no conv layer (unless asked).
  std::vector<CutPoint> candidates;
  int last_conv = -1;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    if (profile.layers[i].kind == LayerKind::kConv) last_conv = static_cast<int>(i);
  }
  for (const CutPoint& c : cuts) {
    if (options.park_conv_suffix || c.index > last_conv) candidates.push_back(c);
  }
  for (const CutPoint& c : candidates) {
    StatusOr<Plan> p = ParkAt(base, profile, options, c.index, dedicated, others);
    if (!p.ok()) return p.status();
    tried.push_back(std::move(p).value());
  }
  for (const Plan& p : tried) {
    if (!p.prediction.fits_memory) continue;
    if (best == nullptr || p.prediction.step_s < best->prediction.step_s) best = &p;
  }
  const double t_none = none->prediction.step_s;
  const bool cut_pays =
      best != nullptr && (!none->prediction.fits_memory ||
                          best->prediction.step_s < t_none * (1.0 - options.min_cut_gain));
  if (!cut_pays) {
    Plan plan = std::move(none).value();
    if (best == nullptr) {
      plan.reason = cuts.empty() ? "no cut: the model has no single-tensor cut point"
                    : candidates.empty()
                        ? "no cut: every cut point leaves conv layers in the suffix"
                        : "no cut: no cut fits in memory";
    } else {
      plan.reason =
          "no cut: the best cut (before '" + best->cut_layer + "') predicts " +
          HumanSeconds(best->prediction.step_s) + " per step vs " + HumanSeconds(t_none) +
          " without (PS bytes " +
          Ratio(static_cast<double>(plan.prediction.worker_bytes) / best->prediction.worker_bytes) +
          " fewer), short of the " +
          std::to_string(static_cast<int>(options.min_cut_gain * 100 + 0.5)) +
          "% gain a cut must bring";
    }
    return plan;
  }
  Plan plan = *best;
  uint64_t suffix_bytes = 0;
  for (size_t i = plan.cut; i < profile.layers.size(); ++i) {
    suffix_bytes += profile.layers[i].param_bytes;
  }
  plan.reason =
      "cut before '" + plan.cut_layer + "' (layer " + std::to_string(plan.cut) + " of " +
      std::to_string(profile.layers.size()) + "): its " +
      HumanBytes(static_cast<double>(suffix_bytes)) + " of suffix parameters stay on " +
      servers_text + "; predicted " + HumanSeconds(plan.prediction.step_s) + " per step vs " +
      HumanSeconds(t_none) + " without a cut, PS bytes " +
      Ratio(static_cast<double>(none->prediction.worker_bytes) / plan.prediction.worker_bytes) +
      " fewer";
  return plan;
}

}  // namespace placement
}  // namespace ps
