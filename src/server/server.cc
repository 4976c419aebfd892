// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A server handles each data request on its receive thread, in arrival order: the checks
// every request passes (server/request.h), then the synchronization policy
// (server/sync_policy.h) of its table (async, bsp or ssp), which applies it to the store
// (server/store.h) and answers, at once or when the workers' clocks allow.
// Large updates fan out over TBB inside the store.
#include "ps/server.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <unordered_set>

#include "common/wire_type.h"
#include "metrics/metrics.h"
#include "node/node_runtime.h"
#include "server/checkpoint.h"
#include "server/replica_copy.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"
#include "server/sync_state.h"

namespace ps {

namespace {
constexpr int kReplySendTimeoutMs = 1000;
// A copy to a new backup is queued message after message; one that cannot be queued
// within this time leaves the server without a backup (logged).
constexpr int kCopySendTimeoutMs = 10000;
// Replication: how many updates a server remembers having applied (as a backup) so
// that the same part sent again after a takeover is not applied twice.
constexpr size_t kRememberedUpdates = size_t{1} << 18;

bool IsUpdate(MsgType t) {
  return t == MsgType::kPush || t == MsgType::kPushPull || t == MsgType::kAssign;
}

// One part of one worker's request: (worker, request id, part).
using UpdateId = std::tuple<NodeId, uint64_t, uint32_t>;
struct UpdateIdHash {
  size_t operator()(const UpdateId& u) const {
    return std::hash<uint64_t>()(std::get<1>(u) * 0x9E3779B97F4A7C15ull ^
                                 (uint64_t{std::get<0>(u)} << 32) ^ std::get<2>(u));
  }
};
}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options) : options_(std::move(options)) {}

  Status Start() {
    if (started_) return FailedPrecondition("server already started (a Server starts once)");
    if (!options_.restore_dir.empty()) {
      // Found and checked before joining: a wrong directory fails Start, not a declare.
      StatusOr<std::unique_ptr<CheckpointSet>> set = CheckpointSet::Open(options_.restore_dir);
      if (!set.ok()) return set.status();
      restore_ = std::move(*set);
      LOG(INFO) << "restoring from checkpoint " << restore_->path() << " (set " << restore_->set()
                << ", written by " << restore_->num_servers() << " server(s))";
    }
    bsp_->SetStallWarning(options_.stall_warning_ms);
    ssp_->SetStallWarning(options_.stall_warning_ms);
    NodeRuntime::Handlers h;
    h.on_map = [this](const std::shared_ptr<const ClusterMap>& map) { return InstallMap(*map); };
    h.on_node_dead = [this](NodeId id, const Status& why) { OnNodeDead(id, why); };
    // A joined worker's clock no longer counts (it may still pull): as if it were gone.
    h.on_worker_joined = [this](NodeId id) {
      OnNodeDead(id, FailedPrecondition("the worker joined (ran out of data)"));
    };
    h.on_tick = [this] { Tick(); };
    h.on_checkpoint = [this](uint64_t set, const std::string& dir) {
      return WriteCheckpointFile(set, dir);
    };
    runtime_ = std::make_unique<NodeRuntime>(options_, Role::kServer, std::move(h));
    for (MsgType t : {MsgType::kPush, MsgType::kPull, MsgType::kPushPull, MsgType::kAssign}) {
      runtime_->Handle(t, [this](Message&& m) { HandleData(std::move(m)); });
    }
    runtime_->Handle(MsgType::kReplicate, [this](Message&& m) { HandleReplicate(std::move(m)); });
    runtime_->Handle(MsgType::kReplicateAck,
                     [this](Message&& m) { HandleReplicateAck(std::move(m)); });
    runtime_->Handle(MsgType::kReplicaCopy, [this](Message&& m) { HandleReplicaCopy(std::move(m)); });
    Status s = runtime_->Start();
    if (!s.ok()) {
      runtime_.reset();
      return s;
    }
    started_ = true;  // from here on runtime_ is never replaced
    StatusOr<std::unique_ptr<metrics::Exporter>> exporter = metrics::MaybeStart(
        options_.metrics_host, options_.metrics_port, "server",
        [this](std::vector<metrics::Sample>* out) { CollectMetrics(out); });
    if (!exporter.ok()) {
      runtime_->Stop(/*send_leave=*/true);
      return exporter.status();
    }
    metrics_ = std::move(*exporter);
    return s;
  }

  Status Join(std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("server not started");
    return runtime_->WaitShutdown(timeout);
  }

  void Stop() {
    metrics_.reset();
    if (started_) runtime_->Stop(/*send_leave=*/true);
  }

  NodeId id() const { return started_ ? runtime_->id() : kUnassignedId; }
  uint32_t rank() const { return started_ ? runtime_->rank() : 0; }
  std::string endpoint() const { return started_ ? runtime_->endpoint() : ""; }

  TrafficStats traffic() const { return started_ ? runtime_->traffic() : TrafficStats{}; }

  ServerStats stats() const {
    ServerStats s;
    s.messages_received = messages_.load();
    s.bad_messages = bad_.load() + (started_ ? runtime_->bad_messages() : 0);
    s.push_requests = pushes_.load();
    s.pull_requests = pulls_.load();
    s.bytes_received = bytes_in_.load();
    s.bytes_sent = bytes_out_.load();
    s.stall_warnings = bsp_->stall_warnings() + ssp_->stall_warnings();
    s.backed_up = backed_up_.load();
    s.copies_sent = copies_acked_.load();
    s.copies_received = copies_received_.load();
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    s.sparse_rows = store_ ? store_->sparse_rows() : 0;
    return s;
  }

  std::map<TableId, SparseTableStats> table_stats() const {
    std::map<TableId, SparseTableStats> out;
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    if (!store_) return out;
    for (const auto& kv : store_->SparseStats()) {
      SparseTableStats& t = out[kv.first];
      const TableSpec* spec = store_->Spec(kv.first);
      t.name = spec ? spec->name : std::string();
      t.rows_live = kv.second.rows_live;
      t.evicted = kv.second.evicted;
      t.expired = kv.second.expired;
      t.admitted = kv.second.admitted;
      t.refused = kv.second.refused;
      t.spilled = kv.second.spilled;
      t.reloaded = kv.second.reloaded;
      t.capacity = kv.second.capacity;
    }
    return out;
  }

 private:
  // One scrape of the metrics endpoint (its HTTP thread).
  void CollectMetrics(std::vector<metrics::Sample>* out) const {
    using metrics::Counter;
    using metrics::Gauge;
    const ServerStats s = stats();
    out->push_back(Counter("layerps_server_messages_received_total",
                           "Data messages received", s.messages_received));
    out->push_back(Counter("layerps_server_bad_messages_total",
                           "Messages dropped: malformed, unknown table, range not held...",
                           s.bad_messages));
    out->push_back(Counter("layerps_server_requests_total", "Requests by kind", s.push_requests,
                           {{"kind", "push"}}));
    out->push_back(Counter("layerps_server_requests_total", "Requests by kind", s.pull_requests,
                           {{"kind", "pull"}}));
    out->push_back(Counter("layerps_server_payload_bytes_total",
                           "Payload bytes of accepted requests and of replies", s.bytes_received,
                           {{"direction", "received"}}));
    out->push_back(Counter("layerps_server_payload_bytes_total",
                           "Payload bytes of accepted requests and of replies", s.bytes_sent,
                           {{"direction", "sent"}}));
    out->push_back(Gauge("layerps_server_sparse_rows", "Rows held in sparse tables", s.sparse_rows));
    out->push_back(Counter("layerps_server_stall_warnings_total",
                           "bsp/ssp pulls held longer than stall_warning_ms", s.stall_warnings));
    out->push_back(Gauge("layerps_server_backed_up",
                         "1 when this server's ranges have a complete copy on a backup",
                         s.backed_up ? 1 : 0));
    out->push_back(Counter("layerps_server_replica_copies_total",
                           "Complete copies of a store to a new backup (replication)", s.copies_sent,
                           {{"direction", "sent"}}));
    out->push_back(Counter("layerps_server_replica_copies_total",
                           "Complete copies of a store to a new backup (replication)",
                           s.copies_received, {{"direction", "received"}}));
    handle_latency_.Export("layerps_server_request_seconds",
                           "Time to handle a request on arrival (apply, or hold for its step)",
                           {}, out);
    for (const auto& kv : table_stats()) {
      const std::vector<std::pair<std::string, std::string>> l = {{"table", kv.second.name}};
      const SparseTableStats& t = kv.second;
      out->push_back(Gauge("layerps_server_table_rows", "Rows live in a sparse table", t.rows_live, l));
      out->push_back(Counter("layerps_server_table_rows_evicted_total", "Rows evicted (capacity)", t.evicted, l));
      out->push_back(Counter("layerps_server_table_rows_expired_total", "Rows expired", t.expired, l));
      out->push_back(Counter("layerps_server_table_rows_admitted_total", "Rows created", t.admitted, l));
      out->push_back(Counter("layerps_server_table_rows_refused_total",
                             "Pushed rows dropped: id not admitted", t.refused, l));
    }
    if (started_) {
      metrics::AppendTraffic(runtime_->traffic(), out, [this](TableId id) {
        auto m = runtime_->map();
        const TableInfo* t = m ? m->FindTable(id) : nullptr;
        return t ? t->spec.name : std::string();
      });
      out->push_back(Gauge("layerps_map_epoch", "Cluster-map epoch this node has",
                           static_cast<double>(runtime_->map() ? runtime_->map()->epoch : 0)));
    }
  }

  std::vector<std::pair<TableId, Status>> InstallMap(const ClusterMap& map) {
    std::unique_lock<std::shared_mutex> lock(store_mu_);
    if (!store_) store_ = std::make_unique<Store>(runtime_->id(), options_.cold_dir);
    std::vector<std::pair<TableId, Status>> failed;
    store_->DropAllBut(map.tables);
    for (const auto& kv : map.tables) {
      const bool fresh = !store_->Has(kv.first);
      Status s = store_->Install(kv.second);
      if (s.ok()) s = store_->UpdateLearningRate(kv.second);
      if (s.ok() && fresh && restore_) {
        bool restored = false;
        s = restore_->Restore(kv.first, kv.second.spec, store_.get(), &restored);
        if (s.ok() && restored) {
          LOG(INFO) << "table " << kv.second.spec.name << " restored from " << restore_->path();
        }
        if (!s.ok()) store_->Drop(kv.first);  // not left half restored
      }
      if (!s.ok()) {
        LOG(ERROR) << "cannot install table " << kv.second.spec.name << ": " << s;
        failed.emplace_back(kv.first, s);
      }
    }
    ConfigureReplication(map, &failed);
    epoch_ = map.epoch;
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) p->OnMap(map, runtime_->id());
    std::set<NodeId> live;
    for (const NodeInfo& n : map.nodes) {
      if (n.role == Role::kWorker && n.alive && !gone_.count(n.id)) live.insert(n.id);
    }
    SetWorkers(live, Status::OK());
    return failed;
  }

  // --- Replication (docs/replication.md) ----------------------------------------------
  static bool HoldsRanges(const ClusterMap& map, NodeId server) {
    for (const auto& kv : map.tables) {
      for (const KeyRange& r : kv.second.ranges) {
        if (r.server == server) return true;
      }
    }
    return false;
  }

  // Who this server backs up and forwards to, from a new map (InstallMap: store_mu_
  // exclusive, receive thread). The live servers in rank order form a ring: each keeps a
  // copy of the ranges of the live server before it. A death changes the ring: the dead
  // server's backup takes its ranges over (the copy becomes its own), and every server
  // whose backup changed, or whose ranges grew, copies its store to its backup
  // (server/replica_copy.h) while requests go on, so that a later death loses nothing.
  void ConfigureReplication(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed) {
    const NodeId self = runtime_->id();
    const RangeSet adopted = TakeOverDeadPrimary(map, failed);
    RangeSet mine = RangesOf(map, self);
    // Ranges the map moved to this server come from a copy taken over, or they are lost.
    for (const auto& kv : mine) {
      auto before = ranges_.find(kv.first);
      if (before == ranges_.end() || !store_->Has(kv.first)) continue;
      auto got = adopted.find(kv.first);
      for (const auto& r : kv.second) {
        const bool had = std::find(before->second.begin(), before->second.end(), r) != before->second.end();
        const bool took = got != adopted.end() &&
                          std::find(got->second.begin(), got->second.end(), r) != got->second.end();
        if (had || took) continue;
        failed->emplace_back(kv.first, Unavailable("the map gives this server ranges it holds no copy of"));
        break;
      }
    }
    std::vector<const NodeInfo*> live;
    for (const NodeInfo& n : map.nodes) {
      if (n.role == Role::kServer && n.alive) live.push_back(&n);
    }
    std::sort(live.begin(), live.end(),
              [](const NodeInfo* a, const NodeInfo* b) { return a->rank < b->rank; });
    NodeId backup = kUnassignedId, primary = kUnassignedId;
    const size_t n = live.size();
    for (size_t i = 0; map.replication && n >= 2 && i < n; ++i) {
      if (live[i]->id != self) continue;
      backup = live[(i + 1) % n]->id;
      primary = live[(i + n - 1) % n]->id;
    }
    // As a backup: a copy of a server that is no longer the one before this one is
    // dropped, unless it follows a newer map than this one (its primary saw the new ring
    // first). A copy whose primary's ranges changed waits for the primary's new copy.
    if (replica_ && primary_ != primary && replica_epoch_ <= map.epoch) {
      LOG(INFO) << "no longer the backup of server node " << primary_;
      DropReplica();
    }
    if (replica_) {
      const RangeSet now = RangesOf(map, primary_);
      if (replica_epoch_ < map.epoch && RangesChanged(replica_ranges_, now)) {
        if (replica_complete_) {
          LOG(INFO) << "the ranges of server node " << primary_
                    << " changed: its copy here waits for its new copy";
        }
        replica_complete_ = false;
      }
      if (replica_epoch_ <= map.epoch) replica_->DropAllBut(map.tables);
      InstallNewTablesInReplica(map, failed);
    }
    // As a primary.
    if (backup == kUnassignedId) {
      if (backup_.load(std::memory_order_relaxed) != kUnassignedId) {
        LOG(WARNING) << "this server has no backup now: no other live server";
      }
      backup_.store(kUnassignedId, std::memory_order_release);
      backed_up_ = false;
      FlushHeld();
    } else if (backup != backup_.load(std::memory_order_relaxed) || RangesChanged(ranges_, mine)) {
      CopyToBackup(map, backup);
    }
    ranges_ = std::move(mine);
  }

  // A dead primary's ranges are now this server's (the map gives them to nobody else):
  // its copy becomes this server's own, if the copy is complete. An incomplete one (the
  // primary died while copying to this server) fails the tables: the job cannot go on
  // without losing updates.
  // Returns the ranges taken over.
  RangeSet TakeOverDeadPrimary(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed) {
    if (!replica_ || primary_ == kUnassignedId || HoldsRanges(map, primary_)) return {};
    const NodeInfo* p = map.FindNode(primary_);
    if (p != nullptr && p->alive) return {};
    const RangeSet mine = RangesOf(map, runtime_->id());
    for (const auto& kv : replica_ranges_) {
      auto it = mine.find(kv.first);
      for (const auto& r : kv.second) {
        if (it == mine.end() || std::find(it->second.begin(), it->second.end(), r) == it->second.end()) {
          LOG(WARNING) << "server node " << primary_ << " is dead and its ranges went to another "
                       << "server: its copy here is dropped";
          DropReplica();
          return {};
        }
      }
    }
    if (!replica_complete_) {
      LOG(ERROR) << "server node " << primary_ << " died before its copy here was complete";
      for (TableId id : replica_->TableIds()) {
        failed->emplace_back(id, Unavailable("server node " + std::to_string(primary_) +
                                             " died before its copy on its backup was complete"));
      }
      DropReplica();
      return {};
    }
    for (TableId id : replica_->TableIds()) {
      if (!store_->Has(id)) continue;
      Status s = store_->Adopt(*replica_, id);
      if (!s.ok()) {
        LOG(ERROR) << "cannot take over table " << id << ": " << s;
        failed->emplace_back(id, s);
      }
    }
    LOG(WARNING) << "server node " << primary_ << " is dead: this server took over its ranges";
    RangeSet taken = std::move(replica_ranges_);
    DropReplica();
    return taken;
  }

  void DropReplica() {
    replica_.reset();
    primary_ = kUnassignedId;
    replica_complete_ = false;
    replica_copy_id_ = 0;
  }

  // Tables the map has and the copy lacks (declared since the copy began) start in the
  // copy as on the primary: from their initializer, or from --restore.
  void InstallNewTablesInReplica(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed) {
    for (const auto& kv : map.tables) {
      if (replica_->Has(kv.first)) {
        (void)replica_->UpdateLearningRate(kv.second);
        continue;
      }
      TableInfo info = kv.second;
      info.spec.cold_tier = false;  // the copy lives in memory (docs/replication.md)
      Status s = replica_->Install(info);
      if (s.ok()) s = replica_->UpdateLearningRate(info);
      if (s.ok() && restore_) {
        bool restored = false;  // the copy starts where the primary's restore does
        s = restore_->Restore(kv.first, info.spec, replica_.get(), &restored);
      }
      if (!s.ok()) {
        LOG(ERROR) << "cannot keep the backup copy of table " << kv.second.spec.name << ": " << s;
        failed->emplace_back(kv.first, s.WithContext("backup copy"));
        replica_->Drop(kv.first);
        continue;
      }
      std::vector<std::pair<Key, Key>>& ranges = replica_ranges_[kv.first];
      ranges.clear();
      for (const KeyRange& r : kv.second.ranges) {
        if (r.server == primary_) ranges.emplace_back(r.begin, r.end);
      }
    }
  }

  // Copies this server's store to `backup` (receive thread, store_mu_ exclusive: no
  // request is applied meanwhile, so the copy is a cut of the update order: what was
  // applied before is in it, what comes after is forwarded after it). The answers held for
  // the old backup are released once the new one acknowledged the copy.
  void CopyToBackup(const ClusterMap& map, NodeId backup) {
    const uint64_t id = ++copy_id_;
    backed_up_ = false;
    std::vector<UpdateRecord> held;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      for (const auto& kv : held_) {
        held.push_back(UpdateRecord{std::get<0>(kv.first), std::get<2>(kv.first), std::get<1>(kv.first)});
      }
    }
    const auto start = std::chrono::steady_clock::now();
    StatusOr<uint64_t> bytes = SendStoreCopy(*store_, map, id, held, [&](Message&& m) {
      m.header.sender = runtime_->id();
      return runtime_->Send(backup, std::move(m), kCopySendTimeoutMs);
    });
    if (!bytes.ok()) {
      LOG(ERROR) << "cannot copy this server's ranges to its new backup, node " << backup << ": "
                 << bytes.status() << "; this server runs without a backup";
      backup_.store(kUnassignedId, std::memory_order_release);
      FlushHeld();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      awaiting_copy_ = std::move(held);
    }
    backup_.store(backup, std::memory_order_release);
    LOG(INFO) << "copying this server's ranges to its backup, server node " << backup << " ("
              << *bytes / 1024 << " KiB queued in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count()
              << " ms)";
  }

  // kReplicaCopy: as a backup, the phases of a primary's copy; as a primary, the
  // backup's answer to the copy's end.
  void HandleReplicaCopy(Message&& msg) {
    const NodeId from = msg.header.sender;
    const auto phase = static_cast<CopyPhase>(msg.header.part);
    if (phase == CopyPhase::kEndAck) {
      OnCopyAcked(msg.header);
      return;
    }
    if (phase == CopyPhase::kBegin) {
      std::unique_lock<std::shared_mutex> lock(store_mu_);
      StatusOr<ReplicaStart> start = BeginReplica(from, msg);
      if (!start.ok()) {
        ++bad_;
        LOG_EVERY_N(WARNING, 100) << "refused a copy from node " << from << ": " << start.status();
        AckCopy(from, msg.header, start.status());
        return;
      }
      replica_ = std::move(start->store);
      primary_ = from;
      replica_complete_ = false;
      replica_copy_id_ = msg.header.request_id;
      replica_epoch_ = start->map->epoch;
      replica_ranges_ = RangesOf(*start->map, from);
      replica_error_ = Status::OK();
      std::shared_ptr<const ClusterMap> mine = runtime_->map();
      if (mine && mine->epoch > replica_epoch_) {
        std::vector<std::pair<TableId, Status>> failed;
        InstallNewTablesInReplica(*mine, &failed);
        if (!failed.empty()) replica_error_ = failed.front().second;
      }
      return;
    }
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    if (!replica_ || from != primary_ || msg.header.request_id != replica_copy_id_) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "dropped a copy message of node " << from
                                << ": no copy of it is being made here";
      return;
    }
    if (phase == CopyPhase::kEnd) {
      StatusOr<std::vector<UpdateRecord>> held = CopyHeldUpdates(msg);
      Status st = !replica_error_.ok() ? replica_error_ : held.status();
      if (st.ok()) {
        for (const UpdateRecord& u : *held) Remember(UpdateId{u.worker, u.request_id, u.part});
        replica_complete_ = true;
        ++copies_received_;
        LOG(INFO) << "holds a complete copy of the ranges of server node " << from;
      } else {
        LOG(ERROR) << "the copy of server node " << from << " is not usable: " << st;
      }
      AckCopy(from, msg.header, st);
      return;
    }
    if (replica_error_.ok()) replica_error_ = ApplyCopyChunk(replica_.get(), msg);
    if (!replica_error_.ok()) ++bad_;
  }

  void AckCopy(NodeId to, const Header& h, const Status& st) {
    Message ack;
    ack.header = h;
    ack.header.part = static_cast<uint32_t>(CopyPhase::kEndAck);
    ack.header.sender = runtime_->id();
    ack.header.status = static_cast<int32_t>(st.code());
    ack.header.count = 0;
    Status s = runtime_->Send(to, std::move(ack), kReplySendTimeoutMs);
    if (!s.ok()) LOG(WARNING) << "copy ack to node " << to << " failed: " << s;
  }

  // The backup acknowledged a copy: this server's ranges are on two servers again, and
  // the answers held since before the copy (in it) are sent.
  void OnCopyAcked(const Header& h) {
    if (h.sender != backup_.load(std::memory_order_acquire) || h.request_id != copy_id_) return;
    std::vector<UpdateRecord> released;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      released.swap(awaiting_copy_);
    }
    if (h.status != 0) {
      LOG(ERROR) << "backup node " << h.sender << " could not take this server's copy (code "
                 << h.status << "): this server runs without a backup";
      backup_.store(kUnassignedId, std::memory_order_release);
      FlushHeld();
      return;
    }
    backed_up_ = true;
    ++copies_acked_;
    LOG(INFO) << "backup node " << h.sender << " holds a complete copy of this server's ranges";
    for (const UpdateRecord& u : released) ReleaseHeld(UpdateId{u.worker, u.request_id, u.part});
  }

  // Holds the answer to an update until the backup applied it (HandleReplicateAck).
  void Forward(NodeId backup, Message forward, const Header& reply_to, std::vector<Frame> frames) {
    const UpdateId id{reply_to.sender, reply_to.request_id, reply_to.part};
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      held_[id] = Held{reply_to, std::move(frames)};
    }
    forward.header.status = static_cast<int32_t>(forward.header.type);
    forward.header.type = static_cast<uint16_t>(MsgType::kReplicate);
    forward.header.clock = forward.header.sender;  // the worker
    forward.header.sender = runtime_->id();
    Status s = runtime_->Send(backup, std::move(forward), kReplySendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "cannot forward an update to backup node " << backup << ": "
                                << s << " (answered without it)";
      ReleaseHeld(id);
    }
  }

  void ReleaseHeld(const UpdateId& id) {
    Held h;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      auto it = held_.find(id);
      if (it == held_.end()) return;
      h = std::move(it->second);
      held_.erase(it);
    }
    Reply(h.reply_to, Status::OK(), std::move(h.frames));
  }

  // The backup is gone or replication stopped: what waits for it is answered now.
  void FlushHeld() {
    std::map<UpdateId, Held> all;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      all.swap(held_);
    }
    for (auto& kv : all) Reply(kv.second.reply_to, Status::OK(), std::move(kv.second.frames));
  }

  // As the backup: apply a primary's update to the copy, remember it, acknowledge it.
  void HandleReplicate(Message&& msg) {
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    Message ack;
    ack.header = msg.header;
    ack.header.type = static_cast<uint16_t>(MsgType::kReplicateAck);
    ack.header.sender = runtime_->id();
    const NodeId from = msg.header.sender;
    Status st;
    if (!replica_ || from != primary_) {
      st = FailedPrecondition("this server does not back up node " + std::to_string(from));
    } else {
      Message inner;
      inner.header = msg.header;
      inner.header.type = static_cast<uint16_t>(msg.header.status);
      inner.header.sender = msg.header.clock;
      inner.header.clock = 0;
      inner.header.status = 0;
      inner.frames = std::move(msg.frames);
      const UpdateId id{inner.header.sender, inner.header.request_id, inner.header.part};
      DataRequest req;
      st = CheckRequest(std::move(inner), *replica_, epoch_,
                        static_cast<uint64_t>(options_.max_message_bytes) / 4, &req);
      if (st.ok()) {
        apply_->Handle(std::move(req), *replica_,
                       [&st](const Header&, const Status& s, std::vector<Frame>) {
                         if (!s.ok()) st = s;
                       });
      }
      if (st.ok()) Remember(id);
    }
    if (!st.ok()) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "backup copy: update from node " << from << " not applied: " << st;
    }
    ack.header.status = static_cast<int32_t>(st.code());
    Status s = runtime_->Send(from, std::move(ack), kReplySendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "replicate ack to node " << from << " failed: " << s;
    }
  }

  void HandleReplicateAck(Message&& msg) {
    if (msg.header.sender != backup_.load(std::memory_order_acquire)) {
      ++bad_;
      return;
    }
    if (msg.header.status != 0) {
      LOG_EVERY_N(ERROR, 100) << "the backup could not apply an update (code "
                              << msg.header.status << "): it is on this server only";
    }
    ReleaseHeld(UpdateId{msg.header.clock, msg.header.request_id, msg.header.part});
  }

  void Remember(const UpdateId& id) {
    std::lock_guard<std::mutex> lock(remembered_mu_);
    if (!remembered_.insert(id).second) return;
    remembered_order_.push_back(id);
    if (remembered_order_.size() > kRememberedUpdates) {
      remembered_.erase(remembered_order_.front());
      remembered_order_.pop_front();
    }
    remembered_size_.store(remembered_order_.size(), std::memory_order_relaxed);
  }

  bool Remembered(const UpdateId& id) {
    std::lock_guard<std::mutex> lock(remembered_mu_);
    return remembered_.count(id) > 0;
  }

  // The scheduler's WriteCheckpoint (receive thread: no request is handled meanwhile).
  StatusOr<std::string> WriteCheckpointFile(uint64_t set, const std::string& dir) {
    std::unique_lock<std::shared_mutex> lock(store_mu_);
    if (!store_) return Unavailable("this server has not received the cluster map yet");
    CheckpointMeta meta;
    meta.set = set;
    meta.epoch = epoch_;
    meta.rank = runtime_->rank();
    std::shared_ptr<const ClusterMap> map = runtime_->map();
    meta.num_servers = map ? static_cast<uint32_t>(map->CountRole(Role::kServer)) : 0;
    const auto start = std::chrono::steady_clock::now();
    StatusOr<std::string> path = WriteCheckpoint(dir, meta, options_.checkpoint_keep, store_.get());
    if (path.ok()) {
      LOG(INFO) << "checkpoint written to " << *path << " in "
                << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count()
                << " ms";
    } else {
      LOG(ERROR) << "checkpoint " << set << " failed: " << path.status();
    }
    return path;
  }

  // The clocks of bsp/ssp tables count the live workers only: a worker gone (left or
  // dead; `why` when known) stops counting, with one log line. Receive thread; the store
  // lock held (any mode).
  void SetWorkers(const std::set<NodeId>& live, const Status& why) {
    if (live == live_) return;
    std::string gone;
    for (NodeId w : live_) {
      if (!live.count(w)) gone += (gone.empty() ? "" : ", ") + std::to_string(w);
    }
    live_ = live;
    const auto reply = [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
      Reply(rh, st, std::move(frames));
    };
    std::string held_up;
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) {
      const std::string part = p->SetWorkers(live, *store_, reply);
      if (!part.empty()) held_up += (held_up.empty() ? "" : "; ") + part;
    }
    if (gone.empty()) return;
    if (!held_up.empty()) {
      LOG(WARNING) << "worker node " << gone << " is gone"
                   << (why.ok() ? std::string() : " (" + why.message() + ")")
                   << ": its clock no longer counts on this server's bsp/ssp tables ("
                   << live.size() << " live worker(s) left); it held up " << held_up;
    } else {
      VLOG(1) << "worker node " << gone << " is gone; " << live.size() << " live worker(s) left";
    }
  }

  // A worker that left or died (receive thread; the scheduler lost: heartbeat thread,
  // and the server shuts down anyway).
  void OnNodeDead(NodeId id, const Status& why) {
    if (id == kSchedulerId) return;
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    gone_.insert(id);
    if (!store_ || !live_.count(id)) return;
    std::set<NodeId> live = live_;
    live.erase(id);
    SetWorkers(live, why);
  }

  // Held requests past their deadline are answered (receive thread).
  void Tick() {
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    if (!store_ || bsp_->held() + ssp_->held() == 0) return;
    const auto reply = [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
      Reply(rh, st, std::move(frames));
    };
    const int64_t now = sync::NowMs();
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) p->Tick(now, *store_, reply);
  }

  // The policy of a request's table. Fused requests never carry a bsp/ssp table (workers
  // send those alone, with their clock): one that does is refused.
  SyncPolicy* PolicyFor(const DataRequest& req, Status* error) {
    if (req.header.fused()) {
      for (const FusedSegment& seg : req.segments) {
        const TableSpec* spec = store_->Spec(seg.table);
        if (spec != nullptr && spec->sync != SyncMode::kAsync) {
          *error = InvalidArgument("table '" + spec->name + "' is synchronized (" +
                                   SyncModeName(spec->sync) +
                                   "): its requests travel alone, not fused");
          return nullptr;
        }
      }
      return apply_.get();
    }
    const TableSpec* spec = store_->Spec(req.header.table);
    if (spec != nullptr && spec->sync == SyncMode::kBsp) return bsp_.get();
    if (spec != nullptr && spec->sync == SyncMode::kSsp) return ssp_.get();
    return apply_.get();
  }

  void Reply(const Header& req, const Status& status, std::vector<Frame> frames) {
    Message r;
    r.header = req;
    r.header.type = static_cast<uint16_t>(MsgType::kReply);
    r.header.status = static_cast<int32_t>(status.code());
    if (!status.ok()) {
      frames.clear();
      const std::string& text = status.message();
      frames.push_back(Frame::Copy(text.data(), std::min<size_t>(text.size(), 4096)));
    } else if (req.wire() != 0 && !frames.empty()) {
      // The table's values travel narrowed (TableSpec::wire_dtype): the pulled float32
      // values are narrowed for the reply, which echoes the request's wire type.
      const size_t n = frames[0].size() / sizeof(float);
      std::shared_ptr<uint16_t[]> narrow(new uint16_t[n == 0 ? 1 : n]);
      pack::ToWire(reinterpret_cast<const float*>(frames[0].data()), n,
                   static_cast<pack::WireType>(req.wire()), narrow.get());
      frames[0] = Frame::Borrow(narrow.get(), n * sizeof(uint16_t),
                                std::shared_ptr<const void>(narrow, narrow.get()));
    }
    for (const auto& f : frames) bytes_out_ += f.size();
    r.frames = std::move(frames);
    // Replies are matched by request and part, in any order: the parts of one request
    // spread over the worker's streams (Options::streams).
    r.lane = req.fused() ? 0 : DataLane(req.table, 0) + req.part;
    // A worker that cannot take its reply within a second is not worth stalling every
    // other request for: the reply is dropped and that worker's request times out.
    Status s = runtime_->Send(req.sender, std::move(r), kReplySendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "reply to node " << req.sender << " failed: " << s;
    }
  }

  // Out of memory while serving one request fails that request, not the server.
  void HandleData(Message&& msg) {
    try {
      HandleDataUnguarded(std::move(msg));
    } catch (const std::bad_alloc&) {
      ++bad_;
      LOG_EVERY_N(ERROR, 100) << "out of memory serving a request of node " << msg.header.sender;
      Reply(msg.header, ResourceExhausted("the server ran out of memory for this request"), {});
    }
  }

  void HandleDataUnguarded(Message&& msg) {
    ++messages_;
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    if (IsUpdate(msg.header.msg_type()) && remembered_size_.load(std::memory_order_relaxed) > 0 &&
        Remembered(UpdateId{msg.header.sender, msg.header.request_id, msg.header.part})) {
      // A part this server applied as the backup of the server whose ranges it took
      // over, sent again by a worker that never got the answer: not applied twice. A
      // pushpull is answered as the pull it also is.
      ++resent_duplicates_;
      if (msg.header.msg_type() != MsgType::kPushPull) {
        Reply(msg.header, Status::OK(), {});
        return;
      }
      msg.header.type = static_cast<uint16_t>(MsgType::kPull);
      if (!msg.frames.empty()) msg.frames.pop_back();  // the pushed values
    }
    const Header h = msg.header;
    // Replication: an update is answered once the backup applied it too.
    const NodeId backup = backup_.load(std::memory_order_acquire);
    Message forward;
    const bool forwards = backup != kUnassignedId && IsUpdate(h.msg_type());
    if (forwards) {
      forward.header = h;
      forward.frames = msg.frames;  // shared, not copied
    }
    DataRequest req;
    Status valid = !store_
                       ? Unavailable("this server has not received the cluster map yet")
                       : CheckRequest(std::move(msg), *store_, epoch_,
                                      static_cast<uint64_t>(options_.max_message_bytes) / 4, &req);
    if (!valid.ok()) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "refused a request from node " << h.sender << ": " << valid;
      Reply(h, valid, {});
      return;
    }
    if (req.pushes) ++pushes_;
    if (req.pulls) ++pulls_;
    for (const auto& f : req.frames) bytes_in_ += f.size();
    SyncPolicy* policy = PolicyFor(req, &valid);
    if (policy == nullptr) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "refused a request from node " << h.sender << ": " << valid;
      Reply(h, valid, {});
      return;
    }
    const auto handle_start = std::chrono::steady_clock::now();
    const bool replicated = forwards && policy == apply_.get();
    policy->Handle(std::move(req), *store_,
                   [this, replicated, backup, &forward](const Header& rh, const Status& s,
                                                        std::vector<Frame> frames) {
                     if (!s.ok()) ++bad_;
                     if (replicated && s.ok()) {
                       Forward(backup, std::move(forward), rh, std::move(frames));
                     } else {
                       Reply(rh, s, std::move(frames));
                     }
                   });
    handle_latency_.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - handle_start).count());
  }

  const ServerOptions options_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::atomic<bool> started_{false};  // runtime_ is read by other threads only once set
  mutable std::shared_mutex store_mu_;
  std::unique_ptr<Store> store_;  // guarded by store_mu_ (installs exclusive, requests shared)
  std::unique_ptr<CheckpointSet> restore_;  // --restore: read by installs (store_mu_ exclusive)
  // The sync policies (receive thread only), one per TableSpec::sync.
  const std::unique_ptr<SyncPolicy> apply_ = NewApplyOnArrival();
  const std::unique_ptr<SyncPolicy> bsp_ = NewBspPolicy(options_.request_timeout_ms);
  const std::unique_ptr<SyncPolicy> ssp_ = NewSspPolicy(options_.request_timeout_ms);
  std::set<NodeId> live_;  // receive thread: the workers whose clocks count
  std::set<NodeId> gone_;  // receive thread: workers that left or died (never live again)
  uint64_t epoch_ = 0;     // guarded by store_mu_
  // Replication (docs/replication.md).
  // As a backup (fields guarded by store_mu_, written on the receive thread): the copy of
  // primary_'s ranges, made by its copy number replica_copy_id_ (complete once its end
  // came), following the primary's map of epoch replica_epoch_, where it held
  // replica_ranges_; replica_error_: a copy message that failed (the copy is unusable).
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
  std::atomic<uint64_t> copies_acked_{0}, copies_received_{0};
  struct Held {
    Header reply_to;
    std::vector<Frame> frames;
  };
  std::mutex held_mu_;
  std::map<UpdateId, Held> held_;  // guarded by held_mu_: answers waiting for the backup
  // guarded by held_mu_: answers held when the last copy began, released by its ack
  std::vector<UpdateRecord> awaiting_copy_;
  std::mutex remembered_mu_;
  std::unordered_set<UpdateId, UpdateIdHash> remembered_;  // guarded by remembered_mu_
  std::deque<UpdateId> remembered_order_;                  // guarded by remembered_mu_
  std::atomic<size_t> remembered_size_{0};
  std::atomic<uint64_t> resent_duplicates_{0};
  std::atomic<uint64_t> messages_{0}, bad_{0}, pushes_{0}, pulls_{0}, bytes_in_{0}, bytes_out_{0};
  metrics::Latency handle_latency_;
  // Last: its HTTP threads read the members above, so it stops first.
  std::unique_ptr<metrics::Exporter> metrics_;
};

Server::Server(ServerOptions options) : impl_(new Impl(std::move(options))) {}
Server::~Server() { impl_->Stop(); }
Status Server::Start() { return impl_->Start(); }
Status Server::Join(std::chrono::milliseconds timeout) { return impl_->Join(timeout); }
void Server::Stop() { impl_->Stop(); }
NodeId Server::id() const { return impl_->id(); }
uint32_t Server::rank() const { return impl_->rank(); }
std::string Server::endpoint() const { return impl_->endpoint(); }
ServerStats Server::stats() const { return impl_->stats(); }
std::map<TableId, SparseTableStats> Server::table_stats() const { return impl_->table_stats(); }
TrafficStats Server::traffic() const { return impl_->traffic(); }

}  // namespace ps
