// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Collectives: operations every member of a process set calls together, built on the
// peer messages (worker/peer_messages.h), for every DataType and ReduceOp of
// ps/collectives.h (docs/collectives.md).
//
// One engine runs them all. A collective is an Op: the members (the set's worker ranks in
// ascending order; this worker at `pos`), a tag base (a reserved bit, a hash of the set,
// a per-set sequence number: successive collectives and different sets never mix), a
// deadline, and a count of its messages still outstanding. Every message is a typed peer
// tensor of at most segment_bytes; receives are posted before the sends they depend on,
// straight into their final place or a staging slot, and sends lend the caller's buffer
// (or, compressed to fp16/bf16, a narrowed copy of their own).
//
// Agreement: beside its data, every member sends every other member a Descriptor of the
// call (kind, type, op, counts, root, scale factors, algorithm, segment size, name).
// Once all arrived, each member compares the W descriptors; when one differs, every
// member fails with the same kInvalidArgument (built from the descriptors alone, so the
// text is the same everywhere) naming the first differing rank. The V variants learn the
// others' counts from them and post their data receives when each arrives.
//
// Algorithms. All-reduce: the ring (reduce-scatter then all-gather, 2(W-1) pipelined
// steps) or direct (each member sends chunk q to member q, combines the W-1 contributions
// to its own chunk from staging slots under the op's lock, and sends the result to
// everyone). Broadcast: direct from the root, or a pipelined chain starting at it.
// All-gather(v), all-to-all(v), reduce-scatter: direct (every member exchanges its blocks
// with every other, W-1 messages at once, the same bytes as a ring). Compressed all-
// reduce and reduce-scatter narrow every message to fp16/bf16 and combine in float32; the
// owner of a ring chunk rounds it to the wire type before passing it on, so every member
// ends with the same values.
//
// Failure: the first error fails the op; its receives are withdrawn, and the ticket
// completes once no message of it still reads or writes the caller's buffers. A member
// that dies (or the scheduler lost) fails every op that includes it at once, on every
// survivor, and every later op of a set that includes it; every survivor says it the
// same way ("AllReduce #7 failed: member rank 2 (node 9) died"), whether the scheduler's
// notice, a failed message or the map told it. An op past its deadline fails with
// kTimeout naming the members never heard from (Tick, every 50 ms). Priority, so every
// member reports the same: a mismatch of the descriptors, then a member's death, then
// the deadline or a lost scheduler, then any other error.
//
// Files: collectives.cc (descriptors, setup, completion, deaths, deadlines),
// collectives_reduce.cc (all-reduce, grouped, reduce-scatter, join), collectives_exchange.cc
// (gathers, broadcast, all-to-all, barrier): each call checked, its op built and posted
// with an algorithm of collective_algorithms.h (one class per algorithm, chosen by
// collective_policy.cc). collective_op.h is the running op and its segmented primitive,
// collective_protocol.h the tags and descriptors, collective_host.h what an op needs of
// this engine (Collectives implements it).
//
// Thread-safety: every member may be called from any thread. Collectives of one set must
// be started in the same order on every member.
#ifndef PS_WORKER_COLLECTIVES_H_
#define PS_WORKER_COLLECTIVES_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/cluster_map.h"
#include "common/mutex.h"
#include "ps/collectives.h"
#include "worker/collective_host.h"
#include "ps/worker.h"
#include "worker/peer_messages.h"
#include "worker/request_tracker.h"

namespace ps {

// Peer-tensor tags with this bit set belong to collectives; Worker::SendTo refuses them.
constexpr uint64_t kCollectiveTagBit = uint64_t{1} << 63;

// The shape of a ring all-reduce (and of reduce-scatter's blocks): what every member
// computes alike from (n, W, segment), all in elements.
struct RingPlan {
  size_t n = 0;
  size_t world = 1;    // W
  size_t segment = 1;  // elements per segment (at least 1)
  size_t segs = 0;     // segments per chunk (of the largest chunk)
  size_t ChunkSize(size_t c) const { return n / world + (c < n % world ? 1 : 0); }
  size_t ChunkOffset(size_t c) const { return c * (n / world) + std::min(c, n % world); }
  // Elements [*begin, *begin + *len) of segment k of chunk c (len 0: no message).
  void Segment(size_t c, size_t k, size_t* begin, size_t* len) const;
  // Steps 0..W-2 reduce-scatter, W-1..2W-3 all-gather. Chunks sent and received at a step
  // by position p.
  size_t SendChunk(size_t p, size_t step) const;
  size_t RecvChunk(size_t p, size_t step) const;
  size_t steps() const { return 2 * (world - 1); }

  // `steps` message rounds of `segs` segments each must fit the tag's message index.
  static RingPlan Make(size_t n, size_t world, size_t segment_elems, size_t steps);
};

class Collectives : private collective::OpHost {
 public:
  using Op = collective::Op;  // a running collective (worker/collective_op.h)

  using MapFn = std::function<std::shared_ptr<const ClusterMap>()>;

  // `map`: the cluster map in force (null before Start); `self`: this worker's node id.
  Collectives(PeerMessages* peers, RequestTracker* tracker, const MemberOptions& options, MapFn map,
              std::function<NodeId()> self)
      : peers_(peers), tracker_(tracker), options_(options), map_(std::move(map)),
        self_(std::move(self)) {}

