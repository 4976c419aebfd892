// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The strategy registry and the comparison that picks the fastest predicted plan.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "placement/plan_util.h"
#include "ps/placement.h"

namespace ps {
namespace placement {

using internal::HumanBytes;
using internal::HumanSeconds;
using internal::Ratio;

Status StrategyRegistry::Register(Strategy strategy) {
  if (strategy.name.empty()) return InvalidArgument("strategy without a name");
  if (!strategy.make) return InvalidArgument("strategy '" + strategy.name + "' has no function");
  if (Find(strategy.name) != nullptr) {
    return AlreadyExists("strategy '" + strategy.name + "' is registered already");
  }
  strategies_.push_back(std::move(strategy));
  return Status::OK();
}

const Strategy* StrategyRegistry::Find(const std::string& name) const {
  for (const Strategy& s : strategies_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> StrategyRegistry::Names() const {
  std::vector<std::string> names;
  for (const Strategy& s : strategies_) names.push_back(s.name);
  return names;
}

StrategyRegistry DefaultStrategies() {
  StrategyRegistry r;
  // The names are distinct and the functions set: Register cannot fail here.
  (void)r.Register({"uniform", "every table split evenly over all servers (ps-lite)", UniformPlan});
  (void)r.Register(
      {"balanced", "tables in chunks, largest first, on the least-loaded servers", BalancedPlan});
  (void)r.Register(
      {"park", "FC suffix on dedicated server(s), run there by a PS worker (RALP)", ParkPlan});
  (void)r.Register({"stanza", "conv nodes and N_f FC nodes (layer separation)", StanzaPlan});
  (void)r.Register({"allreduce", "every gradient by ring all-reduce, no server (Horovod)", AllReducePlan});
  (void)r.Register(
      {"hybrid", "embeddings as sparse tables on the servers, the rest all-reduced (Parallax)",
       HybridPlan});
  // Further strategies (optcnn) register here.
  return r;
}

StatusOr<Comparison> ComparePlans(const ModelProfile& profile, const ClusterSpec& cluster,
                                  const PlanOptions& options, const StrategyRegistry& registry,
                                  const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names.empty() ? registry.Names() : names;
  Comparison out;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const std::string& name = wanted[i];
    const Strategy* s = registry.Find(name);
    if (s == nullptr) return InvalidArgument("unknown strategy '" + name + "'");
    if (std::find(wanted.begin(), wanted.begin() + i, name) != wanted.begin() + i) {
      return InvalidArgument("strategy '" + name + "' named twice");
    }
    StatusOr<Plan> plan = s->make(profile, cluster, options);
    if (plan.ok() && name == "stanza" && options.fc_nodes == 0) {
      // The comparison wants stanza's fastest step, and Stanza's rule for N_f weighs the
      // link against the conv compute only (not the FC compute the FC nodes share, nor
      // where their all-reduce runs): every N_f is predicted and the fastest kept.
      // Counts 1..8, then the powers of two and min(W, S): a bounded number of plans
      // even at 65,536 servers. A plan that fits the servers' memory beats one that does not.
      const int rule = static_cast<int>(plan->roles.fc_nodes.size());
      const int limit = std::min(cluster.workers, cluster.servers);
      PlanOptions each = options;
      for (int n = 1; n <= limit; n = n < 8 ? n + 1 : (n * 2 > limit && n < limit ? limit : n * 2)) {
        if (n == rule) continue;
        each.fc_nodes = n;
        StatusOr<Plan> other = s->make(profile, cluster, each);
        // Ranked as the comparison ranks plans: one that fits first, then the step.
        if (!other.ok()) continue;
        const bool fits = other->prediction.fits_memory, fit = plan->prediction.fits_memory;
        if (fits != fit ? fits : other->prediction.step_s < plan->prediction.step_s) {
          plan = std::move(other);
        }
      }
      const int picked = static_cast<int>(plan->roles.fc_nodes.size());
      if (picked != rule) {
        const std::string given = "N_f = " + std::to_string(picked) + " (given)";
        const size_t at = plan->reason.find(given);
        const std::string why = "N_f = " + std::to_string(picked) +
                                ": the fastest predicted step (Stanza's link rule gives " +
                                std::to_string(rule) + ")";
        if (at != std::string::npos) {
          plan->reason.replace(at, given.size(), why);
        } else {
          plan->reason += "; " + why;
        }
      }
    }
    if (!plan.ok()) {
      if (plan.status().code() == StatusCode::kFailedPrecondition) {
        out.skipped.push_back(name + ": " + plan.status().message());
        continue;
      }
      const std::string& msg = plan.status().message();
      return msg.rfind(name + ":", 0) == 0 ? plan.status() : plan.status().WithContext(name);
    }
    out.plans.push_back(std::move(plan).value());
  }
  if (out.plans.empty()) {
    return FailedPrecondition("no strategy applies to model '" + profile.name + "'");
  }
  // The shortest predicted step among the plans that fit; ties: fewer bytes at the
  // busiest NIC, then the earlier strategy. A plan with a cut (a split step) competes
  // with its step time inflated by 1 / (1 - min_cut_gain): it must beat the plans
  // without a cut by that margin, as park's own search requires.
  const double cut_penalty = 1.0 / (1.0 - options.min_cut_gain);
  auto score = [cut_penalty](const Plan& p) {
    return p.cut >= 0 ? p.prediction.step_s * cut_penalty : p.prediction.step_s;
  };
  auto better = [&score](const Plan& a, const Plan& b) {
    if (a.prediction.fits_memory != b.prediction.fits_memory) return a.prediction.fits_memory;
    if (score(a) != score(b)) return score(a) < score(b);
    return a.prediction.busiest_nic_bytes < b.prediction.busiest_nic_bytes;
  };
  int best = 0, second = -1;
  for (int i = 1; i < static_cast<int>(out.plans.size()); ++i) {
    if (better(out.plans[i], out.plans[best])) best = i;
  }
  for (int i = 0; i < static_cast<int>(out.plans.size()); ++i) {
    if (i != best && (second < 0 || better(out.plans[i], out.plans[second]))) second = i;
  }
  out.chosen = best;
  const Plan& p = out.plans[best];
  const NodeLoad& busy = p.prediction.nodes[p.prediction.busiest];
  std::string reason = out.plans.size() == 1 ? p.strategy + ": the only strategy compared, " +
                                                   HumanSeconds(p.prediction.step_s) + " per step"
                                             : p.strategy + ": fastest predicted step, " +
                                                   HumanSeconds(p.prediction.step_s);
  const Plan* faster_cut = nullptr;  // a split step predicted faster, but not by enough
  for (const Plan& q : out.plans) {
    if (q.cut >= 0 && q.prediction.fits_memory && q.prediction.step_s < p.prediction.step_s &&
        (faster_cut == nullptr || q.prediction.step_s < faster_cut->prediction.step_s)) {
      faster_cut = &q;
    }
  }
  if (faster_cut != nullptr) {
    reason = p.strategy + ": " + HumanSeconds(p.prediction.step_s) + " per step; " +
             faster_cut->strategy + "'s cut before '" + faster_cut->cut_layer + "' predicts " +
             HumanSeconds(faster_cut->prediction.step_s) + ", less than the " +
             std::to_string(static_cast<int>(options.min_cut_gain * 100 + 0.5)) +
             "% gain a split step must bring";
  } else if (second >= 0) {
    const Plan& q = out.plans[second];
    if (q.prediction.step_s == p.prediction.step_s) {
      reason +=
          ", tied with " + q.strategy + " (the same traffic; " + p.strategy + " is listed first)";
    } else {
      reason += " vs " + HumanSeconds(q.prediction.step_s) + " for " + q.strategy + " (" +
                Ratio(q.prediction.step_s / p.prediction.step_s) + ")";
    }
  }
  reason += "; busiest NIC " + std::string(busy.is_server ? "server " : "worker ") +
            std::to_string(busy.rank) + " with " +
            HumanBytes(static_cast<double>(p.prediction.busiest_nic_bytes)) + " per step";
  if (!p.prediction.fits_memory) reason += "; NO plan fits in memory: " + p.prediction.memory_note;
  out.reason = reason;
  return out;
}

}  // namespace placement
}  // namespace ps
