// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Collectives: operations every member of a group of workers calls together, built on
// the peer messages (worker/peer_messages.h). Today: the all-reduce (sum) of a float
// buffer, in place, by a ring or, for small buffers, directly (docs/collectives.md).
//
// Direct all-reduce (AllReduceAlgorithm::kDirect): the same W chunks; position p sends
// chunk q to position q for every q != p and adds what the others send into its chunk p
// (reduce-scatter in one step; each contribution is received into a staging slot of its
// own and added under the op's lock, as two may be delivered at once); once the W-1 contributions to a segment of chunk p
// arrived, it sends the summed segment to every other position, which copies it into
// place (all-gather in one step). The same bytes as the ring, 2 hops instead of 2(W-1).
//
// Ring all-reduce among W workers (the group's ranks in ascending order form the ring;
// position p sends to p+1 and receives from p-1): the buffer is cut into W chunks; in
// W-1 reduce-scatter steps each position sends one chunk to the right and adds the chunk
// it receives from the left into its buffer (the receive sums in place, no staging
// copy), after which position p holds the full sum of chunk p+1; W-1 all-gather steps
// then pass the summed chunks around the ring. Each worker sends and receives
// 2(W-1)/W of the buffer. Every chunk is cut into segments of `segment_bytes`, each its
// own message, and the send of a segment's next step starts as soon as that segment
// arrived (on the receive thread), so receiving, summing and sending overlap.
//
// Every receive is posted before the first send, straight into its final place in the
// caller's buffer; sends lend the buffer without a copy. Messages carry a tag made of a
// reserved bit, a hash of the group, a per-group sequence number and the message's index
// in the collective, so successive collectives (and different groups) never mix.
//
// Failure: a participant that dies (or the scheduler lost) fails every running
// collective that includes it at once, on every survivor, when the cluster map says so
// (heartbeat_timeout_ms); a collective not done by its deadline fails; either way the call
// returns only once no message of it still reads or writes the caller's buffer, whose
// contents are then unspecified.
//
// Thread-safety: every member may be called from any thread. Collectives of one group
// must be called in the same order on every member (one at a time per group and thread
// of the caller's choosing, as the sequence numbers pair them up by order).
#ifndef PS_WORKER_COLLECTIVES_H_
#define PS_WORKER_COLLECTIVES_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "common/cluster_map.h"
#include "ps/worker.h"
#include "worker/peer_messages.h"
#include "worker/request_tracker.h"

namespace ps {

// Peer-tensor tags with this bit set belong to collectives; Worker::SendTo refuses them.
constexpr uint64_t kCollectiveTagBit = uint64_t{1} << 63;

// The shape of a ring all-reduce: what every member computes alike from (n, W, segment).
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

  static RingPlan Make(size_t n, size_t world, size_t segment_bytes);
};

class Collectives {
 public:
  Collectives(PeerMessages* peers, RequestTracker* tracker, const MemberOptions& options)
      : peers_(peers), tracker_(tracker), options_(options) {}

  // The ring all-reduce (sum) of data[0..n) among the workers of `ranks` (empty: every
  // worker of `map`), `self` being this worker's node id. See Worker::AllReduce.
  // `map` returns the cluster map in force (null before Start).
  Status AllReduce(const std::function<std::shared_ptr<const ClusterMap>()>& map, NodeId self,
                   const AllReduceOptions& options, float* data, size_t n,
                   std::chrono::milliseconds timeout);

  // A node died (kSchedulerId: the scheduler is lost): fails every running collective
  // that includes it (every one, for the scheduler).
  void OnNodeDead(NodeId id, const Status& why);

  // A running all-reduce (defined in collectives.cc).
  struct Op;

 private:
  // AllReduceAlgorithm::kDirect: posts every receive of `op` (both phases), each arrival
  // of the last contribution to a segment sending the summed segment to everyone.
  void PostDirect(const std::shared_ptr<Op>& op, std::vector<Ticket>* receives);

  PeerMessages* const peers_;
  RequestTracker* const tracker_;
  const MemberOptions options_;

  std::mutex mu_;
  std::map<std::vector<NodeId>, uint64_t> next_seq_;  // guarded by mu_: per group
  std::set<std::shared_ptr<Op>> running_;             // guarded by mu_
};

}  // namespace ps

#endif  // PS_WORKER_COLLECTIVES_H_