  // Worker's collectives (ps/worker.h documents each). Every call returns a ticket of the
  // tracker; errors found before anything is sent complete it at once.
  Ticket AllReduce(const void* in, void* out, size_t n, DataType type,
                   const AllReduceOptions& options, Worker::Callback cb);
  Ticket GroupedAllReduce(const std::vector<CollectiveTensor>& tensors,
                          const AllReduceOptions& options, Worker::Callback cb);
  Ticket AllGather(const void* in, size_t n, DataType type, void* out,
                   const CollectiveOptions& options, Worker::Callback cb);
  Ticket AllGatherV(const void* in, size_t n, DataType type, GatherResult* out,
                    const CollectiveOptions& options, Worker::Callback cb);
  Ticket Broadcast(void* data, size_t n, DataType type, uint32_t root,
                   const CollectiveOptions& options, Worker::Callback cb);
  Ticket AllToAll(const void* in, size_t n, DataType type, void* out,
                  const CollectiveOptions& options, Worker::Callback cb);
  Ticket AllToAllV(const void* in, const std::vector<size_t>& send_counts, DataType type,
                   GatherResult* out, const CollectiveOptions& options, Worker::Callback cb);
  Ticket ReduceScatter(const void* in, size_t n, DataType type, void* out,
                       const AllReduceOptions& options, Worker::Callback cb);
  Ticket Barrier(const CollectiveOptions& options, Worker::Callback cb);
  // Horovod's join (Worker::JoinCollectives): blocks, taking part with the op's identity
  // in every AllReduce the other members start, until every member joined.
  Status Join(const CollectiveOptions& options, std::chrono::milliseconds timeout,
              uint32_t* last_rank);

  // How long a blocking caller waits for a ticket of these options at most (the op ends
  // by its deadline plus the grace its messages get).
  std::chrono::milliseconds WaitLimit(const CollectiveOptions& options) const;

  // A node died (kSchedulerId: the scheduler is lost): fails every running collective
  // that includes it (every one, for the scheduler), and remembers a member's death for
  // the collectives started later.
  //
  // `left`: the member left cleanly (its Stop). That fails no collective by itself: a
  // member leaves only after its own collectives completed, and each of them completed
  // only once every message it sent was acknowledged, i.e. received here (matched or
  // kept). So what it sent is in, and what we sent it that is still unacknowledged was
  // received there (its acknowledgement was lost with its connection): such sends count
  // as delivered. Only a receive from it that is still waiting, or posted later with
  // nothing kept, fails (it never sent that: it left without this collective).
  void OnNodeDead(NodeId id, const Status& why, bool left = false);
  // Member `id` left cleanly: recorded before anything refuses sends to it (the node
  // runtime's on_node_left), so that such a send counts as delivered (Op::Sent).
  void MarkLeft(NodeId id) {
    MutexLock lock(&mu_);
    left_.insert(id);
  }
  // Fails the running collectives past their deadline with kTimeout.
  void Tick();

 private:
  // collective::OpHost: what the ops and their algorithms use of the engine.
  PeerMessages& peers() override { return *peers_; }
  RequestTracker& tracker() override { return *tracker_; }

  struct Group {
    std::vector<NodeId> members;
    std::vector<uint32_t> ranks;
    size_t pos = 0;
    uint64_t epoch = 0;
  };
  StatusOr<Group> ResolveGroup(const std::string& what, const std::vector<uint32_t>& ranks) const;
  // Checks what every collective takes: started, a valid type, sizes that do not
  // overflow, segment_bytes, the timeout.
  Status CheckCommon(const std::string& what, DataType type, const CollectiveOptions& o,
                     size_t wire_elem) const;
  // Registers an op for `group` and posts its descriptor exchange; *ticket is its ticket.
  // `tag_base` nonzero: a joined member's part in a collective numbered already (no new
  // sequence number). `uncapped`: the timeout may exceed request_timeout_ms (Join).
  std::shared_ptr<Op> NewOp(const std::string& what, uint8_t kind, const CollectiveOptions& o,
                            Group group, DataType type, Worker::Callback cb, Ticket* ticket,
                            uint64_t tag_base = 0, bool uncapped = false);
  // Posts the descriptors (after the kind filled in op->mine; unless `descriptors` is
  // false) and releases the posting hold: the op may complete from here on.
  void Launch(const std::shared_ptr<Op>& op, bool descriptors = true);
  Ticket StartAllReduce(const void* in, void* out, size_t n, DataType type,
                        const AllReduceOptions& options, uint64_t layout,
                        std::function<void()> after, Worker::Callback cb);
  // Finishes an op whose messages all completed: its status, the kind's last step, the
  // ticket.
  void Complete(const std::shared_ptr<Op>& op) override;
  // The position in `op` of the member of lowest rank known dead (declared dead to
  // OnNodeDead, or dead in the map), or op.world() when none is.
  size_t DeadPosition(const Op& op) const override;

  PeerMessages* const peers_;
  RequestTracker* const tracker_;
  const MemberOptions options_;
  const MapFn map_;
  const std::function<NodeId()> self_;

  mutable Mutex mu_;
  std::map<std::vector<NodeId>, uint64_t> next_seq_ GUARDED_BY(mu_);  // per process set
  std::set<std::shared_ptr<Op>> running_ GUARDED_BY(mu_);
  // Nodes OnNodeDead declared dead (at most one entry per node the cluster ever had).
  std::set<NodeId> dead_ GUARDED_BY(mu_);
  // The subset of dead_ that left cleanly (OnNodeDead's `left`).
  std::set<NodeId> left_ GUARDED_BY(mu_);
  // Whether `id` left cleanly.
  bool HasLeft(NodeId id) const override {
    MutexLock lock(&mu_);
    return left_.count(id) != 0;
  }
};

}  // namespace ps

#endif  // PS_WORKER_COLLECTIVES_H_
