// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Barriers: the scheduler's synchronization part. A barrier of a group (workers, servers,
// all) completes when every live member of the group that has not joined arrived, and
// tells each waiter how many took part. A member's death fails the barriers in progress.
//
// Uneven inputs (Worker::Join, as Horovod's join): a worker that ran out of data joins;
// from then on the group's barriers go on without it. A worker that leaves (Stop)
// without joining makes every barrier of a group it belonged to fail, now and later,
// with kUnavailable naming its rank: such a barrier can never complete as the program
// meant it (unless the job tolerates worker loss: then it is dropped as a dead worker). A Join itself is answered once every live worker has joined.
//
// Deadlines: a waiter carries its caller's timeout; past it the scheduler answers
// kTimeout naming the members not arrived and forgets the waiter (so it never counts
// towards a later barrier). Stall warning: a barrier or join waiting longer than
// stall_warning_ms logs which ranks it waits for (again every stall_warning_ms), and
// goes on waiting.
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_BARRIERS_H_
#define PS_SCHEDULER_BARRIERS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"
#include "scheduler/cluster_state.h"

namespace layerps {
namespace pb {
class Barrier;
class Join;
}  // namespace pb
}  // namespace layerps

namespace ps {

class Barriers {
 public:
  // tolerate_departures (the scheduler's tolerate_worker_loss): a worker that leaves
  // without joining is dropped from the groups as a tolerated dead one is, instead of
  // failing their barriers.
  Barriers(ClusterState* state, bool tolerate_departures)
      : state_(state), tolerate_departures_(tolerate_departures) {}

  void HandleBarrier(NodeId from, const layerps::pb::Barrier& b, int64_t now_ms);
  void HandleJoin(NodeId from, const layerps::pb::Join& j, int64_t now_ms);
  // Fails every barrier in progress with `why`.
  void FailAll(const Status& why);
  // `node` left: it no longer waits; a worker that had not joined makes its groups'
  // barriers fail from now on.
  void Forget(NodeId node);
  // A node died: it no longer waits (the barriers in progress were failed by FailAll).
  void Drop(NodeId node);
  // Deadlines and stall warnings; returns how many stall warnings were logged.
  int Tick(int64_t now_ms, int64_t stall_warning_ms);
  bool joined(NodeId node) const { return joined_.count(node) != 0; }
  // Scheduler recovery: how many barriers of each group (ps::Group) some node reported
  // having passed. A barrier whose seq is within that count was released by the old
  // scheduler (to some nodes at least): it is answered at once, until the group's next
  // barrier completes here.
  void Recover(const std::map<uint32_t, uint64_t>& passed) { passed_ = passed; }

 private:
  // kJoin: the waiters in Join (not a ps::Group).
  static constexpr int kJoin = 0;
  struct Waiter {
    NodeId node;
    uint64_t call_id;
    int64_t since_ms = 0;
    int64_t deadline_ms = 0;  // 0: none
  };
  struct Wait {
    std::vector<Waiter> waiters;
    int64_t last_warning_ms = 0;
  };
  std::set<NodeId> GroupMembers(int g) const;
  // The members not arrived, as "worker rank 2 (node 5), ..." (empty when none).
  std::string Missing(int g) const;
  // Why a barrier of `g` can never complete (a member left without joining), or "".
  std::string Broken(int g) const;
  void ReplyBarrier(const Waiter& w, const Status& s, uint32_t participants = 0);
  void Check(int g);
  static const char* GroupName(int g);

  ClusterState* const state_;
  const bool tolerate_departures_;
  std::map<int, Wait> waiting_;
  std::set<NodeId> joined_;
  std::map<NodeId, uint32_t> deserted_;  // workers that left without joining -> rank
  std::map<uint32_t, uint64_t> passed_;   // Recover
};

}  // namespace ps

#endif  // PS_SCHEDULER_BARRIERS_H_
