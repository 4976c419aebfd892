// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Checkpoints: the scheduler's part that runs checkpoint sets (docs/checkpoints.md). A
// worker's request (Worker::Checkpoint) or the periodic timer (checkpoint_every_s) sends
// WriteCheckpoint to every live server with a new set number; the set is done when every
// one of them answered CheckpointDone, and fails at the first failure, the death of one
// of them, or after kSetDeadlineMs. One set at a time: a request for the same directory
// arriving meanwhile is answered with that set; a request for another directory is
// refused (kFailedPrecondition: retry). Set numbers are the scheduler's wall clock in
// milliseconds, kept increasing, so a later set sorts after an earlier one even across
// restarts of the cluster.
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_CHECKPOINTS_H_
#define PS_SCHEDULER_CHECKPOINTS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"
#include "scheduler/cluster_state.h"

namespace layerps {
namespace pb {
class Checkpoint;
class CheckpointDone;
}  // namespace pb
}  // namespace layerps

namespace ps {

class Checkpoints {
 public:
  // default_dir: the scheduler's checkpoint_dir (a request without a directory, and the
  // periodic sets); every_s: the period, 0 for none.
  Checkpoints(ClusterState* state, std::string default_dir, int every_s)
      : state_(state), default_dir_(std::move(default_dir)), every_ms_(int64_t{every_s} * 1000) {}

  void HandleRequest(NodeId from, const layerps::pb::Checkpoint& c, int64_t now_ms);
  void HandleDone(NodeId from, const layerps::pb::CheckpointDone& d, int64_t now_ms);
  // A server died: the set in progress fails.
  void OnServerDead(NodeId id, int64_t now_ms);
  // The periodic set and the deadline of the set in progress (the cluster is complete).
  void Tick(int64_t now_ms);

  static constexpr int64_t kSetDeadlineMs = int64_t{3600} * 1000;

 private:
  struct Waiter {
    NodeId node;
    uint64_t request_id;
  };
  void StartSet(const std::string& dir, int64_t now_ms);
  void Finish(const Status& result, int64_t now_ms);
  void Answer(const Waiter& w, const Status& result, const std::string& detail);

  ClusterState* const state_;
  const std::string default_dir_;
  const int64_t every_ms_;
  int64_t next_periodic_ms_ = -1;  // -1: not scheduled yet
  uint64_t last_set_ = 0;
  // The set in progress (active_ false: none).
  bool active_ = false;
  uint64_t set_ = 0;
  std::string dir_;
  std::string set_path_;  // its directory, from the first file reported
  int64_t started_ms_ = 0;
  std::set<NodeId> pending_;  // servers yet to answer
  std::vector<Waiter> waiters_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_CHECKPOINTS_H_
