// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Which algorithm runs a collective (collective_algorithms.h). Every member decides alone
// from what every member knows alike (the caller's choice, the size, W), and the
// descriptors compare the outcome.
#include "worker/collective_algorithms.h"

namespace ps {
namespace collective {
namespace {

const RingAllReduce kRing;
const DirectAllReduce kDirect;
const DirectBroadcast kDirectBroadcast;
const ChainBroadcast kChainBroadcast;

// Direct when asked, or by default up to direct_max_bytes: one round trip instead of
// 2(W-1) steps, for the latency-bound sizes.
bool Direct(AllReduceAlgorithm asked, uint64_t bytes, uint64_t direct_max_bytes) {
  return asked == AllReduceAlgorithm::kDirect ||
         (asked == AllReduceAlgorithm::kAuto && bytes <= direct_max_bytes);
}

}  // namespace

const AllReduceMethod& ChooseAllReduce(AllReduceAlgorithm asked, uint64_t bytes, size_t world,
                                       uint64_t direct_max_bytes) {
  (void)world;
  if (Direct(asked, bytes, direct_max_bytes)) return kDirect;
  return kRing;
}

const BroadcastMethod& ChooseBroadcast(AllReduceAlgorithm asked, uint64_t bytes, size_t world,
                                       uint64_t direct_max_bytes) {
  (void)world;
  if (Direct(asked, bytes, direct_max_bytes)) return kDirectBroadcast;
  return kChainBroadcast;
}

const AllReduceMethod& AllReduceById(uint8_t id) {
  return id == static_cast<uint8_t>(AllReduceAlgorithm::kDirect)
             ? static_cast<const AllReduceMethod&>(kDirect)
             : static_cast<const AllReduceMethod&>(kRing);
}

}  // namespace collective
}  // namespace ps
