// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/replication.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>

#include "node/node_runtime.h"
#include "server/checkpoint.h"
#include "server/request.h"
#include "server/sync_policy.h"

namespace ps {

namespace {
constexpr int kReplySendTimeoutMs = 1000;
// A copy to a new backup is queued message after message; one that cannot be queued
// within this time leaves the server without a backup (logged).
constexpr int kCopySendTimeoutMs = 10000;
// How many updates a server remembers having applied (as a backup) so that the same part
// sent again after a takeover is not applied twice.
constexpr size_t kRememberedUpdates = size_t{1} << 18;

bool HoldsRanges(const ClusterMap& map, NodeId server) {
  for (const auto& kv : map.tables) {
    for (const KeyRange& r : kv.second.ranges) {
      if (r.server == server) return true;
    }
  }
  return false;
}
}  // namespace

// Who this server backs up and forwards to, from a new map (InstallMap: store_mu_
// exclusive, receive thread). The live servers in rank order form a ring: each keeps a
// copy of the ranges of the live server before it. A death changes the ring: the dead
// server's backup takes its ranges over (the copy becomes its own), and every server
// whose backup changed, or whose ranges grew, copies its store to its backup
// (server/replica_copy.h) while requests go on, so that a later death loses nothing.
void Replication::OnMap(const ClusterMap& map, Store* store,
                      std::vector<std::pair<TableId, Status>>* failed) {
  // The server holds its store lock exclusively (under another name: the analysis cannot
  // see that the two references are one lock).
  store_mu_.AssertHeld();
  store_ = store;
  epoch_ = map.epoch;
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
RangeSet Replication::TakeOverDeadPrimary(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed) {
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

void Replication::DropReplica() {
  replica_.reset();
  primary_ = kUnassignedId;
  replica_complete_ = false;
  replica_copy_id_ = 0;
}

// Tables the map has and the copy lacks (declared since the copy began) start in the
// copy as on the primary: from their initializer, or from --restore.
void Replication::InstallNewTablesInReplica(const ClusterMap& map, std::vector<std::pair<TableId, Status>>* failed) {
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
void Replication::CopyToBackup(const ClusterMap& map, NodeId backup) {
  const uint64_t id = ++copy_id_;
  backed_up_ = false;
  std::vector<UpdateRecord> held;
  {
    MutexLock lock(&held_mu_);
    for (const auto& kv : held_) {
      held.push_back(UpdateRecord{std::get<0>(kv.first), std::get<2>(kv.first), std::get<1>(kv.first)});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  copy_progress_.Start("copy of this server's ranges to its backup, server node " +
                           std::to_string(backup),
                       store_->PayloadBytes());
  StatusOr<uint64_t> bytes = SendStoreCopy(*store_, map, id, held, [&](Message&& m) {
    m.header.sender = runtime_->id();
    uint64_t payload = 0;  // the store's bytes: not the map the copy begins with
    if (static_cast<CopyPhase>(m.header.part) != CopyPhase::kBegin) {
      for (const Frame& f : m.frames) payload += f.size();
    }
    Status sent = runtime_->Send(backup, std::move(m), kCopySendTimeoutMs);
    if (sent.ok()) {
      copy_progress_.Add(payload);
      copy_bytes_ += payload;
    }
    return sent;
  });
  copy_progress_.Finish(bytes.ok());
  if (!bytes.ok()) {
    LOG(ERROR) << "cannot copy this server's ranges to its new backup, node " << backup << ": "
               << bytes.status() << "; this server runs without a backup";
    backup_.store(kUnassignedId, std::memory_order_release);
    FlushHeld();
    return;
  }
  {
    MutexLock lock(&held_mu_);
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
void Replication::HandleReplicaCopy(Message&& msg) {
  const NodeId from = msg.header.sender;
  const auto phase = static_cast<CopyPhase>(msg.header.part);
  if (phase == CopyPhase::kEndAck) {
    OnCopyAcked(msg.header);
    return;
  }
  if (phase == CopyPhase::kBegin) {
    WriterLock lock(&store_mu_);
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
  ReaderLock lock(&store_mu_);
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

void Replication::AckCopy(NodeId to, const Header& h, const Status& st) {
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
void Replication::OnCopyAcked(const Header& h) {
  if (h.sender != backup_.load(std::memory_order_acquire) || h.request_id != copy_id_) return;
  std::vector<UpdateRecord> released;
  {
    MutexLock lock(&held_mu_);
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
void Replication::Forward(NodeId backup, Message forward, const Header& reply_to, std::vector<Frame> frames) {
  const UpdateId id{reply_to.sender, reply_to.request_id, reply_to.part};
  {
    MutexLock lock(&held_mu_);
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

void Replication::ReleaseHeld(const UpdateId& id) {
  Held h;
  {
    MutexLock lock(&held_mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return;
    h = std::move(it->second);
    held_.erase(it);
  }
  reply_(h.reply_to, Status::OK(), std::move(h.frames));
}

// The backup is gone or replication stopped: what waits for it is answered now.
void Replication::FlushHeld() {
  std::map<UpdateId, Held> all;
  {
    MutexLock lock(&held_mu_);
    all.swap(held_);
  }
  for (auto& kv : all) reply_(kv.second.reply_to, Status::OK(), std::move(kv.second.frames));
}

// As the backup: apply a primary's update to the copy, remember it, acknowledge it.
void Replication::HandleReplicate(Message&& msg) {
  ReaderLock lock(&store_mu_);
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
                      static_cast<uint64_t>(max_message_bytes_) / 4, &req);
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

void Replication::HandleReplicateAck(Message&& msg) {
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

void Replication::Remember(const UpdateId& id) {
  MutexLock lock(&remembered_mu_);
  if (!remembered_.insert(id).second) return;
  remembered_order_.push_back(id);
  if (remembered_order_.size() > kRememberedUpdates) {
    remembered_.erase(remembered_order_.front());
    remembered_order_.pop_front();
  }
  remembered_size_.store(remembered_order_.size(), std::memory_order_relaxed);
}

bool Replication::Remembered(const UpdateId& id) {
  MutexLock lock(&remembered_mu_);
  return remembered_.count(id) > 0;
}

}  // namespace ps
