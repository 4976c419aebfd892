// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Scheduler: the one node that owns membership, ranks, the cluster map (which key ranges
// of which table live on which server), barriers and failure detection.
//
// Lifecycle: construct, Start() (binds and starts its thread), then either Join() until
// the cluster finishes (every worker left) or Stop(). The destructor stops it.
// Thread-safety: every method may be called from any thread.
#ifndef PS_SCHEDULER_H_
#define PS_SCHEDULER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ps/export.h"
#include "ps/options.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

struct LAYERPS_EXPORT SchedulerStats {
  uint64_t messages_received = 0;
  uint64_t bad_messages = 0;  // malformed, wrong version, or from unknown peers
  uint64_t rejected_registrations = 0;
  // Rejoins refused: this scheduler was not started for recovery, or the node is of
  // another job (docs/recovery.md).
  uint64_t rejected_rejoins = 0;
  uint64_t dead_nodes = 0;
  uint64_t map_epoch = 0;
  // Running clusters this scheduler took over from one that died (docs/recovery.md),
  // counted once the takeover's map is sent and the nodes that did not rejoin are
  // declared dead (map_epoch and dead_nodes say so when this counts it).
  uint64_t recoveries = 0;
  // Stall warnings logged: a barrier or join waiting past stall_warning_ms.
  uint64_t stall_warnings = 0;
};

class LAYERPS_EXPORT Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Binds options.scheduler_address and starts serving. Fails on bad options or when
  // the address cannot be bound.
  Status Start();
  // Pins the tables of the listed layers to the listed server ranks (a placement plan's
  // decision, see ps/placement.h TablePlacementOf). Call before Start; kInvalidArgument
  // for a rank outside [0, num_servers), a duplicate or an empty list.
  Status InstallPlacement(const std::vector<LayerServers>& placement);
  // The address nodes should connect to (the bound port replaces port 0).
  std::string address() const;
  // Blocks until every worker has left (OK), the cluster failed (the error), or the
  // timeout passes (kTimeout). Servers are told to shut down before it returns OK.
  Status Join(std::chrono::milliseconds timeout);
  // Tells every node to shut down and stops. Idempotent.
  void Stop();

  // The current membership (empty before every node registered).
  std::vector<NodeInfo> Nodes() const;
  // While the cluster is not complete, which nodes have not registered ("the cluster is
  // not complete: missing worker rank 1 (2 of 2 servers and 1 of 2 workers registered)");
  // empty once it is (and before Start).
  std::string MissingNodes() const;
  SchedulerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_H_
