// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/cluster_map.h"

#include <algorithm>
#include <set>
#include <string>

namespace ps {

const TableInfo* ClusterMap::FindTable(TableId id) const {
  auto it = tables.find(id);
  return it == tables.end() ? nullptr : &it->second;
}

const TableInfo* ClusterMap::FindTableByName(const std::string& name) const {
  for (const auto& kv : tables) {
    if (kv.second.spec.name == name) return &kv.second;
  }
  return nullptr;
}

const NodeInfo* ClusterMap::FindNode(NodeId id) const {
  for (const auto& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

NodeInfo* ClusterMap::FindNodeMutable(NodeId id) {
  for (auto& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

std::vector<NodeId> ClusterMap::ServerIds() const {
  std::vector<const NodeInfo*> s;
  for (const auto& n : nodes) {
    if (n.role == Role::kServer) s.push_back(&n);
  }
  std::sort(s.begin(), s.end(),
            [](const NodeInfo* a, const NodeInfo* b) { return a->rank < b->rank; });
  std::vector<NodeId> ids;
  for (const auto* n : s) ids.push_back(n->id);
  return ids;
}

std::vector<NodeId> ClusterMap::ServersForLayer(const std::string& layer) const {
  std::vector<NodeId> out;
  auto pinned = layer.empty() ? placement.end() : placement.find(layer);
  for (NodeId id : ServerIds()) {
    const NodeInfo* n = FindNode(id);
    if (n == nullptr || !n->alive) continue;
    if (pinned != placement.end()) {
      const auto& ranks = pinned->second;
      if (std::find(ranks.begin(), ranks.end(), n->rank) == ranks.end()) continue;
    }
    out.push_back(id);
  }
  return out;
}

Status ClusterMap::CheckPlacement(const std::vector<LayerServers>& p, int servers) {
  std::set<std::string> layers;
  for (const LayerServers& l : p) {
    if (l.layer.empty() || l.layer.size() > 256) {
      return InvalidArgument("placement: a layer name must have 1..256 bytes");
    }
    if (!layers.insert(l.layer).second) {
      return InvalidArgument("placement: layer '" + l.layer + "' is listed twice");
    }
    if (l.servers.empty()) {
      return InvalidArgument("placement: layer '" + l.layer + "' names no server");
    }
    std::set<uint32_t> seen;
    for (uint32_t r : l.servers) {
      if (r >= static_cast<uint32_t>(servers)) {
        return InvalidArgument("placement: layer '" + l.layer + "' names server rank " +
                               std::to_string(r) + ", but the cluster has " +
                               std::to_string(servers) + " server(s)");
      }
      if (!seen.insert(r).second) {
        return InvalidArgument("placement: layer '" + l.layer + "' names server rank " +
                               std::to_string(r) + " twice");
      }
    }
  }
  return Status::OK();
}

int ClusterMap::CountRole(Role role) const {
  int c = 0;
  for (const auto& n : nodes) c += (n.role == role);
  return c;
}

}  // namespace ps
