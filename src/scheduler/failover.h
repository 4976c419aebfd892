// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Failover: the scheduler's side of a server death the job survives.
//  - Replication (docs/replication.md): the dead server's backup, the next live server in
//    rank order, takes its ranges over. It gets the map that gives it those ranges alone
//    first; once it acknowledged it, every node learns of the death (NodeDead names the
//    successor) and of the map.
//  - Replacement (replace_servers_ms; docs/checkpoints.md): the dead server's rank becomes
//    vacant until a new server registers for it (or the job fails when the time passes);
//    the new server gets the map alone first, the others once it acknowledged it.
// A takeover whose server cannot set up a table fails the job (its ranges would be lost).
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_FAILOVER_H_
#define PS_SCHEDULER_FAILOVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster_map.h"
#include "ps/options.h"
#include "ps/status.h"
#include "scheduler/cluster_state.h"

namespace layerps {
namespace pb {
class MapAck;
}  // namespace pb
}  // namespace layerps

namespace ps {

class TableDirectory;

class Failover {
 public:
  // What failover needs of the scheduler beyond ClusterState.
  class Host : public ClusterState {
   public:
    // A new map epoch sent to `node` alone; returns the epoch.
    virtual uint64_t SendNewMapTo(NodeId node) = 0;
    // Dead node `id`: counted as dead (unless it left), its connection closed.
    virtual void Forget(NodeId id) = 0;
    // Dead server `id` leaves the barriers and the checkpoint sets.
    virtual void Release(NodeId id) = 0;
    // Ends the job as failed.
    virtual void FailJob(const Status& why) = 0;
    // Ends the job if nothing is left to wait for.
    virtual void MaybeFinish() = 0;
    // A registrant takes dead node `dead`'s entry in the map and gets its reply.
    virtual void TakePlace(const NodeInfo& info, NodeId dead, const std::string& identity) = 0;
  };
  // A server rank whose server died, awaiting a replacement.
  struct Vacancy {
    NodeId dead;
    uint32_t rank;
    int64_t deadline_ms;
    std::string reason;
  };

  Failover(Host* host, TableDirectory* tables, const SchedulerOptions& options)
      : host_(host), tables_(tables), options_(options) {}

  // A dead server `n` the job may survive (the cluster is complete and not done): its
  // backup takes over, or its rank waits for a replacement. False when neither applies
  // (no replication nor replacement, or no other server alive): the caller fails the job.
  bool OnServerDead(NodeInfo* n, const std::string& reason, int64_t now_ms);
  // Dead node `id` was the backup taking over (both copies of the ranges are gone): fails
  // the job and returns true; else false.
  bool OnTakeoverDead(NodeInfo* n, const std::string& reason);
  // A MapAck: true when it was the takeover's or the replacement's (handled here).
  bool OnMapAck(NodeId from, const layerps::pb::MapAck& ack);

  // Registration of a replacement server (the cluster is complete).
  bool vacant() const { return !vacancies_.empty(); }
  bool joining() const { return joining_ != 0; }
  // The vacancy a server asking for `rank` (-1: any) takes, or null; *refusal says why not.
  const Vacancy* FindVacancy(int rank, std::string* refusal) const;
  void AcceptReplacement(const NodeInfo& info, const Vacancy& vacancy, bool restores,
                         const std::string& identity);

  // The failure of the first vacancy past its deadline at `now_ms`, or OK.
  Status CheckDeadlines(int64_t now_ms) const;

 private:
  bool PromoteBackup(NodeInfo* n, const std::string& reason);
  void AwaitReplacement(NodeInfo* n, const std::string& reason, int64_t now_ms);
  // The MapAck of a server taking over ranges (`who` says which, for the error): a table
  // it could not set up fails the job (false); else it counts as any node's ack (true).
  bool TakeoverAcked(NodeId from, const layerps::pb::MapAck& ack, const std::string& who);
  void OnPromoted(NodeId from, const layerps::pb::MapAck& ack);
  void OnReplacementReady(NodeId from, const layerps::pb::MapAck& ack);
  // Sends NodeDead for `dead` to every live node.
  void AnnounceDeath(NodeId dead, const std::string& reason, NodeId successor);

  Host* const host_;
  TableDirectory* const tables_;
  const SchedulerOptions& options_;
  std::vector<Vacancy> vacancies_;  // server ranks awaiting a replacement
  NodeId joining_ = 0;              // a replacement that has the map alone, until its MapAck
  uint64_t joining_epoch_ = 0;
  NodeId promoting_ = 0;  // the backup taking over, until its MapAck
  uint64_t promoting_epoch_ = 0;
  NodeId promoted_dead_ = 0;
  uint32_t promoted_dead_rank_ = 0;
  std::string promoted_reason_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_FAILOVER_H_
