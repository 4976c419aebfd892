// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A placement plan file (placement/json.cc: PlanFromJson), as layerps-scheduler --plan
// reads it and puts it in force (TablePlacementOf), then as a consumer checks it against
// its model and predicts it (ValidatePlan, PredictPlan: json_test's round trip). The
// model is the built-in the plan names, else every built-in with as many layers. No input
// may crash the reader or what runs next; the reader refuses with InvalidArgument, and a
// plan it accepts keeps its promises (ranks inside its cluster, matching lengths, FC node
// indices), writes back and reads back the same, and a plan ValidatePlan accepts adds up
// (no byte count wraps) and predicts without a crash.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "ps/placement.h"

namespace {

namespace pl = ps::placement;

std::vector<pl::ModelProfile>* g_models;

bool RanksIn(const std::vector<int>& ranks, int limit) {
  for (int r : ranks) {
    if (r < 0 || r >= limit) return false;
  }
  return true;
}

// What a plan that ValidatePlan accepted promises the cost model and the scheduler.
void CheckValidated(const pl::Plan& plan, const pl::ModelProfile& model) {
  const int S = plan.cluster.servers;
  FUZZ_ASSERT(plan.layers.size() == model.layers.size());
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const pl::LayerPlacement& p = plan.layers[i];
    const pl::LayerProfile& l = model.layers[i];
    FUZZ_ASSERT(p.layer == l.name && p.servers.size() == p.server_bytes.size());
    FUZZ_ASSERT(RanksIn(p.servers, S));
    FUZZ_ASSERT(std::set<int>(p.servers.begin(), p.servers.end()).size() == p.servers.size());
    uint64_t sum = 0;
    bool wrapped = false;
    for (uint64_t b : p.server_bytes) {
      wrapped |= __builtin_add_overflow(sum, b, &sum);
      // No share of a layer is larger than the layer.
      FUZZ_ASSERT(b <= l.param_bytes);
    }
    FUZZ_ASSERT(!wrapped);
    if (p.mode == pl::TrainMode::kPs || p.mode == pl::TrainMode::kOnServer) {
      FUZZ_ASSERT(sum == l.param_bytes);
    }
  }
  if (plan.cut != -1) {
    FUZZ_ASSERT(plan.cut >= 1 && plan.cut < static_cast<int>(model.layers.size()));
  }
  // PredictPlan's cost is linear in the nodes: keep each input fast.
  if (plan.cluster.workers + plan.cluster.servers > 1024) return;
  pl::PlanOptions options;
  options.batch = plan.batch;
  pl::Plan predicted = plan;
  ps::Status s = pl::PredictPlan(model, options, &predicted);
  if (!s.ok()) {
    FUZZ_ASSERT(s.code() == ps::StatusCode::kInvalidArgument);
    return;
  }
  const pl::PlanPrediction& pred = predicted.prediction;
  FUZZ_ASSERT(pred.nodes.size() ==
              static_cast<size_t>(plan.cluster.workers) + static_cast<size_t>(S));
  FUZZ_ASSERT(pred.busiest >= 0 && pred.busiest < static_cast<int>(pred.nodes.size()));
  FUZZ_ASSERT(pred.step_s >= 0);  // infinite for absurd rates, never NaN
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  g_models = new std::vector<pl::ModelProfile>();
  for (const std::string& name : pl::BuiltinProfileNames()) {
    ps::StatusOr<pl::ModelProfile> m = pl::BuiltinProfile(name);
    if (!m.ok()) abort();
    g_models->push_back(*m);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ps::StatusOr<pl::Plan> parsed = pl::PlanFromJson(text);
  if (!parsed.ok()) {
    FUZZ_ASSERT(parsed.status().code() == ps::StatusCode::kInvalidArgument);
    return 0;
  }
  const pl::Plan& plan = *parsed;

  // What the reader checks on its own.
  FUZZ_ASSERT(plan.cluster.Validate().ok());
  const int S = plan.cluster.servers, W = plan.cluster.workers;
  FUZZ_ASSERT(plan.batch >= 1 && plan.batch <= (1u << 24));
  FUZZ_ASSERT(plan.fc_parallel == "data" || plan.fc_parallel == "channel");
  FUZZ_ASSERT(RanksIn(plan.roles.conv_workers, W) && RanksIn(plan.roles.ps_servers, S) &&
              RanksIn(plan.roles.dedicated_servers, S) && RanksIn(plan.roles.fc_nodes, S));
  FUZZ_ASSERT(plan.roles.ps_worker >= -1 && plan.roles.ps_worker < S);
  FUZZ_ASSERT(plan.roles.fc_node_of_worker.size() <= static_cast<size_t>(W));
  FUZZ_ASSERT(RanksIn(plan.roles.fc_node_of_worker, static_cast<int>(plan.roles.fc_nodes.size())));
  for (const pl::LayerPlacement& l : plan.layers) {
    FUZZ_ASSERT(l.servers.size() == l.server_bytes.size() && RanksIn(l.servers, S));
  }
  const pl::PlanPrediction& pred = plan.prediction;
  FUZZ_ASSERT(pred.busiest >= -1 && pred.busiest < static_cast<int>(pred.nodes.size()));

  // What layerps-scheduler --plan installs: server ranks of this cluster, named layers.
  for (const ps::LayerServers& ls : pl::TablePlacementOf(plan)) {
    FUZZ_ASSERT(!ls.servers.empty());
    for (uint32_t r : ls.servers) FUZZ_ASSERT(r < static_cast<uint32_t>(S));
  }

  // Written back, it reads back the same.
  const std::string written = pl::PlanToJson(plan);
  ps::StatusOr<pl::Plan> back = pl::PlanFromJson(written);
  FUZZ_ASSERT(back.ok());
  FUZZ_ASSERT(pl::PlanToJson(*back) == written);

  // Against its model.
  for (const pl::ModelProfile& m : *g_models) {
    if (m.name != plan.model && m.layers.size() != plan.layers.size()) continue;
    if (pl::ValidatePlan(plan, m).ok()) CheckValidated(plan, m);
  }
  return 0;
}
