// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The direct all-reduce (collective_algorithms.h): phase 0, member q's contribution to this
// member's chunk lands in q's staging slot; once the last of the W-1 arrived they are
// combined into this member's own part in member order (not arrival order: the float
// result is the same in every run) and the result goes to everyone. Phase 1: member q's
// combined chunk, copied into place.
#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {
namespace collective {

void DirectAllReduce::Post(const std::shared_ptr<Op>& op, uint64_t segment_bytes) const {
  const size_t world = op->world();
  op->plan = RingPlan::Make(op->n, world, segment_bytes / op->wsize, 2);
  const RingPlan& plan = op->plan;
  const size_t E = op->esize;
  uint8_t* data = op->data;
  const size_t mine = plan.ChunkSize(op->pos), first = plan.ChunkOffset(op->pos);
  op->staging = RawBuffer(uint64_t{world - 1} * mine * op->wsize);
  op->arrived.assign(plan.segs, 0);
  Op* raw = op.get();
  for (size_t q = 0; q < world; ++q) {
    if (q == op->pos) continue;
    uint8_t* slot = op->staging.get() + (q < op->pos ? q : q - 1) * mine * op->wsize;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(op->pos, k, &begin, &len);
      if (len > 0) {
        uint8_t* staged = slot + (begin - first) * op->wsize;
        auto stage = [staged](const void* src, size_t b) { std::memcpy(staged, src, b); };
        auto combine = [raw, op, k, begin, len, first, mine]() {
          {
            MutexLock lock(&raw->mu);
            if (++raw->arrived[k] != raw->world() - 1) return;
            for (size_t from = 0; from + 1 < raw->world(); ++from) {
              const uint8_t* part =
                  raw->staging.get() + (from * mine + (begin - first)) * raw->wsize;
              raw->CombineInto(raw->data + begin * raw->esize, len)(part, len * raw->wsize);
            }
          }
          if (raw->compressed()) {
            RoundToWire(reinterpret_cast<float*>(raw->data + begin * raw->esize), len, raw->wire);
          }
          for (size_t to = 0; to < raw->world(); ++to) {
            if (to != raw->pos) {
              raw->SendData(op, to, raw->plan.segs + k, raw->data + begin * raw->esize, len);
            }
          }
        };
        op->RecvData(op, q, k, len, stage, combine);
      }
      plan.Segment(q, k, &begin, &len);
      if (len > 0) op->RecvData(op, q, plan.segs + k, len, op->CopyInto(data + begin * E, len), nullptr);
    }
  }
  for (size_t q = 0; q < world; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(q, k, &begin, &len);
      if (len > 0) op->SendData(op, q, k, data + begin * E, len);
    }
  }
}

}  // namespace collective
}  // namespace ps
