// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What a running collective (collective::Op, worker/collective_op.h) needs of the engine
// that runs it (Collectives, worker/collectives.h): the peer channel and the tracker its
// messages go through, what the engine knows of the members' deaths and leaves, and the
// completion of an op whose messages all ended. The algorithms see only this.
#ifndef PS_WORKER_COLLECTIVE_HOST_H_
#define PS_WORKER_COLLECTIVE_HOST_H_

#include <cstddef>
#include <memory>

#include "ps/types.h"

namespace ps {

class PeerMessages;
class RequestTracker;

namespace collective {

struct Op;

class OpHost {
 public:
  virtual ~OpHost() = default;
  virtual PeerMessages& peers() = 0;
  virtual RequestTracker& tracker() = 0;
  // The position in `op` of the member of lowest rank known dead (or gone), or
  // op.world() when none is.
  virtual size_t DeadPosition(const Op& op) const = 0;
  // Whether node `id` left cleanly (its Stop): sends to it count as delivered.
  virtual bool HasLeft(NodeId id) const = 0;
  // Every message of `op` completed: its status, its last step, its ticket.
  virtual void Complete(const std::shared_ptr<Op>& op) = 0;
};

}  // namespace collective
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_HOST_H_
