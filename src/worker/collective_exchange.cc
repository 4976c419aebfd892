// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The direct exchange (collective_algorithms.h): W-1 blocks out and W-1 in at once, the
// same bytes as a ring; the all-gathers and all-to-alls are this with different blocks.
#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {
namespace collective {

void DirectExchange::Post(const std::shared_ptr<Op>& op, const std::vector<Block>& send,
                          const std::vector<Block>& recv, size_t seg) {
  for (size_t q = 0; q < recv.size(); ++q) {
    if (q != op->pos) op->RecvSegments(op, q, 0, recv[q].dst, recv[q].count, seg);
  }
  for (size_t q = 0; q < send.size(); ++q) {
    if (q != op->pos) op->SendSegments(op, q, 0, send[q].src, send[q].count, seg);
  }
}

}  // namespace collective
}  // namespace ps
