// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Communicator::Impl: the public Communicator (ps/communicator.h) over the worker's
// engines: the peer messages (worker/peer_messages.*), the collectives
// (worker/collectives.*) and the request tracker they share with the worker's tables.
// What it needs of the worker it owns nothing of — the cluster map, its own node id,
// which peers left, whether the cluster failed — comes through Host.
//
// Thread-safety: as the public class: every member from any thread.
#ifndef PS_WORKER_COMMUNICATOR_IMPL_H_
#define PS_WORKER_COMMUNICATOR_IMPL_H_

#include <chrono>
#include <functional>
#include <memory>

#include "common/cluster_map.h"
#include "ps/communicator.h"
#include "worker/collectives.h"
#include "worker/peer_messages.h"
#include "worker/request_tracker.h"

namespace ps {

class Communicator::Impl {
 public:
  // The worker's state the communicator reads (each callable from any thread).
  struct Host {
    // The cluster map while the worker runs; null before Start() and after Stop().
    std::function<std::shared_ptr<const ClusterMap>()> map;
    // This worker's node id (valid while map() is not null).
    std::function<NodeId()> self;
    // Whether node `id` died or left (a worker's departure changes no map).
    std::function<bool(NodeId id)> gone;
    // Why the cluster failed; OK while it has not.
    std::function<Status()> failure;
  };

  Impl(Host host, RequestTracker* tracker, PeerMessages* peers, Collectives* collectives)
      : host_(std::move(host)), tracker_(tracker), peers_(peers), collectives_(collectives) {}

  uint32_t rank() const;
  int size() const;

  // Worker to worker by rank: the peer's node id, checked (started, known, not this
  // worker, alive, the cluster not failed, a user tag).
  Ticket PeerRequest(uint32_t rank, bool send, uint64_t tag, const float* in, float* out,
                     size_t n, Callback cb);
  Ticket RecvFromAny(uint64_t tag, float* out, size_t n, uint32_t* from, Callback cb);

  // A collective started through `start` (the engine's call), unless the cluster failed.
  Ticket Collective(const std::function<Ticket(Callback)>& start, Callback cb);
  // A collective's ticket waited for until it completed: the engine ends every op by its
  // deadline (plus the grace of its messages), so this returns.
  Status Blocking(Ticket ticket, const CollectiveOptions& options);

  // Why the cluster failed; OK while it has not.
  Status Failure() const { return host_.failure(); }
  Collectives& collectives() { return *collectives_; }
  RequestTracker& tracker() { return *tracker_; }

 private:
  const Host host_;
  RequestTracker* const tracker_;
  PeerMessages* const peers_;
  Collectives* const collectives_;
};

}  // namespace ps

#endif  // PS_WORKER_COMMUNICATOR_IMPL_H_
