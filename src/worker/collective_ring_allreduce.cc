// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The ring all-reduce (collective_algorithms.h): W-1 reduce-scatter steps then W-1
// all-gather steps around the ring, each chunk in segments that are passed on as soon as
// they arrived (pipelined).
#include <algorithm>

#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {
namespace collective {

uint64_t RingSegmentBytes(uint64_t n, size_t world, size_t wsize, uint64_t segment_bytes) {
  const uint64_t chunk = (n + world - 1) / world * wsize;
  if (chunk >= kRingDepth * segment_bytes) return segment_bytes;
  // Fewer than kRingDepth segments per chunk: the 2(W-1) steps of a segment would run
  // nearly one after the other (one segment: exactly so). Smaller segments keep the
  // pipeline kRingDepth deep, down to kRingMinSegmentBytes.
  const uint64_t deep = (chunk + kRingDepth - 1) / kRingDepth;
  return std::min(segment_bytes, std::max(deep, kRingMinSegmentBytes));
}

void RingAllReduce::Post(const std::shared_ptr<Op>& op, uint64_t segment_bytes) const {
  const size_t world = op->world();
  const uint64_t seg = RingSegmentBytes(op->n, world, op->wsize, segment_bytes);
  op->plan =
      RingPlan::Make(op->n, world, std::max<uint64_t>(seg / op->wsize, 1), 2 * (world - 1));
  const RingPlan& plan = op->plan;
  const size_t E = op->esize;
  uint8_t* data = op->data;
  // Every receive first, straight into its place (reduce-scatter steps combine,
  // all-gather steps copy); each one, once it arrived, sends that segment on at the next
  // step.
  const size_t left = (op->pos + world - 1) % world, right = (op->pos + 1) % world;
  Op* raw = op.get();
  auto send_step = [raw, op, right](size_t step, size_t k) {
    size_t begin = 0, len = 0;
    raw->plan.Segment(raw->plan.SendChunk(raw->pos, step), k, &begin, &len);
    if (len > 0) {
      raw->SendData(op, right, step * raw->plan.segs + k, raw->data + begin * raw->esize, len);
    }
  };
  for (size_t step = 0; step < plan.steps(); ++step) {
    const size_t chunk = plan.RecvChunk(op->pos, step);
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(chunk, k, &begin, &len);
      if (len == 0) continue;
      uint8_t* dst = data + begin * E;
      const bool reducing = step + 1 < world;
      auto then = [raw, send_step, step, k, dst, len]() {
        if (raw->compressed() && step + 2 == raw->world()) {
          // The last reduce-scatter step: this member owns the chunk now.
          RoundToWire(reinterpret_cast<float*>(dst), len, raw->wire);
        }
        if (step + 1 < raw->plan.steps()) send_step(step + 1, k);
      };
      op->RecvData(op, left, step * plan.segs + k, len,
                   reducing ? op->CombineInto(dst, len) : op->CopyInto(dst, len), then);
    }
  }
  for (size_t k = 0; k < plan.segs; ++k) send_step(0, k);
}

}  // namespace collective
}  // namespace ps
