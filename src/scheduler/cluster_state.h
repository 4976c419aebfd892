// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ClusterState: what the scheduler's parts (membership, the table directory, the
// barriers) share: the cluster map it owns and the way to reach the nodes. Implemented
// by the scheduler; every call happens on its loop thread.
#ifndef PS_SCHEDULER_CLUSTER_STATE_H_
#define PS_SCHEDULER_CLUSTER_STATE_H_

#include "common/cluster_map.h"
#include "ps/types.h"

namespace layerps {
namespace pb {
class Control;
}  // namespace pb
}  // namespace layerps

namespace ps {

class ClusterState {
 public:
  virtual ~ClusterState() = default;
  // The map the scheduler broadcasts; parts may change it, then call BroadcastMap.
  virtual ClusterMap& map() = 0;
  // Bumps the epoch and sends the map to every live node.
  virtual void BroadcastMap() = 0;
  // Sends a control message, giving up quickly on a peer that cannot take it.
  virtual void Send(NodeId to, const layerps::pb::Control& c) = 0;
  // Every server and worker has registered.
  virtual bool complete() const = 0;
};

}  // namespace ps

#endif  // PS_SCHEDULER_CLUSTER_STATE_H_
