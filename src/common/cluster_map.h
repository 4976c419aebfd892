// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cluster map: the members of the cluster and, for every table, which server holds
// which key range. The scheduler builds it; every node keeps an immutable snapshot and
// replaces it when a newer epoch arrives. Its wire form is in transport/map_codec.h; how
// ranges are assigned is placement's business (placement/ranges.h).
#ifndef PS_COMMON_CLUSTER_MAP_H_
#define PS_COMMON_CLUSTER_MAP_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {

struct TableInfo {
  TableId id = kInvalidTable;
  TableSpec spec;
  // Ascending, contiguous, covering the key space: dense [0, num_chunks), sparse the
  // whole MixKey space [0, 2^64) (the last range's end is 0, meaning 2^64).
  std::vector<KeyRange> ranges;
  uint64_t chunk_elems = 0;  // dense only

  bool dense() const { return spec.kind == TableKind::kDense; }
  uint64_t num_chunks() const { return dense() ? (spec.size + chunk_elems - 1) / chunk_elems : 0; }
  // Dense: the elements [first, last) a range covers.
  uint64_t RangeFirstElem(const KeyRange& r) const { return r.begin * chunk_elems; }
  uint64_t RangeEndElem(const KeyRange& r) const {
    const uint64_t e = r.end * chunk_elems;
    return e < spec.size ? e : spec.size;
  }
};

class ClusterMap {
 public:
  uint64_t epoch = 0;
  std::vector<NodeInfo> nodes;  // ordered by id
  std::map<TableId, TableInfo> tables;
  // Each node's data identity: its data arrives from the routing id "n" + tag.
  std::map<NodeId, std::string> tags;
  // The placement in force: layer -> the server ranks its tables are pinned to.
  std::map<std::string, std::vector<uint32_t>> placement;
  // > 0: a dead server may be replaced within this many ms (SchedulerOptions).
  uint32_t replace_servers_ms = 0;
  // Servers back up the ranges of the rank before them (SchedulerOptions::replication).
  bool replication = false;
  // The job's identity (random, from the scheduler that formed the cluster; kept by one
  // that took it over): a scheduler adopts rejoining nodes of one job only.
  std::string job;

  const TableInfo* FindTable(TableId id) const;
  const TableInfo* FindTableByName(const std::string& name) const;
  const NodeInfo* FindNode(NodeId id) const;
  NodeInfo* FindNodeMutable(NodeId id);
  std::vector<NodeId> ServerIds() const;  // alive or not, by rank
  int CountRole(Role role) const;
  // The server node ids a new table of `layer` is spread over: the live servers of its
  // placement, or every live server (by rank).
  std::vector<NodeId> ServersForLayer(const std::string& layer) const;
  // Checks a placement for a cluster of `num_servers` servers: ranks below it, no
  // duplicates, every layer named once and with at least one server.
  static Status CheckPlacement(const std::vector<LayerServers>& placement, int num_servers);
};

}  // namespace ps

#endif  // PS_COMMON_CLUSTER_MAP_H_
