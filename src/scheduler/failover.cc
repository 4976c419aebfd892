// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/failover.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/status_wire.h"
#include "layerps.pb.h"
#include "scheduler/table_directory.h"

namespace ps {

bool Failover::OnTakeoverDead(NodeInfo* n, const std::string& reason) {
  if (promoting_ == 0 || n->id != promoting_) return false;
  promoting_ = 0;
  n->alive = false;
  host_->FailJob(Unavailable("server rank " + std::to_string(promoted_dead_rank_) + " (node " +
                             std::to_string(promoted_dead_) + ") died (" + promoted_reason_ +
                             ") and its backup, server rank " + std::to_string(n->rank) +
                             " (node " + std::to_string(n->id) +
                             "), died while taking over its ranges: " + reason));
  return true;
}

bool Failover::OnServerDead(NodeInfo* n, const std::string& reason, int64_t now_ms) {
  if (options_.replication && promoting_ == 0 && PromoteBackup(n, reason)) return true;
  if (options_.replace_servers_ms > 0) {
    AwaitReplacement(n, reason, now_ms);
    return true;
  }
  return false;
}

void Failover::AnnounceDeath(NodeId dead, const std::string& reason, NodeId successor) {
  layerps::pb::Control c;
  c.mutable_node_dead()->set_id(dead);
  c.mutable_node_dead()->set_reason(reason);
  c.mutable_node_dead()->set_replaceable(true);
  if (successor != 0) c.mutable_node_dead()->set_successor(successor);
  for (const auto& m : host_->map().nodes) {
    if (m.id != kSchedulerId && m.alive) host_->Send(m.id, c);
  }
}

// Workers hold what they send to the vacant rank (NodeDead says replaceable) and the live
// servers write no checkpoint set until a new server took it.
void Failover::AwaitReplacement(NodeInfo* n, const std::string& reason, int64_t now_ms) {
  const NodeId id = n->id;
  n->alive = false;
  if (id == joining_) joining_ = 0;  // died before it acknowledged its map
  LOG(WARNING) << "server rank " << n->rank << " (node " << id << ") is dead: " << reason
               << "; waiting up to " << options_.replace_servers_ms
               << " ms for a replacement (layerps-server --rank=" << n->rank
               << " --restore=<checkpoint dir>)";
  vacancies_.push_back(Vacancy{id, n->rank, now_ms + options_.replace_servers_ms, reason});
  host_->Forget(id);
  AnnounceDeath(id, reason, 0);
  host_->BroadcastMap();
  host_->Release(id);
  tables_->Resolve();
  host_->MaybeFinish();
}

// The backup is the first live rank after n's, wrapping around. False when no other
// server is alive.
bool Failover::PromoteBackup(NodeInfo* n, const std::string& reason) {
  NodeInfo* backup = nullptr;
  for (NodeInfo& m : host_->map().nodes) {
    if (m.role != Role::kServer || !m.alive || m.id == n->id) continue;
    // The smallest (rank - n.rank) mod 2^32.
    if (backup == nullptr || m.rank - n->rank - 1 < backup->rank - n->rank - 1) backup = &m;
  }
  if (backup == nullptr) return false;
  const NodeId id = n->id;
  n->alive = false;
  LOG(WARNING) << "server rank " << n->rank << " (node " << id << ") is dead: " << reason
               << "; its backup, server rank " << backup->rank << " (node " << backup->id
               << "), takes over its ranges";
  host_->Forget(id);
  tables_->ReplaceServer(id, backup->id);
  host_->Release(id);
  promoting_ = backup->id;
  promoted_dead_ = id;
  promoted_dead_rank_ = n->rank;
  promoted_reason_ = reason;
  promoting_epoch_ = host_->SendNewMapTo(backup->id);
  return true;
}

bool Failover::OnMapAck(NodeId from, const layerps::pb::MapAck& ack) {
  if (from == joining_ && ack.epoch() >= joining_epoch_) {
    OnReplacementReady(from, ack);
    return true;
  }
  if (from == promoting_ && ack.epoch() >= promoting_epoch_) {
    OnPromoted(from, ack);
    return true;
  }
  return false;
}

bool Failover::TakeoverAcked(NodeId from, const layerps::pb::MapAck& ack, const std::string& who) {
  if (ack.failed_size() > 0) {
    const auto& f = ack.failed(0);
    const TableInfo* t = host_->map().FindTable(f.table());
    host_->FailJob(StatusFromWire(f.code() == 0 ? static_cast<int>(StatusCode::kUnavailable) : f.code(),
                                  who + " could not set up table '" +
                                      (t ? t->spec.name : std::string("?")) +
                                      "': " + f.error().substr(0, 1024)));
    return false;
  }
  layerps::pb::MapAck plain;
  plain.set_epoch(ack.epoch());
  tables_->OnMapAck(from, plain);
  return true;
}

// The backup acknowledged: every node learns of the death (workers send the successor
// what they held for the dead server) and of the map; the servers whose backup changed
// then copy their ranges to their new backup.
void Failover::OnPromoted(NodeId from, const layerps::pb::MapAck& ack) {
  promoting_ = 0;
  const std::string dead = "server rank " + std::to_string(promoted_dead_rank_) + " (node " +
                           std::to_string(promoted_dead_) + ")";
  if (!TakeoverAcked(from, ack, "the backup of dead " + dead)) return;
  AnnounceDeath(promoted_dead_, promoted_reason_, from);
  const NodeInfo* backup = host_->map().FindNode(from);
  LOG(INFO) << "server rank " << (backup ? std::to_string(backup->rank) : std::string("?"))
            << " (node " << from << ") took over the ranges of dead " << dead
            << "; the servers whose backup changed copy their ranges to the new one";
  host_->BroadcastMap();
  tables_->Resolve();
  host_->MaybeFinish();
}

const Failover::Vacancy* Failover::FindVacancy(int rank, std::string* refusal) const {
  for (const Vacancy& v : vacancies_) {
    if (rank < 0 || static_cast<int>(v.rank) == rank) return &v;
  }
  std::string vacant;
  for (const Vacancy& v : vacancies_) vacant += (vacant.empty() ? "" : ", ") + std::to_string(v.rank);
  *refusal = "server rank " + std::to_string(rank) + " is not awaiting a replacement (vacant: " +
             vacant + ")";
  return nullptr;
}

// The replacement takes the dead server's place in the map and its ranges. It gets the map
// alone first; the others get it once it acknowledged it (its tables set up and restored),
// so no worker sends it a request too early.
void Failover::AcceptReplacement(const NodeInfo& info, const Vacancy& vacancy, bool restores,
                                 const std::string& identity) {
  const Vacancy v = vacancy;  // `vacancy` points into vacancies_
  host_->TakePlace(info, v.dead, identity);
  tables_->ReplaceServer(v.dead, info.id);
  vacancies_.erase(std::remove_if(vacancies_.begin(), vacancies_.end(),
                                  [&](const Vacancy& x) { return x.dead == v.dead; }),
                   vacancies_.end());
  LOG(INFO) << "server rank " << info.rank << " (node " << info.id << ") at " << info.endpoint
            << " replaces the rank's dead node " << v.dead;
  if (!restores) {
    LOG(WARNING) << "the replacement of server rank " << info.rank
                 << " has no --restore: the values of its ranges start from their tables' "
                    "initializers";
  }
  joining_ = info.id;
  joining_epoch_ = host_->SendNewMapTo(info.id);
}

void Failover::OnReplacementReady(NodeId from, const layerps::pb::MapAck& ack) {
  joining_ = 0;
  const NodeInfo* n = host_->map().FindNode(from);
  const uint32_t rank = n ? n->rank : 0;
  if (!TakeoverAcked(from, ack, "the replacement of server rank " + std::to_string(rank))) return;
  LOG(INFO) << "server rank " << rank << " is back (node " << from << ")";
  host_->BroadcastMap();
}

Status Failover::CheckDeadlines(int64_t now_ms) const {
  for (const Vacancy& v : vacancies_) {
    if (now_ms < v.deadline_ms) continue;
    return Unavailable("server rank " + std::to_string(v.rank) + " (node " + std::to_string(v.dead) +
                       ") died: " + v.reason + "; no replacement joined within replace_servers_ms=" +
                       std::to_string(options_.replace_servers_ms));
  }
  return Status::OK();
}

}  // namespace ps
