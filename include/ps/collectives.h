// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Collectives among workers (docs/collectives.md): their options and results. The element
// types and reduction ops they take are in ps/element_types.h; the calls themselves are
// Communicator members (ps/communicator.h, a worker's `communicator()`): AllReduce,
// GroupedAllReduce, AllGather, AllGatherV, Broadcast, AllToAll, AllToAllV, ReduceScatter
// and CollectiveBarrier, each blocking or asynchronous (a Ticket).
//
// Every collective runs among a process set: the worker ranks of
// CollectiveOptions::ranks (empty: every worker), in ascending order. Every member calls
// the same collectives in the same order with matching arguments; each collective checks
// that they did (kind, element type, op, counts, root, scale factors, name) and, when one
// member differs, fails on every member with the same kInvalidArgument naming the
// collective, the first differing rank and what differed.
#ifndef PS_COLLECTIVES_H_
#define PS_COLLECTIVES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/element_types.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

// How an all-reduce (and a broadcast) moves the buffer (docs/collectives.md). Both
// all-reduce algorithms send and receive 2(W-1)/W of the buffer per worker; they differ
// in latency.
enum class AllReduceAlgorithm : int {
  // kDirect for buffers of at most CollectiveOptions::direct_max_bytes, else kRing.
  kAuto = 0,
  // 2(W-1) steps around the ring, each a message to the next worker: pipelined,
  // bandwidth-optimal, but 2(W-1) hops one after the other. (Broadcast: a pipelined
  // chain from the root.)
  kRing = 1,
  // Two steps: every worker sends chunk q of its buffer to worker q and combines what it
  // receives into its own chunk, then sends its combined chunk to every other worker. Two
  // hops, W-1 messages at once per step: for buffers small enough that latency counts.
  // (Broadcast: the root sends the buffer to every member.)
  kDirect = 2,
};

// What every collective takes. Every member must pass the same values.
struct CollectiveOptions {
  // The process set: the worker ranks taking part, each once, this worker among them;
  // their ascending order is the ring and the order of gathered results. Empty
  // (default): every worker of the cluster.
  std::vector<uint32_t> ranks;
  // Pipelining unit: data travels as messages of at most this many bytes, so that
  // receiving, combining and forwarding overlap. At least one element and below
  // max_message_bytes; default 1 MiB (docs/collectives.md has the measurements).
  size_t segment_bytes = size_t{1} << 20;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
  // kAuto's threshold; default 256 KiB (docs/collectives.md has the measurements).
  size_t direct_max_bytes = size_t{256} << 10;
  // How long the collective may take: kTimeout after it. 0 (default): request_timeout_ms.
  // Longer than request_timeout_ms counts as request_timeout_ms.
  std::chrono::milliseconds timeout{0};
  // Named in errors (and checked equal across members when not empty).
  std::string name;
};

// An all-reduce's options (Worker::AllReduce, GroupedAllReduce, ReduceScatter).
struct AllReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  // Every member's input is multiplied by prescale before it is combined, the result by
  // postscale after (float types: in the type's own precision after a float64 product;
  // integers: rounded to nearest). Must be finite.
  double prescale = 1.0;
  double postscale = 1.0;
  // Compression on the wire for float32 buffers: kFloat16 or kBFloat16 send every
  // message at 2 bytes per value; values are combined in float32 and narrowed again for
  // each hop (Horovod's Compression.fp16). kFloat32 (default): as they are. Other data
  // types must leave it kFloat32.
  WireDType wire_dtype = WireDType::kFloat32;
};

// One tensor of a grouped all-reduce: `n` elements of `type` read from `in` and written
// to `out` (which may be `in`).
struct CollectiveTensor {
  const void* in = nullptr;
  void* out = nullptr;
  size_t n = 0;
  DataType type = DataType::kFloat32;
};

// What AllGatherV and AllToAllV produce: the bytes received, in member order, and how
// many elements came from each member (counts[i] from the member of the i-th smallest
// rank of the set). Filled in when the collective completed OK.
struct GatherResult {
  std::vector<uint8_t> data;
  std::vector<size_t> counts;
  // Element offset of member i's part in `data` (prefix sums of `counts`).
  size_t Offset(size_t i) const {
    size_t o = 0;
    for (size_t j = 0; j < i && j < counts.size(); ++j) o += counts[j];
    return o;
  }
};

}  // namespace ps

#endif  // PS_COLLECTIVES_H_
