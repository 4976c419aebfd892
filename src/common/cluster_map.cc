// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/cluster_map.h"

#include <algorithm>

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

int ClusterMap::CountRole(Role role) const {
  int c = 0;
  for (const auto& n : nodes) c += (n.role == role);
  return c;
}

}  // namespace ps
