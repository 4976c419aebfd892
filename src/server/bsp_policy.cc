// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The bulk-synchronous policy. Steps are numbered from 0; per key range, the version v
// counts the steps applied. A push of clock c is step c's contribution of its worker: it
// is added to step c's sum (not applied). When step v holds a push from every live
// worker, the table's rule is applied ONCE to the sum, v becomes v + 1, and the pulls
// waiting for v + 1 are answered before anything else happens. A pull of clock t (its
// worker made t pushes) thus waits until v >= t and returns the state after t steps:
// exactly that state when every worker issues its pushes and pulls in order (a pushpull
// per step, as the Trainer does; a worker pushing ahead asynchronously may see more).
//
// A worker that leaves or dies stops counting: the step completes with the pushes of the
// live workers (what the gone worker had pushed stays in the sum). Pushes may run ahead
// of the slowest worker by at most kMaxStepsAhead steps (their sums wait, one range-sized
// buffer each).
#include <glog/logging.h>

#include <cstring>

#include "server/sync_state.h"

namespace ps {
namespace sync {
namespace {

constexpr uint64_t kMaxStepsAhead = 8;

class BspPolicy final : public ClockedPolicy {
 public:
  explicit BspPolicy(int hold_timeout_ms) : ClockedPolicy(SyncMode::kBsp, hold_timeout_ms) {}

 protected:
  Status Admit(const Range& r, uint64_t clock) const override {
    const std::string where = "table '" + r.info.spec.name + "' (bsp)";
    if (clock < r.version) {
      return FailedPrecondition(where + ": step " + std::to_string(clock) +
                                " was applied without this worker (it was not counted then)");
    }
    if (clock >= r.version + kMaxStepsAhead) {
      return ResourceExhausted(where + ": a push for step " + std::to_string(clock) +
                               " is more than " + std::to_string(kMaxStepsAhead) +
                               " steps ahead of step " + std::to_string(r.version) +
                               " (the slowest worker's)");
    }
    return Status::OK();
  }

  Status Accept(Range& r, const DataRequest& req, Store& store) override {
    const Header& h = req.header;
    PendingStep& step = r.steps[h.clock];
    step.from.insert(h.sender);
    if (!h.sparse()) {
      // The frame need not be aligned for floats: copy (first push) or add element-wise.
      const uint8_t* src = req.frames[0].data();
      if (step.dense.empty()) {
        step.dense.resize(h.count);
        if (h.count > 0) std::memcpy(step.dense.data(), src, h.count * sizeof(float));
      } else {
        float* sum = step.dense.data();
        for (uint64_t i = 0; i < h.count; ++i) {
          float v;
          std::memcpy(&v, src + i * sizeof(float), sizeof(v));
          sum[i] += v;
        }
      }
      return Status::OK();
    }
    const uint32_t dim = h.dim;
    const uint8_t* keys = req.frames[0].data();
    const uint8_t* rows = req.frames[1].data();
    for (uint64_t j = 0; j < h.count; ++j) {
      Key key;
      std::memcpy(&key, keys + j * sizeof(Key), sizeof(key));
      auto ins = step.row_of.emplace(key, step.keys.size());
      if (ins.second) {
        step.keys.push_back(key);
        step.rows.resize(step.rows.size() + dim, 0.0f);
      }
      float* sum = step.rows.data() + ins.first->second * dim;
      for (uint32_t k = 0; k < dim; ++k) {
        float v;
        std::memcpy(&v, rows + (j * dim + k) * sizeof(float), sizeof(v));
        sum[k] += v;
      }
    }
    return Status::OK();
  }

  bool AdvanceOne(Range& r, Store& store) override {
    if (live().empty()) return false;
    auto it = r.steps.find(r.version);
    if (it == r.steps.end()) return false;
    PendingStep& step = it->second;
    for (NodeId w : live()) {
      if (!step.from.count(w)) return false;
    }
    const RangeInfo& info = r.info;
    Status s = info.spec.kind == TableKind::kDense
                   ? store.ApplyDense(info.table, info.first, info.count, step.dense.data(),
                                      ApplyOp::kRule)
                   : store.ApplySparse(info.table, step.keys.data(), step.keys.size(),
                                       info.spec.dim, step.rows.data(), ApplyOp::kRule);
    if (!s.ok()) {
      LOG(ERROR) << "table '" << info.spec.name << "' (bsp): step " << r.version
                 << " could not be applied: " << s;
    }
    r.steps.erase(it);
    ++r.version;
    return true;
  }

  bool Ready(const Range& r, uint64_t need) const override { return r.version >= need; }

  std::string Waiting(const Range& r, uint64_t need) const override {
    std::string missing;
    auto it = r.steps.find(r.version);
    for (NodeId w : live()) {
      if (it == r.steps.end() || !it->second.from.count(w)) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(w);
      }
    }
    return "step " + std::to_string(need - 1) + " (the range has " + std::to_string(r.version) +
           " steps applied; step " + std::to_string(r.version) +
           " still lacks the pushes of worker node(s) " + missing + ")";
  }
};

}  // namespace
}  // namespace sync

std::unique_ptr<SyncPolicy> NewBspPolicy(int hold_timeout_ms) {
  return std::make_unique<sync::BspPolicy>(hold_timeout_ms);
}

}  // namespace ps
