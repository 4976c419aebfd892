// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What the bsp and ssp policies share (server/sync_policy.h): per key range of a table,
// every live worker's clock (how many of its pushes were counted), the pulls held until
// the clocks allow them, and the checks a request on such a table passes.
//
// A request's clock (header.clock) comes from the network: nothing here trusts it. A
// push already counted (same worker, same clock) is a duplicate and is never applied
// again; a clock too far ahead is refused with an error reply; held requests are bounded
// in number and in time.
//
// Thread-safety: the server's receive thread only.
#ifndef PS_SERVER_SYNC_STATE_H_
#define PS_SERVER_SYNC_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/sync_policy.h"

namespace ps {
namespace sync {

// Pushes counted out of order at most this many clocks past a worker's gapless count; a
// pull may wait at most this far past its worker's counted pushes.
constexpr uint64_t kMaxClockLead = 64;
// Requests one policy holds at once; past it a new one is refused (kResourceExhausted).
constexpr size_t kMaxHeld = size_t{1} << 16;

// One worker's pushes to one range, by clock.
class WorkerClock {
 public:
  WorkerClock() = default;
  // A worker that became live while the range was at clock `base` (it joined a running
  // job, or took a dead worker's rank): its own clocks count from 0, and its clock c is
  // the range's clock base + c (ClockedPolicy::Handle translates).
  explicit WorkerClock(uint64_t base) : next_(base), base_(base) {}
  enum class Outcome { kCounted, kDuplicate, kTooFar };
  // Counts the push of `clock`: kDuplicate when it was counted before, kTooFar when it is
  // more than kMaxClockLead past clock() (not counted).
  Outcome Count(uint64_t clock);
  bool Has(uint64_t clock) const { return clock < next_ || ahead_.count(clock) != 0; }
  // Pushes counted without a gap (the worker's clock as the policies see it).
  uint64_t clock() const { return next_; }
  uint64_t base() const { return base_; }

 private:
  uint64_t next_ = 0;
  uint64_t base_ = 0;
  std::set<uint64_t> ahead_;  // counted past a gap (reordered pushes)
};

// One range of a bsp/ssp table that this server holds.
struct RangeInfo {
  TableId table = kInvalidTable;
  TableSpec spec;
  uint64_t first = 0;  // dense: first element; sparse: 0 (one range per server)
  uint64_t count = 0;  // dense: elements
};

// A pull (or a pushpull's pull) waiting for the clocks.
struct Held {
  DataRequest req;  // header; sparse: the keys (frame 0)
  uint64_t need = 0;
  int64_t since_ms = 0;
  int64_t deadline_ms = 0;
  int64_t warned_ms = 0;  // the last stall warning about it (0: none)
};

// A pending bsp step of one range: the sum of the pushes counted so far and who sent them.
struct PendingStep {
  std::set<NodeId> from;
  std::vector<float> dense;                // dense: the range's sum
  std::unordered_map<Key, size_t> row_of;  // sparse: key -> its row in `rows`
  std::vector<Key> keys;                   // sparse: keys in first-touch order
  std::vector<float> rows;                 // sparse: keys.size() x dim sums
};

struct Range {
  RangeInfo info;
  std::map<NodeId, WorkerClock> clocks;
  std::vector<Held> held;  // in arrival order
  // bsp only: steps applied (the range's version) and the steps still gathering pushes.
  uint64_t version = 0;
  std::map<uint64_t, PendingStep> steps;
};

int64_t NowMs();
// The clock a request's pull waits for: a pull's own clock; a pushpull's clock + 1 (the
// state after its push's step).
inline uint64_t PullNeed(const Header& h) {
  return h.msg_type() == MsgType::kPushPull ? uint64_t{h.clock} + 1 : h.clock;
}
// The values a (non-fused) request's pull asks for, read now.
Status ReadPull(const DataRequest& req, Store& store, std::vector<Frame>* out);
// Applies a (non-fused) request's pushed values with `op`.
Status ApplyPush(const DataRequest& req, Store& store, ApplyOp op);

// The common machinery; BspPolicy and SspPolicy say how a counted push is taken, when a
// step completes and when a pull may be answered.
class ClockedPolicy : public SyncPolicy {
 public:
  ClockedPolicy(SyncMode mode, int hold_timeout_ms)
      : mode_(mode), hold_timeout_ms_(hold_timeout_ms) {}

  void Handle(DataRequest&& req, Store& store, const ReplyFn& reply) final;
  void OnMap(const ClusterMap& map, NodeId self) final;
  std::string SetWorkers(const std::set<NodeId>& live, Store& store, const ReplyFn& reply) final;
  void Tick(int64_t now_ms, Store& store, const ReplyFn& reply) final;
  size_t held() const final { return held_count_; }
  void SetStallWarning(int ms) final { stall_warning_ms_ = ms; }
  uint64_t stall_warnings() const final { return stall_warnings_.load(); }

 protected:
  // May refuse a push of `clock` not counted before (bsp: its step is over, or too far).
  virtual Status Admit(const Range& r, uint64_t clock) const { return Status::OK(); }
  // Takes a newly counted push (bsp: into its step's sum; ssp: applied to the store).
  virtual Status Accept(Range& r, const DataRequest& req, Store& store) = 0;
  // Completes one step if it can (bsp); true when it did.
  virtual bool AdvanceOne(Range& r, Store& store) { return false; }
  // Whether a pull waiting for `need` may be answered now.
  virtual bool Ready(const Range& r, uint64_t need) const = 0;
  // Why a pull waiting for `need` still waits (for its timeout's message).
  virtual std::string Waiting(const Range& r, uint64_t need) const = 0;

  const std::set<NodeId>& live() const { return live_; }
  // The fewest pushes counted from any live worker (UINT64_MAX when none is live).
  uint64_t MinClock(const Range& r) const;
  // "worker node 5 at clock 3, node 6 at clock 4" for the live workers of a range.
  std::string Clocks(const Range& r) const;

 private:
  // Answers the held pulls that are ready, completing steps one at a time in between.
  void Progress(Range& r, Store& store, const ReplyFn& reply);
  void AnswerReady(Range& r, Store& store, const ReplyFn& reply);
  Range* Find(const DataRequest& req, Status* error);

  const SyncMode mode_;
  const int hold_timeout_ms_;
  std::map<std::pair<TableId, uint64_t>, Range> ranges_;  // by (table, first element)
  std::set<NodeId> live_;
  size_t held_count_ = 0;
  uint64_t duplicates_ = 0;
  // "worker node 5 is rank 1, node 6 is rank 0" for the live workers (stall warnings).
  std::string Ranks() const;

  int stall_warning_ms_ = 0;
  std::map<NodeId, uint32_t> rank_of_;  // workers' ranks, from the maps
  std::atomic<uint64_t> stall_warnings_{0};
};

}  // namespace sync
}  // namespace ps

#endif  // PS_SERVER_SYNC_STATE_H_
