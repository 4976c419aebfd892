// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The stale-synchronous policy (staleness s = TableSpec::staleness). Per key range: every
// push is applied with the table's rule as it arrives (once: a duplicate is counted and
// skipped), and counts one clock for its worker. A pull of clock c (its worker made c
// pushes, i.e. it is about to compute step c) is held while c - m > s, m being the
// fewest pushes counted from any live worker; it then reads the latest state. So no
// worker gets past a step's pull more than s steps ahead of the slowest live worker.
//
// With s = 0 and one pushpull per step (as the Trainer does), every pull of clock c is
// answered in the same instant as the others' (when the last push of step c - 1 arrives)
// and before any push of step c can arrive: the state read is the one BSP produces, up
// to the order in which the pushes were added (for sgd, equal within float rounding).
// A plain pull of clock c is not such a pull: it is answered at once (nobody lags it) with
// the latest state, which may already hold other workers' pushes of clock c. So a worker's
// first pull (clock 0) equals bsp's only if no worker pushes before every worker has
// pulled: the Trainer puts a barrier between its first pull and its first push.
#include "server/sync_state.h"

namespace ps {
namespace sync {
namespace {

class SspPolicy final : public ClockedPolicy {
 public:
  explicit SspPolicy(int hold_timeout_ms) : ClockedPolicy(SyncMode::kSsp, hold_timeout_ms) {}

 protected:
  Status Accept(Range& r, const DataRequest& req, Store& store) override {
    return ApplyPush(req, store, ApplyOp::kRule);
  }

  bool Ready(const Range& r, uint64_t need) const override {
    const uint64_t m = MinClock(r);  // UINT64_MAX when no worker is live: nothing to wait for
    return need <= m || need - m <= static_cast<uint64_t>(r.info.spec.staleness);
  }

  std::string Waiting(const Range& r, uint64_t need) const override {
    return "the slowest worker to reach clock " +
           std::to_string(need - static_cast<uint64_t>(r.info.spec.staleness)) + " (staleness " +
           std::to_string(r.info.spec.staleness) + ")";
  }
};

}  // namespace
}  // namespace sync

std::unique_ptr<SyncPolicy> NewSspPolicy(int hold_timeout_ms) {
  return std::make_unique<sync::SspPolicy>(hold_timeout_ms);
}

}  // namespace ps
