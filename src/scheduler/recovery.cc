// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/recovery.h"

#include <algorithm>

#include "layerps.pb.h"
#include "transport/map_codec.h"

namespace ps {

StatusOr<Recovery::Rejoiner> Recovery::Check(const layerps::pb::Rejoin& r, const std::string& identity,
                                             int num_servers, int num_workers, NodeId id_limit,
                                             const ClusterMap& known) {
  const std::string& session = r.session();
  const Role role = static_cast<Role>(r.role());
  const int count = role == Role::kServer ? num_servers : num_workers;
  if (session.size() < 16 || session.size() > 64 || identity != "r" + session) {
    return InvalidArgument("a rejoin with a bad session");
  }
  if (role != Role::kServer && role != Role::kWorker) {
    return InvalidArgument("a rejoin that is not a server's or a worker's");
  }
  if (r.id() == kSchedulerId || r.id() >= id_limit || static_cast<int64_t>(r.rank()) >= count) {
    return InvalidArgument("a rejoin with a bad id or rank");
  }
  if (r.endpoint().empty() || r.endpoint().size() > 1024 || r.tag().empty() || r.tag().size() > 64 ||
      !r.has_map()) {
    return InvalidArgument("a rejoin without endpoint, tag or map");
  }
  for (const NodeInfo& n : known.nodes) {
    if (n.id == r.id() || (n.role == role && n.rank == r.rank())) {
      return InvalidArgument("a rejoin of node " + std::to_string(r.id()) + " clashes with node " +
                             std::to_string(n.id));
    }
  }
  StatusOr<std::shared_ptr<const ClusterMap>> map = MapFromProto(r.map());
  if (!map.ok()) return InvalidArgument("a rejoin with a bad map: " + map.status().message());
  Rejoiner out;
  out.node.id = r.id();
  out.node.role = role;
  out.node.rank = r.rank();
  out.node.endpoint = r.endpoint();
  out.node.hostname = r.hostname().substr(0, 256);
  out.node.alive = true;
  out.tag = r.tag();
  out.map = std::move(*map);
  return out;
}

void Recovery::Add(const Rejoiner& r, const layerps::pb::Rejoin& msg, int64_t now_ms) {
  if (!active_) {
    active_ = true;
    started_ms_ = now_ms;
    job_ = r.map->job;
  }
  rejoined_[r.node.id] = r.map->epoch;
  if (!newest_ || r.map->epoch > newest_->epoch) newest_ = r.map;
  for (const auto& b : msg.barriers()) {
    uint64_t& p = barriers_passed_[b.group()];
    p = std::max<uint64_t>(p, b.passed());
  }
}

std::vector<NodeId> Recovery::Missing() const {
  std::vector<NodeId> missing;
  if (!newest_) return missing;
  for (const NodeInfo& n : newest_->nodes) {
    if (n.role != Role::kScheduler && n.alive && !rejoined_.count(n.id)) missing.push_back(n.id);
  }
  return missing;
}

bool Recovery::Due(int64_t now_ms, int64_t window_ms) const {
  return active_ && newest_ && (Missing().empty() || now_ms - started_ms_ >= window_ms);
}

ClusterMap Recovery::Rebuild(const ClusterMap& current, bool replication, uint32_t replace_servers_ms) {
  active_ = false;
  ClusterMap rebuilt = *newest_;
  rebuilt.replication = replication;
  rebuilt.replace_servers_ms = replace_servers_ms;
  for (NodeInfo& n : rebuilt.nodes) {
    if (n.role == Role::kScheduler) {
      for (const NodeInfo& s : current.nodes) {
        if (s.role == Role::kScheduler) n = s;
      }
    } else if (const NodeInfo* mine = current.FindNode(n.id)) {
      n = *mine;
    }
  }
  for (const NodeInfo& n : current.nodes) {
    if (rebuilt.FindNode(n.id) == nullptr) {
      rebuilt.nodes.push_back(n);  // rejoined with an older map: kept
      auto tag = current.tags.find(n.id);
      if (tag != current.tags.end()) rebuilt.tags[n.id] = tag->second;
    }
  }
  std::sort(rebuilt.nodes.begin(), rebuilt.nodes.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  return rebuilt;
}

}  // namespace ps
