// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TableDirectory: the scheduler's part that agrees on tables. A declare gets the table an
// id, assigns its key ranges over the live servers (placement/ranges.h; a placement plan
// pins a layer's tables here), broadcasts the new map, and is answered only once every
// live server and worker acknowledged that epoch (so no worker pushes to a server that has
// not allocated its shard, and every worker knows the table once the declare returns), or a
// server reported it could not allocate the table.
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_TABLE_DIRECTORY_H_
#define PS_SCHEDULER_TABLE_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"
#include "scheduler/cluster_state.h"

namespace layerps {
namespace pb {
class DeclareTable;
class InstallPlacement;
class DropTable;
class SetLearningRate;
class MapAck;
}  // namespace pb
}  // namespace layerps

namespace ps {

class TableDirectory {
 public:
  TableDirectory(ClusterState* state, uint64_t dense_chunk_elems)
      : state_(state), dense_chunk_elems_(dense_chunk_elems) {}

  void HandleDeclare(NodeId from, const layerps::pb::DeclareTable& d);
  // OK unless `spec` is a bounded async table on a cluster with replication, which the
  // backups could not copy exactly (FailedPrecondition naming the bounding fields).
  static Status CheckReplicable(const TableSpec& spec, bool replication);
  // A worker installs a placement (answered with a CallReply).
  void HandleInstallPlacement(NodeId from, const layerps::pb::InstallPlacement& p);
  // Makes `placement` the one in force and broadcasts the map (a new epoch). Refused when
  // a table already declared would have to move.
  Status InstallPlacement(const std::vector<LayerServers>& placement);
  // A worker drops a table by name (answered with a CallReply: kNotFound for a name no
  // table has). Declares of it still waiting fail with kAborted.
  void HandleDrop(NodeId from, const layerps::pb::DropTable& d);
  // A worker changes a table's learning rate (answered with a CallReply once every live
  // server and worker acknowledged the map that carries it).
  void HandleSetLearningRate(NodeId from, const layerps::pb::SetLearningRate& m);
  // A node acknowledged a map epoch (a server also names the tables it could not set up).
  void OnMapAck(NodeId from, const layerps::pb::MapAck& ack);
  // Answers the declares whose map every live server and worker has acknowledged.
  void Resolve();
  // Server `fresh` (a replacement, or with replication the dead one's backup) takes over
  // dead server `dead`'s ranges: every range `dead` held is now `fresh`'s (the caller
  // broadcasts the map).
  void ReplaceServer(NodeId dead, NodeId fresh);
  // Scheduler recovery: the directory of a map rebuilt from the live nodes (the tables,
  // their specs and the servers' loads); `acked`: the map epoch each node has.
  void Recover(const std::map<NodeId, uint64_t>& acked);

 private:
  struct PendingDeclare {
    NodeId requester;
    uint64_t call_id;
    TableId table;
    uint64_t epoch;      // every alive server must have acked this epoch
    bool call = false;   // answered with a CallReply (SetLearningRate), not a declare reply
  };
  void ReplyDeclare(NodeId to, uint64_t call_id, const Status& s, TableId id);
  void ReplyCall(NodeId to, uint64_t call_id, const Status& s);
  // Takes table `id` out of the map and broadcasts it (a new epoch); its dense bytes no
  // longer count in the servers' load.
  void Remove(TableId id);

  ClusterState* const state_;
  const uint64_t dense_chunk_elems_;
  TableId next_table_id_ = 0;
  std::map<NodeId, uint64_t> acked_epoch_;
  std::map<NodeId, uint64_t> server_load_;
  std::map<TableId, uint64_t> table_epoch_;
  std::map<TableId, Status> failed_tables_;  // a server could not set them up
  // Each table's spec as declared: a later declare is compared with it, not with the map's
  // spec, whose learning rate SetLearningRate may have changed since.
  std::map<TableId, TableSpec> declared_specs_;
  std::vector<PendingDeclare> pending_declares_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_TABLE_DIRECTORY_H_
