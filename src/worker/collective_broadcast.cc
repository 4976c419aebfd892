// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Broadcasts (collective_algorithms.h): direct, the root sends every segment to every
// member; the chain, segment k goes root -> root+1 -> ... and each member passes it on as
// soon as it arrived (pipelined: the root sends the data once).
#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {
namespace collective {

void DirectBroadcast::Post(const std::shared_ptr<Op>& op, uint8_t* buf, size_t n, size_t root,
                           size_t seg) const {
  if (op->pos == root) {
    for (size_t q = 0; q < op->world(); ++q) {
      if (q != root) op->SendSegments(op, q, 0, buf, n, seg);
    }
  } else {
    op->RecvSegments(op, root, 0, buf, n, seg);
  }
}

void ChainBroadcast::Post(const std::shared_ptr<Op>& op, uint8_t* buf, size_t n, size_t root,
                          size_t seg) const {
  const size_t W = op->world(), E = op->esize;
  const size_t me = (op->pos + W - root) % W;  // place in the chain
  const size_t next = (op->pos + 1) % W, prev = (op->pos + W - 1) % W;
  Op* raw = op.get();
  for (size_t k = 0; k < Segments(n, seg); ++k) {
    const size_t len = std::min(seg, n - k * seg);
    uint8_t* at = buf + k * seg * E;
    if (me == 0) {
      op->SendData(op, next, k, at, len);
    } else {
      std::function<void()> then;
      if (me + 1 < W) then = [raw, op, next, k, at, len]() { raw->SendData(op, next, k, at, len); };
      op->RecvData(op, prev, k, len, op->CopyInto(at, len), then);
    }
  }
}

}  // namespace collective
}  // namespace ps
