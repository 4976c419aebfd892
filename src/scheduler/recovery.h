// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Scheduler recovery (docs/recovery.md): a scheduler started on the address of one that
// died hears from the live nodes of the old cluster, each sending a Rejoin (its id, rank,
// data tag, session, newest map and barriers passed) until the cluster is rebuilt. This
// part checks the rejoins, keeps what they say, and rebuilds the cluster map from the
// newest of their maps; the scheduler does the rest (connections, membership, the
// broadcast, and declaring dead the nodes that never rejoined).
//
// Thread-safety: the scheduler's loop thread only.
#ifndef PS_SCHEDULER_RECOVERY_H_
#define PS_SCHEDULER_RECOVERY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/cluster_map.h"
#include "ps/status.h"
#include "ps/types.h"

namespace layerps {
namespace pb {
class Rejoin;
}  // namespace pb
}  // namespace layerps

namespace ps {

class Recovery {
 public:
  struct Rejoiner {
    NodeInfo node;
    std::string tag;
    std::shared_ptr<const ClusterMap> map;  // the newest map the node had
  };
  // A Rejoin arriving on routing id `identity`, checked (its session names the identity;
  // role, id below `id_limit`, rank below the role's count, endpoint, tag, a valid map; no
  // clash with a node of `known`). The token is the caller's to check. Why it is dropped,
  // as kInvalidArgument, otherwise the node it describes.
  static StatusOr<Rejoiner> Check(const layerps::pb::Rejoin& r, const std::string& identity,
                                  int num_servers, int num_workers, NodeId id_limit,
                                  const ClusterMap& known);

  bool active() const { return active_; }
  bool rejoined(NodeId id) const { return rejoined_.count(id) != 0; }
  // A node rejoined (the first one starts the recovery, at `now_ms`).
  void Add(const Rejoiner& r, const layerps::pb::Rejoin& msg, int64_t now_ms);
  // The live servers and workers of the newest map that have not rejoined.
  std::vector<NodeId> Missing() const;
  // Time to rebuild: every node of the newest map rejoined, or `window_ms` passed since
  // the first rejoin.
  bool Due(int64_t now_ms, int64_t window_ms) const;
  // The newest map with `current`'s scheduler entry and the nodes `current` holds (as they
  // rejoined) in place of theirs, ordered by id; ends the recovery.
  ClusterMap Rebuild(const ClusterMap& current, bool replication, uint32_t replace_servers_ms);

  // Each rejoined node's map epoch (what it has acknowledged).
  const std::map<NodeId, uint64_t>& epochs() const { return rejoined_; }
  // By ps::Group, the most barriers any rejoined node passed.
  const std::map<uint32_t, uint64_t>& barriers_passed() const { return barriers_passed_; }
  int64_t started_ms() const { return started_ms_; }
  uint64_t newest_epoch() const { return newest_ ? newest_->epoch : 0; }
  // The job being taken over (the first rejoiner's; every rejoiner must name it).
  const std::string& job() const { return job_; }

 private:
  bool active_ = false;
  int64_t started_ms_ = 0;
  std::string job_;
  std::map<NodeId, uint64_t> rejoined_;
  std::shared_ptr<const ClusterMap> newest_;
  std::map<uint32_t, uint64_t> barriers_passed_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_RECOVERY_H_
