// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The direct reduce-scatter (collective_algorithms.h): every member sends chunk q of its
// input to member q, which stages the W-1 contributions and combines them, in member
// order, into its own chunk once all arrived.
#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {
namespace collective {

void DirectReduceScatter::Post(const std::shared_ptr<Op>& op, const uint8_t* src,
                               uint64_t segment_bytes) {
  const size_t E = op->esize, W = op->world();
  op->plan = RingPlan::Make(op->n, W, segment_bytes / op->wsize, 1);
  const RingPlan& plan = op->plan;
  const size_t mine = plan.ChunkSize(op->pos), first = plan.ChunkOffset(op->pos);
  if (mine > 0) std::memmove(op->data, src + first * E, mine * E);
  op->staging = RawBuffer(uint64_t{W} * std::max<size_t>(mine, 1) * op->wsize);
  op->arrived.assign(plan.segs, 0);
  Op* raw = op.get();
  for (size_t q = 0; q < W; ++q) {
    if (q == op->pos) continue;
    uint8_t* slot = op->staging.get() + q * mine * op->wsize;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(op->pos, k, &begin, &len);
      if (len == 0) continue;
      uint8_t* staged = slot + (begin - first) * op->wsize;
      auto stage = [staged](const void* from, size_t b) { std::memcpy(staged, from, b); };
      // Once the W-1 contributions to segment k arrived: combined in member order, as
      // the direct all-reduce does, so that the result does not depend on arrival order.
      auto combine = [raw, k, begin, first, len, mine]() {
        MutexLock lock(&raw->mu);
        if (++raw->arrived[k] != raw->world() - 1) return;
        for (size_t from = 0; from < raw->world(); ++from) {
          if (from == raw->pos) continue;
          const uint8_t* part = raw->staging.get() + (from * mine + (begin - first)) * raw->wsize;
          raw->CombineInto(raw->data + (begin - first) * raw->esize, len)(part, len * raw->wsize);
        }
      };
      op->RecvData(op, q, k, len, stage, combine);
    }
  }
  for (size_t q = 0; q < W; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(q, k, &begin, &len);
      if (len > 0) op->SendData(op, q, k, src + begin * E, len);
    }
  }
}

}  // namespace collective
}  // namespace ps
