// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A model profile file (placement/json.cc: ModelProfileFromJson), as layerps-plan
// --model=FILE.json reads it, then what the planner does next: its cut points, the
// conv/fc boundary, and the two cheap strategies (uniform, balanced) on a small cluster,
// whose plans are checked against the profile and written and read back as
// layerps-scheduler --plan would read them. No input may crash the reader or what runs
// next; the reader refuses with InvalidArgument, and a profile it accepts is valid,
// writes back and reads back the same, and yields plans that ValidatePlan accepts.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "ps/placement.h"

namespace {

namespace pl = ps::placement;

void CheckPlan(const ps::StatusOr<pl::Plan>& made, const pl::ModelProfile& m) {
  if (!made.ok()) {
    // The one refusal a valid profile may get: bytes per step beyond 2^63.
    FUZZ_ASSERT(made.status().code() == ps::StatusCode::kInvalidArgument);
    return;
  }
  const pl::Plan& plan = *made;
  FUZZ_ASSERT(plan.layers.size() == m.layers.size());
  FUZZ_ASSERT(pl::ValidatePlan(plan, m).ok());
  const pl::PlanPrediction& pred = plan.prediction;
  FUZZ_ASSERT(pred.busiest >= 0 && pred.busiest < static_cast<int>(pred.nodes.size()));
  FUZZ_ASSERT(pred.step_s >= 0);  // infinite for absurd FLOPs, never NaN
  // The plan file the tool writes reads back, and still fits the model.
  ps::StatusOr<pl::Plan> back = pl::PlanFromJson(pl::PlanToJson(plan));
  FUZZ_ASSERT(back.ok());
  FUZZ_ASSERT(pl::ValidatePlan(*back, m).ok());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ps::StatusOr<pl::ModelProfile> parsed = pl::ModelProfileFromJson(text);
  if (!parsed.ok()) {
    FUZZ_ASSERT(parsed.status().code() == ps::StatusCode::kInvalidArgument);
    return 0;
  }
  const pl::ModelProfile& m = *parsed;
  FUZZ_ASSERT(m.Validate().ok());
  const int n = static_cast<int>(m.layers.size());
  FUZZ_ASSERT(n >= 1);
  for (int i = 0; i < n; ++i) {
    FUZZ_ASSERT(m.LayerIndex(m.layers[i].name) == i);
    for (const std::string& in : m.layers[i].inputs) {
      const int j = m.LayerIndex(in);
      FUZZ_ASSERT(j >= 0 && j < i);
    }
  }
  (void)m.TotalParamBytes();
  (void)m.TotalFlopsPerSample();

  // Written back, it reads back the same.
  const std::string written = pl::ModelProfileToJson(m);
  ps::StatusOr<pl::ModelProfile> back = pl::ModelProfileFromJson(written);
  FUZZ_ASSERT(back.ok());
  FUZZ_ASSERT(pl::ModelProfileToJson(*back) == written);

  // Cut points: increasing, inside the model, each read from one earlier layer.
  int last = 0;
  for (const pl::CutPoint& c : pl::FindCutPoints(m)) {
    FUZZ_ASSERT(c.index > last && c.index < n);
    FUZZ_ASSERT(c.producer >= 0 && c.producer < c.index);
    FUZZ_ASSERT(c.activation_bytes == m.layers[c.producer].activation_bytes);
    last = c.index;
  }
  ps::StatusOr<pl::CutPoint> fc = pl::FcBoundaryCut(m);
  if (fc.ok()) {
    FUZZ_ASSERT(fc->index >= 1 && fc->index < n);
  } else {
    FUZZ_ASSERT(fc.status().code() == ps::StatusCode::kNotFound);
  }

  // The cheap strategies on a small cluster.
  pl::ClusterSpec cluster;
  cluster.servers = 2;
  cluster.workers = 3;
  pl::PlanOptions options;
  options.batch = 8;
  CheckPlan(pl::UniformPlan(m, cluster, options), m);
  CheckPlan(pl::BalancedPlan(m, cluster, options), m);
  return 0;
}
