// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Scheduler::Impl, the scheduler's state and handlers, declared once for the files that
// define them by subject: scheduler.cc (start, the loop and dispatch, shutdown, periodic
// work, the public accessors) and membership.cc (registration, rejoin, leave, dead
// nodes, a dead worker's restart). What the other parts do lives behind their own
// interfaces (table_directory, barriers, checkpoints, failover, recovery). Internal to
// src/scheduler/.
#ifndef PS_SCHEDULER_SCHEDULER_IMPL_H_
#define PS_SCHEDULER_SCHEDULER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/cluster_map.h"
#include "common/mutex.h"
#include "layerps.pb.h"
#include "metrics/metrics.h"
#include "ps/scheduler.h"
#include "scheduler/barriers.h"
#include "scheduler/checkpoints.h"
#include "scheduler/cluster_state.h"
#include "scheduler/failover.h"
#include "scheduler/recovery.h"
#include "scheduler/table_directory.h"
#include "transport/transport.h"

namespace ps {

class Scheduler::Impl final : public Failover::Host {
 public:
  explicit Impl(SchedulerOptions options) : options_(Elastic(std::move(options))) {}
  ~Impl() { Stop(); }

  Status Start();

  Status InstallPlacement(const std::vector<LayerServers>& placement);

  std::string address() const {
    MutexLock lock(&mu_);
    return address_;
  }

  Status Join(std::chrono::milliseconds timeout);

  void Stop();

  std::vector<NodeInfo> Nodes() const {
    MutexLock lock(&mu_);
    return nodes_snapshot_;
  }

  // One scrape of the metrics endpoint (its HTTP thread): snapshots under mu_ only.
  void CollectMetrics(std::vector<metrics::Sample>* out) const;
  std::string MissingNodes() const {
    MutexLock lock(&mu_);
    return missing_;
  }

  SchedulerStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  static constexpr int kPollMs = 50;
  // The scheduler's loop must never stall on one peer (heartbeats of everyone else would
  // go unanswered), so its sends give up quickly; a peer that cannot take a control
  // message within this time is on its way to being declared dead anyway.
  static constexpr int kSendTimeoutMs = 200;
  // Refused registrants get their answer through a short-lived connection, closed later.
  static constexpr size_t kMaxRefusedConnections = 64;
  static constexpr NodeId kRefusedIdBase = 0x80000000u;
  struct Member {
    int64_t last_seen_ms = 0;
    bool left = false;
  };

  // At most this many queued messages are read before a heartbeat tick (Loop).
  static constexpr int kMaxDrainedBeforeTick = 4096;

  void Loop();

  // An elastic job (max_workers above num_workers) tolerates worker loss: its workers
  // come and go.
  static SchedulerOptions Elastic(SchedulerOptions o) {
    if (o.elastic()) o.tolerate_worker_loss = true;
    return o;
  }

  void Count(const std::function<void(SchedulerStats&)>& f) {
    MutexLock lock(&mu_);
    f(stats_);
  }

  void BadMessage(const std::string& why) {
    Count([](SchedulerStats& st) { ++st.bad_messages; });
    LOG_EVERY_N(WARNING, 100) << "scheduler dropped a message: " << why;
  }

  void SendControl(NodeId to, const layerps::pb::Control& c) {
    Status s = transport_->Send(to, MakeControl(kSchedulerId, c), kSendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 20) << "scheduler: send to " << to << " failed: " << s;
    }
  }

  void Handle(Message&& msg);

  NodeInfo* FindNode(NodeId id) { return map_.FindNodeMutable(id); }

  // ClusterState, for the table directory and the barriers.
  ClusterMap& map() override { return map_; }
  bool complete() const override { return complete_; }
  void Send(NodeId to, const layerps::pb::Control& c) override { SendControl(to, c); }

  // Failover::Host, for server deaths the job survives.
  void Forget(NodeId id) override {
    if (!members_[id].left) Count([](SchedulerStats& st) { ++st.dead_nodes; });
    transport_->Disconnect(id);
  }
  void Release(NodeId id) override {
    barriers_.Drop(id);
    checkpoints_.OnServerDead(id, NowMs());
  }

  void HandleRegister(const layerps::pb::Register& r, const std::string& identity);

  // --- Scheduler recovery (docs/recovery.md) -------------------------------------------
  // A scheduler started on the address of one that died hears from the live nodes of the
  // old cluster: each sends a Rejoin (its id, rank, data tag, session, newest map and the
  // barriers it passed) every heartbeat interval. The newest map among them is the
  // cluster's; once every live server and worker of it rejoined, or twice
  // heartbeat_timeout_ms after the first Rejoin, the cluster is rebuilt from it: the nodes keep
  // their ids, ranks and tags (their data connections and data are untouched), the nodes that did
  // not rejoin are declared dead (as any dead node: a backup takes over, a replacement is
  // awaited, or the job fails), and everyone gets the map of a new epoch. The nodes then
  // send again the calls the old scheduler never answered.
  void HandleRejoin(const layerps::pb::Rejoin& r, const std::string& identity);

