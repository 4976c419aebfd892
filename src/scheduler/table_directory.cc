// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/table_directory.h"

#include <glog/logging.h>

#include <algorithm>
#include <string>

#include "layerps.pb.h"
#include "placement/ranges.h"
#include "transport/map_codec.h"

namespace ps {

void TableDirectory::OnMapAck(NodeId from, const layerps::pb::MapAck& ack) {
  acked_epoch_[from] = std::max(acked_epoch_[from], ack.epoch());
  ClusterMap& map = state_->map();
  for (const auto& f : ack.failed()) {
    if (map.tables.count(f.table()) && !failed_tables_.count(f.table())) {
      failed_tables_[f.table()] = "server node " + std::to_string(from) +
                                  " could not set up table '" + map.tables[f.table()].spec.name +
                                  "': " + f.error().substr(0, 512);
    }
  }
  Resolve();
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
  if (const TableInfo* t = state_->map().FindTableByName(spec.name)) {
    if (!t->spec.SameAs(spec)) {
      ReplyDeclare(from, d.request_id(),
                   AlreadyExists("table '" + spec.name + "' was declared with a different spec"),
                   kInvalidTable);
      return;
    }
    pending_declares_.push_back({from, d.request_id(), t->id, table_epoch_[t->id]});
    Resolve();
    return;
  }
  std::vector<NodeId> servers;
  for (NodeId s : state_->map().ServerIds()) {
    const NodeInfo* n = state_->map().FindNode(s);
    if (n && n->alive) servers.push_back(s);
  }
  if (servers.empty()) {
    ReplyDeclare(from, d.request_id(), Unavailable("no server is alive"), kInvalidTable);
    return;
  }
  TableInfo info;
  info.id = next_table_id_++;
  info.spec = spec;
  info.chunk_elems = spec.kind == TableKind::kDense ? dense_chunk_elems_ : 0;
  info.ranges = placement::AssignRanges(spec, dense_chunk_elems_, servers, &server_load_);
  state_->map().tables[info.id] = info;
  state_->BroadcastMap();
  table_epoch_[info.id] = state_->map().epoch;
  LOG(INFO) << "table '" << spec.name << "' is id " << info.id << " over " << info.ranges.size()
            << " range(s), map epoch " << state_->map().epoch;
  pending_declares_.push_back({from, d.request_id(), info.id, state_->map().epoch});
  Resolve();
}

void TableDirectory::Resolve() {
  for (auto it = pending_declares_.begin(); it != pending_declares_.end();) {
    bool acked = true;
    for (const auto& n : state_->map().nodes) {
      if (n.role == Role::kServer && n.alive && acked_epoch_[n.id] < it->epoch) acked = false;
    }
    auto failed = failed_tables_.find(it->table);
    if (failed != failed_tables_.end()) {
      ReplyDeclare(it->requester, it->call_id, ResourceExhausted(failed->second), kInvalidTable);
      it = pending_declares_.erase(it);
    } else if (acked) {
      ReplyDeclare(it->requester, it->call_id, Status::OK(), it->table);
      it = pending_declares_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ps
