// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Replication, a server's part (docs/replication.md). The live servers in rank order form
// a ring: each is the primary of its own ranges and the backup of the live server before
// it. As a primary, a server forwards every update it applied to its backup and holds the
// answer until the backup applied it too (Forward). As a backup, it applies a primary's
// forwarded updates to its copy (HandleReplicate) and remembers them, so that a part sent
// again after a takeover is not applied twice (Remembered). On a new map (OnMap) it takes
// a dead primary's ranges over from its copy, and copies its own store to a new backup
// when its backup changed or its ranges grew (server/replica_copy.h), so that every death
// is covered while two servers live.
//
// Threads and locks: everything runs on the server's receive thread, except the
// accessors of counters and backup(). The store and the copy are guarded by the server's
// store lock (`store_mu`): OnMap is called with it held exclusively; the handlers take it
// themselves (a copy's beginning exclusively, the rest shared).
#ifndef PS_SERVER_REPLICATION_H_
#define PS_SERVER_REPLICATION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "common/cluster_map.h"
#include "common/mutex.h"
#include "common/progress.h"
#include "server/replica_copy.h"
#include "server/store.h"
#include "transport/message.h"

namespace ps {

class CheckpointSet;
class NodeRuntime;
class SyncPolicy;

// One part of one worker's request: (worker, request id, part).
using UpdateId = std::tuple<NodeId, uint64_t, uint32_t>;
struct UpdateIdHash {
  size_t operator()(const UpdateId& u) const {
    return std::hash<uint64_t>()(std::get<1>(u) * 0x9E3779B97F4A7C15ull ^
                                 (uint64_t{std::get<0>(u)} << 32) ^ std::get<2>(u));
  }
};

class Replication {
 public:
  using ReplyFn = std::function<void(const Header&, const Status&, std::vector<Frame>)>;
  // runtime: the server's; store_mu: its store lock; apply: its apply-on-arrival policy
  // (forwarded updates go through it); restore: --restore's set or null; reply: how the
  // server answers a worker.
  Replication(NodeRuntime* runtime, SharedMutex* store_mu, SyncPolicy* apply,
              const CheckpointSet* restore, int64_t max_message_bytes, ReplyFn reply)
      : runtime_(runtime), store_mu_(*store_mu), apply_(apply), restore_(restore),
        max_message_bytes_(max_message_bytes), reply_(std::move(reply)) {}

  // A new map, installed in `store` (store lock exclusive). Tables that cannot be kept or
  // taken over are added to *failed (the map's ack reports them).
  void OnMap(const ClusterMap& map, Store* store, std::vector<std::pair<TableId, Status>>* failed);

  // The messages of replication (runtime handlers).
  void HandleReplicate(Message&& msg);
  void HandleReplicateAck(Message&& msg);
  void HandleReplicaCopy(Message&& msg);

  // Where updates are forwarded now; kUnassignedId: unreplicated. Any thread.
  NodeId backup() const { return backup_.load(std::memory_order_acquire); }
  // Holds the answer to an update applied here until `backup` applied it too.
  void Forward(NodeId backup, Message forward, const Header& reply_to, std::vector<Frame> frames);
  // True when this server applied the update part as a backup (or got it in a copy).
  bool Remembered(const Header& h) {
    return remembered_size_.load(std::memory_order_relaxed) > 0 &&
           Remembered(UpdateId{h.sender, h.request_id, h.part});
  }

  bool backed_up() const { return backed_up_.load(); }
  uint64_t copies_sent() const { return copies_acked_.load(); }
  // The copy of this server's store to its backup: bytes handed to the transport while
  // it runs (INFO lines and metrics).
  const TransferProgress& copy_progress() const { return copy_progress_; }
  uint64_t copy_bytes_sent() const { return copy_bytes_.load(); }
  uint64_t copies_received() const { return copies_received_.load(); }
  uint64_t bad_messages() const { return bad_.load(); }

 private:
  RangeSet TakeOverDeadPrimary(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed)
      REQUIRES(store_mu_);
  void DropReplica();
  void InstallNewTablesInReplica(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed);
  void CopyToBackup(const ClusterMap& map, NodeId backup) REQUIRES(store_mu_);
  void AckCopy(NodeId to, const Header& h, const Status& st);
  void OnCopyAcked(const Header& h);
  void ReleaseHeld(const UpdateId& id);
  void FlushHeld();
  void Remember(const UpdateId& id);
  bool Remembered(const UpdateId& id);

  NodeRuntime* const runtime_;
  SharedMutex& store_mu_;
  SyncPolicy* const apply_;
  const CheckpointSet* const restore_;
  const int64_t max_message_bytes_;
  const ReplyFn reply_;
  Store* store_ GUARDED_BY(store_mu_) = nullptr;  // the server's store (set by OnMap)
  uint64_t epoch_ GUARDED_BY(store_mu_) = 0;  // the map epoch installed

  // As a backup: the copy of primary_'s ranges, made by its copy number replica_copy_id_
  // (complete once its end came), following the primary's map of epoch replica_epoch_,
  // where it held replica_ranges_; replica_error_: a copy message that failed (the copy
  // is unusable). Receive thread only (confinement, which the analysis cannot express):
  // it reads and writes them with store_mu_ held, exclusively where replica_ changes.
  std::unique_ptr<Store> replica_;
  NodeId primary_ = kUnassignedId;
  bool replica_complete_ = false;
  uint64_t replica_copy_id_ = 0;
  uint64_t replica_epoch_ = 0;
  RangeSet replica_ranges_;
  Status replica_error_;
  // As a primary: where updates are forwarded (none: unreplicated), the number of the
  // last copy sent there (receive thread), the ranges this server held at the last map
  // (receive thread), and whether the backup acknowledged the copy.
  std::atomic<NodeId> backup_{kUnassignedId};
  uint64_t copy_id_ = 0;
  RangeSet ranges_;
  std::atomic<bool> backed_up_{false};
  TransferProgress copy_progress_;
  std::atomic<uint64_t> copy_bytes_{0};
  std::atomic<uint64_t> copies_acked_{0}, copies_received_{0}, bad_{0};
  struct Held {
    Header reply_to;
    std::vector<Frame> frames;
  };
  Mutex held_mu_;
  std::map<UpdateId, Held> held_ GUARDED_BY(held_mu_);  // answers waiting for the backup
  // Answers held when the last copy began, released by its ack.
  std::vector<UpdateRecord> awaiting_copy_ GUARDED_BY(held_mu_);
  Mutex remembered_mu_;
  std::unordered_set<UpdateId, UpdateIdHash> remembered_ GUARDED_BY(remembered_mu_);
  std::deque<UpdateId> remembered_order_ GUARDED_BY(remembered_mu_);
  std::atomic<size_t> remembered_size_{0};
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_H_
