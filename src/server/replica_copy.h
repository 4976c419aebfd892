// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Replication, a new backup (docs/replication.md, "A second fault"): when a server's
// backup changes (its backup died, or it died and this server took over its ranges), the
// primary copies everything its store holds to the new backup, then forwards its updates
// there as before. The copy is a run of kReplicaCopy messages on the connection the
// forwards use, so the backup applies the forwards on top of the copy in the primary's
// order, and the primary's requests wait only while the copy is queued:
//
//   kBegin   frame 0: the primary's cluster map (pb::ClusterMap): the tables and the ranges
//            the primary holds. The backup builds an empty copy of those ranges from it.
//   kDense   one run of a dense range: offset, count; frame 0 the values, frame 1 the
//            rule's state planes for the same elements (plane after plane).
//   kSparse  count rows of a sparse table (dim): frame 0 the ids (8 bytes each), frame 1
//            the rows (dim values then the rule's state, as Store::VisitRows gives them).
//   kEnd     frame 0: the updates the copy holds whose answers the primary still held
//            (UpdateRecord each): the backup remembers them, as it remembers the updates
//            forwarded to it, so a worker that sends one again after a takeover does not
//            have it applied twice.
//   kEndAck  the backup to the primary: `status` says whether the copy is complete.
//
// Every message carries the copy's number in `request_id`, its phase in `part`, and the
// primary's map epoch. Nothing in a copy is trusted: sizes, tables and ranges are checked
// against the copy being built, and a bad message fails the copy (the backup then answers
// kEnd with the error), never the server.
#ifndef PS_SERVER_REPLICA_COPY_H_
#define PS_SERVER_REPLICA_COPY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "common/cluster_map.h"
#include "server/store.h"
#include "transport/message.h"

namespace ps {

enum class CopyPhase : uint32_t { kBegin = 0, kDense = 1, kSparse = 2, kEnd = 3, kEndAck = 4 };

// One update, as a worker's request part names it (worker node, request id, part).
struct UpdateRecord {
  uint32_t worker = 0;
  uint32_t part = 0;
  uint64_t request_id = 0;
};
static_assert(sizeof(UpdateRecord) == 16, "UpdateRecord travels as 16 bytes");

// The ranges a server holds, per table: the map's ranges whose server it is.
using RangeSet = std::map<TableId, std::vector<std::pair<Key, Key>>>;
RangeSet RangesOf(const ClusterMap& map, NodeId server);
// True when a table both sets name has different ranges in them.
bool RangesChanged(const RangeSet& before, const RangeSet& after);

// The primary: hands the copy of `store` (which holds what `map` gives this server) to
// `send`, message after message, stopping at the first error. Returns the payload bytes.
// The caller holds no request on the store (nothing changes while it runs).
StatusOr<uint64_t> SendStoreCopy(Store& store, const ClusterMap& map, uint64_t copy_id,
                                 const std::vector<UpdateRecord>& held,
                                 const std::function<Status(Message&&)>& send);

// The backup: an empty copy of the ranges `primary`'s map (in a kBegin message) gives it,
// and that map. The copy is filled by ApplyCopyChunk; forwarded updates may be applied to
// it meanwhile (they come after kBegin, in the primary's order).
struct ReplicaStart {
  std::unique_ptr<Store> store;
  std::shared_ptr<const ClusterMap> map;
};
StatusOr<ReplicaStart> BeginReplica(NodeId primary, const Message& begin);
// A kDense or kSparse message into the copy. An error means the copy is unusable.
Status ApplyCopyChunk(Store* replica, const Message& msg);
// The updates a kEnd message lists.
StatusOr<std::vector<UpdateRecord>> CopyHeldUpdates(const Message& end);

}  // namespace ps

#endif  // PS_SERVER_REPLICA_COPY_H_
