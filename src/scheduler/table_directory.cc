// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/table_directory.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/status_wire.h"
#include "layerps.pb.h"
#include "placement/ranges.h"
#include "transport/map_codec.h"

namespace ps {

void TableDirectory::HandleInstallPlacement(NodeId from, const layerps::pb::InstallPlacement& p) {
  std::vector<LayerServers> placement;
  for (const auto& l : p.layers()) {
    placement.push_back(
        LayerServers{l.layer(), {l.server_ranks().begin(), l.server_ranks().end()}});
  }
  Status s = InstallPlacement(placement);
  layerps::pb::Control c;
  auto* r = c.mutable_call_reply();
  r->set_request_id(p.request_id());
  r->set_code(static_cast<int>(s.code()));
  r->set_error(s.message());
  state_->Send(from, c);
}

Status TableDirectory::InstallPlacement(const std::vector<LayerServers>& placement) {
  ClusterMap& map = state_->map();
  PS_RETURN_IF_ERROR(ClusterMap::CheckPlacement(placement, map.CountRole(Role::kServer)));
  std::map<std::string, std::vector<uint32_t>> next;
  for (const auto& l : placement) next[l.layer] = l.servers;
  // Tables already declared stay where they are (moving them needs their values to move
  // too): a placement that would put one elsewhere is refused.
  for (const auto& kv : map.tables) {
    const TableInfo& t = kv.second;
    auto pinned = next.find(t.spec.layer);
    if (t.spec.layer.empty() || pinned == next.end()) continue;
    for (const KeyRange& r : t.ranges) {
      const NodeInfo* n = map.FindNode(r.server);
      const uint32_t rank = n ? n->rank : ~0u;
      if (std::find(pinned->second.begin(), pinned->second.end(), rank) == pinned->second.end()) {
        return FailedPrecondition("table '" + t.spec.name + "' of layer '" + t.spec.layer +
                                  "' is already on server rank " + std::to_string(rank) +
                                  ", which the new placement does not list; install the "
                                  "placement before declaring the layer's tables");
      }
    }
  }
  map.placement = std::move(next);
  state_->BroadcastMap();
  LOG(INFO) << "placement installed for " << placement.size() << " layer(s), map epoch "
            << map.epoch;
  return Status::OK();
}

void TableDirectory::OnMapAck(NodeId from, const layerps::pb::MapAck& ack) {
  acked_epoch_[from] = std::max(acked_epoch_[from], ack.epoch());
  ClusterMap& map = state_->map();
  std::vector<TableId> failed;
  for (const auto& f : ack.failed()) {
    if (map.tables.count(f.table()) && !failed_tables_.count(f.table())) {
      const std::string why = "server node " + std::to_string(from) +
                              " could not set up table '" + map.tables[f.table()].spec.name +
                              "': " + f.error().substr(0, 1024);
      failed_tables_[f.table()] =
          f.code() == 0 ? ResourceExhausted(why) : StatusFromWire(f.code(), why);
      failed.push_back(f.table());
    }
  }
  // A table a server could not set up leaves the map: the servers that did free their
  // shares, none retries it on every later map, and its name may be declared again.
  for (TableId id : failed) Remove(id);
  Resolve();
}

void TableDirectory::Remove(TableId id) {
  ClusterMap& map = state_->map();
  auto it = map.tables.find(id);
  if (it == map.tables.end()) return;
  const TableInfo& t = it->second;
  if (t.dense()) {
    for (const KeyRange& r : t.ranges) {
      const uint64_t bytes = (t.RangeEndElem(r) - t.RangeFirstElem(r)) * t.spec.ElementBytes();
      uint64_t& load = server_load_[r.server];
      load -= std::min(load, bytes);
    }
  }
  LOG(INFO) << "table '" << t.spec.name << "' (id " << id << ") leaves the map";
  map.tables.erase(it);
  table_epoch_.erase(id);
  declared_specs_.erase(id);
  state_->BroadcastMap();
}

void TableDirectory::ReplyCall(NodeId to, uint64_t call_id, const Status& s) {
  layerps::pb::Control c;
  auto* r = c.mutable_call_reply();
  r->set_request_id(call_id);
  r->set_code(static_cast<int>(s.code()));
  r->set_error(s.message());
  state_->Send(to, c);
}

void TableDirectory::HandleSetLearningRate(NodeId from, const layerps::pb::SetLearningRate& m) {
  ClusterMap& map = state_->map();
  auto it = map.tables.find(m.table());
  const float lr = m.learning_rate();
  Status s;
  if (it == map.tables.end()) {
    s = NotFound("set learning rate: no table with id " + std::to_string(m.table()));
  } else if (it->second.spec.rule == UpdateRule::kSum ||
             it->second.spec.rule == UpdateRule::kElastic) {
    s = InvalidArgument("table '" + it->second.spec.name + "' has rule " +
                        UpdateRuleName(it->second.spec.rule) + ", which has no learning rate");
  } else if (!(std::isfinite(lr) && lr >= 0) ||
             (lr == 0 && it->second.spec.rule == UpdateRule::kFtrl)) {
    s = InvalidArgument("table '" + it->second.spec.name + "': a learning rate must be finite and " +
                        (it->second.spec.rule == UpdateRule::kFtrl ? "> 0 (ftrl divides by it)"
                                                                   : ">= 0"));
  }
  if (!s.ok()) {
    ReplyCall(from, m.request_id(), s);
    return;
  }
  if (it->second.spec.learning_rate != lr) {
    it->second.spec.learning_rate = lr;
    state_->BroadcastMap();
  }
  pending_declares_.push_back({from, m.request_id(), it->first, map.epoch, true});
  Resolve();
}

void TableDirectory::HandleDrop(NodeId from, const layerps::pb::DropTable& d) {
  Status s;
  const TableInfo* t = state_->map().FindTableByName(d.name());
  if (t == nullptr) {
    s = NotFound("no table named '" + d.name().substr(0, 256) + "' to drop");
  } else {
    const TableId id = t->id;
    for (auto it = pending_declares_.begin(); it != pending_declares_.end();) {
      if (it->table != id) {
        ++it;
        continue;
      }
      const Status dropped = Aborted("table '" + d.name() + "' was dropped meanwhile");
      if (it->call) {
        ReplyCall(it->requester, it->call_id, dropped);
      } else {
        ReplyDeclare(it->requester, it->call_id, dropped, kInvalidTable);
      }
      it = pending_declares_.erase(it);
    }
    Remove(id);
  }
  ReplyCall(from, d.request_id(), s);
}

void TableDirectory::ReplyDeclare(NodeId to, uint64_t call_id, const Status& s, TableId id) {
  layerps::pb::Control c;
  auto* r = c.mutable_declare_table_reply();
  r->set_request_id(call_id);
  r->set_code(static_cast<int>(s.code()));
  r->set_error(s.message());
  r->set_table_id(id);
  state_->Send(to, c);
}

// A replicated cluster copies every update of an async table to a backup, but a bounded
// table's rows are also created, touched and dropped by what the backup never sees: pulls
// create rows and move their recency only on the primary, expiry reads each server's own
// clock, so primary and backup would evict, expire and admit different rows, and a
// takeover would bring back acknowledged rows as the initializer's value. Such a table is
// refused rather than replicated with silent losses (docs/replication.md, "Limits").
Status TableDirectory::CheckReplicable(const TableSpec& spec, bool replication) {
  if (!replication || spec.sync != SyncMode::kAsync || !spec.bounded()) return Status::OK();
  std::string bounds;
  auto add = [&bounds](bool set, const char* field) {
    if (!set) return;
    if (!bounds.empty()) bounds += ", ";
    bounds += field;
  };
  add(spec.capacity > 0, "capacity");
  add(spec.capacity_bytes > 0, "capacity_bytes");
  add(spec.expiry_steps > 0, "expiry_steps");
  add(spec.expiry_seconds > 0, "expiry_seconds");
  add(spec.admit_after > 1, "admit_after");
  add(spec.admit_probability < 1.0f, "admit_probability");
  return FailedPrecondition("table '" + spec.name + "' is bounded (" + bounds +
                            ") and the cluster runs with replication: a backup cannot hold "
                            "exactly the rows its primary keeps, so bounded async tables are "
                            "not replicated (docs/replication.md, \"Limits\"); declare it "
                            "unbounded, or with sync bsp/ssp, or run without --replication");
}

void TableDirectory::HandleDeclare(NodeId from, const layerps::pb::DeclareTable& d) {
  const TableSpec spec = SpecFromProto(d.spec());
  Status valid = spec.Validate();
  if (!valid.ok()) {
    ReplyDeclare(from, d.request_id(), valid, kInvalidTable);
    return;
  }
  if (!state_->complete()) {
    ReplyDeclare(from, d.request_id(), FailedPrecondition("the cluster is not complete"),
                 kInvalidTable);
    return;
  }
  if (Status r = CheckReplicable(spec, state_->map().replication); !r.ok()) {
    ReplyDeclare(from, d.request_id(), r, kInvalidTable);
    return;
  }
  if (const TableInfo* t = state_->map().FindTableByName(spec.name)) {
    auto declared = declared_specs_.find(t->id);
    const TableSpec& first = declared != declared_specs_.end() ? declared->second : t->spec;
    if (!first.SameAs(spec)) {
      std::string why = "table '" + spec.name + "' was declared with a different spec (" +
                        first.Difference(spec) + ")";
      if (first.sync != spec.sync || first.staleness != spec.staleness) {
        // Mixing synchronization models (algorithms) on one table is refused.
        why += ": sync " + std::string(SyncModeName(first.sync)) + " (staleness " +
               std::to_string(first.staleness) + "), this declare asks for " +
               SyncModeName(spec.sync) + " (staleness " + std::to_string(spec.staleness) + ")";
      }
      ReplyDeclare(from, d.request_id(), AlreadyExists(why), kInvalidTable);
      return;
    }
    pending_declares_.push_back({from, d.request_id(), t->id, table_epoch_[t->id]});
    Resolve();
    return;
  }
  // The placement in force pins a layer's tables to its servers; others go everywhere.
  std::vector<NodeId> servers = state_->map().ServersForLayer(spec.layer);
  if (state_->map().CountRole(Role::kServer) == 0) {
    ReplyDeclare(from, d.request_id(),
                 FailedPrecondition("table '" + spec.name +
                                    "': the job has no servers (num_servers=0): tables need "
                                    "servers; collectives and peer messages run without"),
                 kInvalidTable);
    return;
  }
  if (servers.empty()) {
    ReplyDeclare(from, d.request_id(),
                 Unavailable(state_->map().placement.count(spec.layer)
                                 ? "no server of layer '" + spec.layer + "' placement is alive"
                                 : std::string("no server is alive")),
                 kInvalidTable);
    return;
  }
  TableInfo info;
  info.id = next_table_id_++;
  info.spec = spec;
  info.chunk_elems = spec.kind == TableKind::kDense ? dense_chunk_elems_ : 0;
  info.ranges = placement::AssignRanges(spec, dense_chunk_elems_, servers, &server_load_);
  state_->map().tables[info.id] = info;
  declared_specs_[info.id] = spec;
  state_->BroadcastMap();
  table_epoch_[info.id] = state_->map().epoch;
  LOG(INFO) << "table '" << spec.name << "' is id " << info.id << " over " << info.ranges.size()
            << " range(s), map epoch " << state_->map().epoch;
  pending_declares_.push_back({from, d.request_id(), info.id, state_->map().epoch});
  Resolve();
}

void TableDirectory::ReplaceServer(NodeId dead, NodeId fresh) {
  for (auto& kv : state_->map().tables) {
    for (KeyRange& r : kv.second.ranges) {
      if (r.server == dead) r.server = fresh;
    }
  }
  server_load_[fresh] += server_load_[dead];
  server_load_.erase(dead);
  acked_epoch_.erase(dead);
}

void TableDirectory::Resolve() {
  for (auto it = pending_declares_.begin(); it != pending_declares_.end();) {
    bool acked = true;
    for (const auto& n : state_->map().nodes) {
      // Servers must hold the shard and workers know the table: then every worker may use
      // the id as soon as the declare returns, whichever worker declared it.
      if (n.role != Role::kScheduler && n.alive && acked_epoch_[n.id] < it->epoch) acked = false;
    }
    auto failed = failed_tables_.find(it->table);
    if (failed != failed_tables_.end()) {
      const Status s = failed->second;
      if (it->call) {
        ReplyCall(it->requester, it->call_id, s);
      } else {
        ReplyDeclare(it->requester, it->call_id, s, kInvalidTable);
      }
      it = pending_declares_.erase(it);
    } else if (acked) {
      if (it->call) {
        ReplyCall(it->requester, it->call_id, Status::OK());
      } else {
        ReplyDeclare(it->requester, it->call_id, Status::OK(), it->table);
      }
      it = pending_declares_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ps

namespace ps {

void TableDirectory::Recover(const std::map<NodeId, uint64_t>& acked) {
  const ClusterMap& map = state_->map();
  server_load_.clear();
  declared_specs_.clear();
  table_epoch_.clear();
  for (const auto& kv : map.tables) {
    const TableInfo& t = kv.second;
    next_table_id_ = std::max<TableId>(next_table_id_, t.id + 1);
    // The map's spec: a learning rate changed since the declare is compared as changed.
    declared_specs_[t.id] = t.spec;
    if (!t.dense()) continue;
    for (const KeyRange& r : t.ranges) {
      server_load_[r.server] += (t.RangeEndElem(r) - t.RangeFirstElem(r)) * t.spec.ElementBytes();
    }
  }
  acked_epoch_ = acked;
}

}  // namespace ps
