// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Barriers: the scheduler's synchronization part. A barrier of a group (workers, servers,
// all) completes when every live member of the group arrived; a member's death fails the
// barriers in progress; a member that leaves stops counting. SSP clocks belong here too.
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_BARRIERS_H_
#define PS_SCHEDULER_BARRIERS_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"
#include "scheduler/cluster_state.h"

namespace layerps {
namespace pb {
class Barrier;
}  // namespace pb
}  // namespace layerps

namespace ps {

class Barriers {
 public:
  explicit Barriers(ClusterState* state) : state_(state) {}

  void HandleBarrier(NodeId from, const layerps::pb::Barrier& b);
  // Fails every barrier in progress with `why`.
  void FailAll(const Status& why);
  // `node` left: it no longer waits, and the barriers it held back may complete.
  void Forget(NodeId node);

 private:
  struct Waiter {
    NodeId node;
    uint64_t call_id;
  };
  std::set<NodeId> GroupMembers(Group g);
  void ReplyBarrier(const Waiter& w, const Status& s);
  void CheckBarrier(Group g);

  ClusterState* const state_;
  std::map<Group, std::vector<Waiter>> waiting_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_BARRIERS_H_