  // Nodes notice the silence at different times (each heartbeat_timeout_ms after its own
  // last word from the old scheduler): twice that is left for the last of them.
  int64_t RejoinWindowMs() const { return 2 * int64_t{options_.heartbeat_timeout_ms}; }

  void MaybeFinishRecovery(int64_t now);

  // Calls that need a complete cluster: while it is not, answers `request_id` with
  // kFailedPrecondition naming the missing nodes and returns true; once it is, returns
  // false (the caller handles the call) except for a membership query, answered OK.
  bool ReplyCall(NodeId to, uint64_t request_id, bool membership_query = false);

  bool RankTaken(Role role, int rank) const;

  void BroadcastMap() override;

  void HandleLeave(NodeId from);

  // "the cluster is not complete: missing server rank 1 and worker ranks 2, 3 (1 of 2
  // servers and 2 of 4 workers registered)".
  std::string Incomplete() const;

  void MarkDead(NodeId id, const std::string& reason);

  // A new map epoch, sent to `node` alone: a server taking over ranges (a backup or a
  // replacement) gets it first, the others once it acknowledged. Returns the epoch.
  uint64_t SendNewMapTo(NodeId node) override;

  // A registrant takes dead node `dead`'s entry in the map (its rank; a new id and data
  // tag) and gets its RegisterReply.
  void TakePlace(const NodeInfo& info, NodeId dead, const std::string& identity) override;

  // A dead worker of rank `rank` (-1: the lowest), when the job tolerates worker loss.
  const NodeInfo* DeadWorker(int rank) const;

  // A worker restarted after a crash (tolerate_worker_loss): it takes the dead worker's
  // rank, and every node learns of it with the next map (asynchronous tables only: its
  // bsp/ssp clocks would start again at zero).
  void AcceptRestartedWorker(NodeInfo info, NodeId dead, const std::string& identity);

  // Ends the job as failed: every node's pending and later calls fail with `why`.
  void FailJob(const Status& why) override {
    if (first_failure_.ok()) first_failure_ = why;
    BroadcastShutdown(first_failure_.message(), true, first_failure_.code());
    Finish(first_failure_);
  }

  // Workers alive now (the scheduler's view: not dead, not left).
  int LiveWorkers() const;

  // A worker joining a complete cluster: a dead worker's rank (`dead`, when one is), else
  // a new rank (elastic jobs). Sets `rank` and `dead`, or returns why it is refused.
  std::string PlaceLateWorker(int requested_rank, int* rank, const NodeInfo** dead) const;

  // After a worker died or left: fewer than min_workers live ends the job (the error
  // names min_workers, the count and `who`). Returns true when it ended the job.
  bool BelowMinWorkers(const std::string& who);

  // The cluster is done when no worker is alive any more.
  void MaybeFinish() override;

  // `code`: what the members fail their calls with (kAborted when not given).
  void BroadcastShutdown(const std::string& reason, bool failed,
                         StatusCode code = StatusCode::kAborted);

  void Finish(const Status& result);

  void Periodic(int64_t now);

  const SchedulerOptions options_;
  // The time heartbeats are judged by and the periodic work reads (common/clock.h).
  const std::shared_ptr<Clock> clock_ = ClockOf(options_);
  int64_t NowMs() const { return clock_->NowMs(); }
  std::unique_ptr<Transport> transport_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};

  // Loop-thread state.
  ClusterMap map_;
  bool complete_ = false;
  bool done_ = false;
  NodeId next_id_ = 1;
  TableId next_table_id_ = 0;
  uint64_t refused_counter_ = 0;
  std::deque<std::pair<NodeId, int64_t>> refused_;
  std::map<NodeId, Member> members_;
  std::map<std::string, NodeId> identities_;  // registration routing id -> node
  TableDirectory tables_{this, options_.dense_chunk_elems};
  Barriers barriers_{this, options_.tolerate_worker_loss};
  Checkpoints checkpoints_{this, options_.checkpoint_dir, options_.checkpoint_every_s};
  Status first_failure_;
  int dead_workers_ = 0;  // workers declared dead (crashed or silent; not those that left)
  Failover failover_{this, &tables_, options_};
  Recovery recovery_;  // nodes of a running cluster rejoin (HandleRejoin)

  // Shared with callers of the public accessors.
  mutable Mutex mu_;
  // Serves CollectMetrics while the scheduler runs (reset first in Stop).
  std::unique_ptr<metrics::Exporter> metrics_;
  CondVar cv_;
  std::string address_ GUARDED_BY(mu_);
  std::vector<NodeInfo> nodes_snapshot_ GUARDED_BY(mu_);
  std::string missing_ GUARDED_BY(mu_);  // Incomplete(), "" once complete
  SchedulerStats stats_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  Status result_ GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_IMPL_H_
