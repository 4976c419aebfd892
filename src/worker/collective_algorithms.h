// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The collectives' algorithms, one class per algorithm, each posting the messages of one
// op (worker/collective_op.h) through the op's segmented primitive, and the policy that
// picks one. The engine (collectives*.cc) checks the call, builds the op, asks the policy,
// and posts; an algorithm knows nothing of the engine beyond the op.
//
//   ring all-reduce      collective_ring_allreduce.cc    reduce-scatter then all-gather
//                                                        around the ring, 2(W-1) steps
//   direct all-reduce    collective_direct_allreduce.cc  each member reduces its own chunk
//                                                        from everyone, then sends it to all
//   direct reduce-scatter collective_reduce_scatter.cc   the first half of the direct one
//   direct exchange      collective_exchange.cc          every member sends a block to and
//                                                        receives one from every other (the
//                                                        all-gathers and all-to-alls)
//   direct / chain broadcast  collective_broadcast.cc    from the root to all, or passed
//                                                        along root, root+1, ... in segments
//   the policy           collective_policy.cc            which all-reduce and broadcast, by
//                                                        the caller's choice, size and W
//
// A new algorithm is a new class in a file of its own and a line in the policy; the
// descriptors carry the algorithm chosen (Descriptor::algorithm), so members that choose
// differently fail the call alike instead of deadlocking.
#ifndef PS_WORKER_COLLECTIVE_ALGORITHMS_H_
#define PS_WORKER_COLLECTIVE_ALGORITHMS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ps/collectives.h"

namespace ps {
namespace collective {

struct Op;

// An all-reduce: op->data holds this member's (prescaled) op->n elements of op->type;
// Post issues every message so that, once they all completed OK, op->data holds the
// reduction (op->rop; before the average's division and the postscale) on every member,
// the same bits everywhere. op->wire narrows the messages (float32 data only).
class AllReduceMethod {
 public:
  virtual ~AllReduceMethod() = default;
  // What the descriptors carry (kRing or kDirect).
  virtual AllReduceAlgorithm id() const = 0;
  // Sets op->plan for `segment_bytes` and posts the messages.
  virtual void Post(const std::shared_ptr<Op>& op, uint64_t segment_bytes) const = 0;
};

// The ring's segment for a buffer of n elements of wsize bytes on the wire, given the
// caller's segment_bytes: that, unless a chunk (n/W) holds fewer than kRingDepth of
// them; then the chunk / kRingDepth, but at least kRingMinSegmentBytes (never more than
// segment_bytes). Every member computes the same.
constexpr uint64_t kRingDepth = 4;
constexpr uint64_t kRingMinSegmentBytes = uint64_t{256} << 10;
uint64_t RingSegmentBytes(uint64_t n, size_t world, size_t wsize, uint64_t segment_bytes);

class RingAllReduce final : public AllReduceMethod {
 public:
  AllReduceAlgorithm id() const override { return AllReduceAlgorithm::kRing; }
  void Post(const std::shared_ptr<Op>& op, uint64_t segment_bytes) const override;
};

class DirectAllReduce final : public AllReduceMethod {
 public:
  AllReduceAlgorithm id() const override { return AllReduceAlgorithm::kDirect; }
  void Post(const std::shared_ptr<Op>& op, uint64_t segment_bytes) const override;
};

// Reduce-scatter: every member's `src` (op->n elements, prescaled) is split into the
// ring plan's W chunks; member q ends with the reduction of chunk q in op->data (combined
// in member order once every contribution arrived: the same result every run).
class DirectReduceScatter {
 public:
  static void Post(const std::shared_ptr<Op>& op, const uint8_t* src, uint64_t segment_bytes);
};

// A block of elements of the op's type (count may be 0).
struct Block {
  const uint8_t* src = nullptr;  // sent from here
  uint8_t* dst = nullptr;        // received into here
  size_t count = 0;
};

// The direct exchange: this member receives recv[q] from and sends send[q] to every
// other member q, in segments of `seg` elements (receives posted first). recv may be
// empty: the receives are then posted by the caller (the V variants, once the counts
// are known) with Op::RecvSegments.
class DirectExchange {
 public:
  static void Post(const std::shared_ptr<Op>& op, const std::vector<Block>& send,
                   const std::vector<Block>& recv, size_t seg);
};

// A broadcast of `n` elements in `buf` from the member at position `root`.
class BroadcastMethod {
 public:
  virtual ~BroadcastMethod() = default;
  virtual AllReduceAlgorithm id() const = 0;
  virtual void Post(const std::shared_ptr<Op>& op, uint8_t* buf, size_t n, size_t root,
                    size_t seg) const = 0;
};

class DirectBroadcast final : public BroadcastMethod {
 public:
  AllReduceAlgorithm id() const override { return AllReduceAlgorithm::kDirect; }
  void Post(const std::shared_ptr<Op>& op, uint8_t* buf, size_t n, size_t root,
            size_t seg) const override;
};

class ChainBroadcast final : public BroadcastMethod {
 public:
  AllReduceAlgorithm id() const override { return AllReduceAlgorithm::kRing; }
  void Post(const std::shared_ptr<Op>& op, uint8_t* buf, size_t n, size_t root,
            size_t seg) const override;
};

// The policy. `asked`: the caller's choice (kAuto: by size, direct up to
// direct_max_bytes); `bytes`: the data's size; `world`: the members.
const AllReduceMethod& ChooseAllReduce(AllReduceAlgorithm asked, uint64_t bytes, size_t world,
                                       uint64_t direct_max_bytes);
const BroadcastMethod& ChooseBroadcast(AllReduceAlgorithm asked, uint64_t bytes, size_t world,
                                       uint64_t direct_max_bytes);
// The all-reduce another member resolved (its descriptor's algorithm): Join takes part in
// the others' all-reduce with the algorithm they chose.
const AllReduceMethod& AllReduceById(uint8_t id);

}  // namespace collective
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_ALGORITHMS_H_
