// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ServerFailover: where the parts of requests go while servers are replaced (part of
// RequestTracker, worker/request_tracker.h; the scheduler's replace_servers_ms and
// replication, docs/checkpoints.md). A server that died and may be replaced is parked: its
// unanswered parts, and new ones, wait (each within its deadline). Once a server takes
// its place (the same rank, or its successor under replication), the dead one is
// retargeted: the waiting parts go to the new one, and so do later parts built from a map
// that still names the dead one. While the cluster may replace servers (SetRetain), every
// part keeps its payload until it is answered, to be sent again.
//
// Thread-safety: every member may be called from any thread. The callbacks of Route and
// Retarget run under this unit's lock: lock order, this lock, then a request's mutex.
#ifndef PS_WORKER_SERVER_FAILOVER_H_
#define PS_WORKER_SERVER_FAILOVER_H_

#include <atomic>
#include <functional>
#include <map>

#include "common/mutex.h"
#include "ps/types.h"

namespace ps {

class ServerFailover {
 public:
  struct ParkedServer {
    uint32_t rank = 0;
    // The server that took over its ranges (replication), or kUnassignedId when a new
    // server of the same rank will.
    NodeId successor = kUnassignedId;
  };

  void SetRetain(bool retain) { retain_.store(retain, std::memory_order_release); }
  bool retain() const { return retain_.load(std::memory_order_acquire); }

  // Where a part built for `server` goes now (its replacement, if it was replaced) and
  // whether it must wait (that server is parked): `record(server, held)` is called with
  // both under the lock, so that a Retarget cannot come between the decision and what
  // the caller records of it.
  void Route(NodeId server, const std::function<void(NodeId server, bool held)>& record) const;

  void Park(NodeId server, uint32_t rank, NodeId successor);
  bool IsParked(NodeId server) const;
  std::map<NodeId, ParkedServer> Parked() const;
  // `fresh` replaces `dead` (and whatever `dead` had replaced); `collect()` runs under
  // the lock after the maps say so: it gathers the waiting parts to send again.
  void Retarget(NodeId dead, NodeId fresh, const std::function<void()>& collect);

 private:
  std::atomic<bool> retain_{false};
  mutable Mutex mu_;
  std::map<NodeId, ParkedServer> parked_ GUARDED_BY(mu_);  // dead servers
  std::map<NodeId, NodeId> replaced_ GUARDED_BY(mu_);      // dead server -> replacement
};

}  // namespace ps

#endif  // PS_WORKER_SERVER_FAILOVER_H_
