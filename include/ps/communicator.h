// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Communicator: a worker's collectives and peer messages (docs/collectives.md), the
// Horovod half of LayerPS beside the Worker's parameter-server half (ps/worker.h). Every
// started Worker has one, `worker.communicator()`, over the cluster's workers: sends and
// receives between two workers by rank and tag, and the collectives among a process set
// of worker ranks (CollectiveOptions::ranks; empty: every worker).
//
// Requests: the asynchronous calls return a Ticket at once; Wait(ticket, timeout) here
// (or the Worker's Wait: one ticket space) returns its Status, or pass a Callback. The
// blocking calls return the collective's Status once it completed or failed; they never
// return while it is in flight.
//
// Buffers are used in place (sent without a copy, received straight into place) and must
// stay valid and untouched until the request completed.
//
// Thread-safety: every method may be called from several threads at once; the
// collectives of one process set must be called in the same order on every member.
// Lifetime: the Communicator lives as long as its Worker; its calls fail with
// kFailedPrecondition before Start() and after Stop().
#ifndef PS_COMMUNICATOR_H_
#define PS_COMMUNICATOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "ps/collectives.h"
#include "ps/element_types.h"
#include "ps/export.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class LAYERPS_EXPORT Communicator {
 public:
  using Callback = std::function<void(const Status&)>;

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This worker's rank among the workers, and how many there are (as of the last
  // cluster map seen; 0 and 0 before Start()).
  uint32_t rank() const;
  int size() const;

  // --- Peer messages ---------------------------------------------------------------------------
  // A tensor of n floats sent to the worker of rank `to` under `tag`, and received from
  // the worker of rank `from` under a tag into a caller buffer of exactly n floats (a
  // different size fails the receive with kInvalidArgument). Tensors of one sender and
  // tag match receives in the order both were issued; different tags never mix. A send
  // goes without a copy and completes when the receiver holds the values (delivered, or
  // kept for a receive not posted yet, within a budget of 1 GiB of such tensors per
  // receiver: past it the send fails with kResourceExhausted). Either side fails with
  // kUnavailable when the other dies, or when nothing came within request_timeout_ms.
  // The rank is a worker rank (0..num_workers()-1), not this worker's own. Tags with the
  // top bit set (>= 2^63) are reserved for collectives: SendTo refuses them.
  Ticket SendTo(uint32_t to, uint64_t tag, const float* data, size_t n, Callback cb = nullptr);
  Ticket RecvFrom(uint32_t from, uint64_t tag, float* out, size_t n, Callback cb = nullptr);
  // A receive from whichever worker sends first: completes with the first tensor sent to
  // this worker under `tag` by any worker, and writes its sender's rank to *from (when
  // `from` is not null) before the request completes. The size rule, the per-sender order
  // and the buffering budget are RecvFrom's. RecvFrom and RecvFromAny may share a tag: an
  // arriving tensor goes to the oldest RecvFrom naming its sender if one is posted, else
  // to the oldest RecvFromAny of its tag, else it is kept; a RecvFromAny takes the tensor
  // kept first under its tag, whoever sent it. Either way one sender's tensors under one
  // tag are received in the order they were sent (a gossip protocol can end with a marker
  // on the same tag: every tensor sent before it was received before it). No single
  // worker's death fails it (it waits for anyone); it fails with kUnavailable when nothing
  // came within request_timeout_ms or the scheduler is lost, and kAborted on Stop().
  // Tags >= 2^63 are refused (kInvalidArgument).
  Ticket RecvFromAny(uint64_t tag, float* out, size_t n, uint32_t* from, Callback cb = nullptr);

  // --- Collectives (docs/collectives.md) ----------------------------------------------------
  // Ring all-reduce: on return, data[0..n) holds the element-wise sum of every
  // participant's data[0..n) (in place; reduce-scatter then all-gather, each worker sending
  // 2(W-1)/W of the buffer). A collective: every participant calls it with the same n and
  // options, and the collectives of one group in the same order (a per-group sequence
  // number pairs them up); a wrong n shows up as kInvalidArgument on some participants and
  // kTimeout/kUnavailable on the others. One participant (W = 1) returns at once.
  // Blocks until done; the buffer must stay valid until the call returns, and must not be
  // touched meanwhile. Errors: kInvalidArgument (null buffer with n > 0, a rank list with a
  // duplicate, an unknown rank or without this worker, bad segment_bytes);
  // kUnavailable (a participant is or becomes dead: every survivor fails as soon as the
  // scheduler declares it dead, within heartbeat_timeout_ms, or request_timeout_ms
  // passed); kTimeout (`timeout`, when shorter than request_timeout_ms, passed);
  // kFailedPrecondition (not started); kAborted (Stop() meanwhile). After an error the
  // buffer's contents are unspecified, but nothing of the collective touches it any more.
  Status AllReduce(float* data, size_t n, std::chrono::milliseconds timeout);
  Status AllReduce(float* data, size_t n, const AllReduceOptions& options,
                   std::chrono::milliseconds timeout);

  // --- Typed collectives (ps/collectives.h, docs/collectives.md) ------------------------------
  // Each runs among options.ranks (empty: every worker) and has a blocking form and an
  // asynchronous one (a Ticket for Wait, or a callback). Every member calls the same
  // collectives in the same order with matching arguments; a member whose call differs
  // (kind, type, op, count, root, scale factors, name...) makes the collective fail on
  // every member with the same kInvalidArgument naming it and what differed. Buffers are
  // used in place (sent without a copy, received straight into place) and must stay
  // valid and untouched until the collective completed. Errors, on every member alike:
  // kInvalidArgument (bad arguments, found before anything is sent: a null buffer with
  // n > 0, a count whose byte size overflows, an unknown type or op, a rank outside the
  // set, a bad segment_bytes or timeout; or a mismatch), kFailedPrecondition (not
  // started), kUnavailable (a member is or becomes dead, or the scheduler is lost: within
  // heartbeat_timeout_ms), kTimeout (options.timeout, or request_timeout_ms, passed: the
  // message names the members never heard from), kAborted (Stop()). After an error the
  // output buffers' contents are unspecified, but nothing of the collective touches them.
  //
  // AllReduce: out[i] = op over the members of in[i] (in == out is fine), prescaled and
  // postscaled as options say; float32 may travel compressed (options.wire_dtype).
  Ticket AllReduceAsync(const void* in, void* out, size_t n, DataType type,
                        const AllReduceOptions& options, Callback cb = nullptr);
  Status AllReduce(const void* in, void* out, size_t n, DataType type,
                   const AllReduceOptions& options);
  // Many tensors in one collective: those of one type are packed into one buffer and
  // all-reduced together (few messages, one copy in and out).
  Ticket GroupedAllReduceAsync(const std::vector<CollectiveTensor>& tensors,
                               const AllReduceOptions& options, Callback cb = nullptr);
  Status GroupedAllReduce(const std::vector<CollectiveTensor>& tensors,
                          const AllReduceOptions& options);
  // AllGather: out (W * n elements) holds every member's n elements, in rank order.
  Ticket AllGatherAsync(const void* in, size_t n, DataType type, void* out,
                        const CollectiveOptions& options, Callback cb = nullptr);
  Status AllGather(const void* in, size_t n, DataType type, void* out,
                   const CollectiveOptions& options);
  // AllGatherV: each member its own n (0 allowed); *out gets every member's elements in
  // rank order and their counts.
  Ticket AllGatherVAsync(const void* in, size_t n, DataType type, GatherResult* out,
                         const CollectiveOptions& options, Callback cb = nullptr);
  Status AllGatherV(const void* in, size_t n, DataType type, GatherResult* out,
                    const CollectiveOptions& options);
  // Broadcast: every member's data[0..n) becomes the root's (a worker rank of the set).
  Ticket BroadcastAsync(void* data, size_t n, DataType type, uint32_t root,
                        const CollectiveOptions& options, Callback cb = nullptr);
  Status Broadcast(void* data, size_t n, DataType type, uint32_t root,
                   const CollectiveOptions& options);
  // AllToAll: in and out hold W blocks of n elements; block q of in goes to the member
  // of the q-th smallest rank, and block q of out comes from it. in != out.
  Ticket AllToAllAsync(const void* in, size_t n, DataType type, void* out,
                       const CollectiveOptions& options, Callback cb = nullptr);
  Status AllToAll(const void* in, size_t n, DataType type, void* out,
                  const CollectiveOptions& options);
  // AllToAllV: send_counts[q] elements of in (in order) go to the q-th member; *out gets
  // what each member sent to this one, in rank order, and the counts.
  Ticket AllToAllVAsync(const void* in, const std::vector<size_t>& send_counts, DataType type,
                        GatherResult* out, const CollectiveOptions& options, Callback cb = nullptr);
  Status AllToAllV(const void* in, const std::vector<size_t>& send_counts, DataType type,
                   GatherResult* out, const CollectiveOptions& options);
  // ReduceScatter: the all-reduce of in[0..n), of which each member keeps its block:
  // out gets ReduceScatterBlock(n, W, p) elements, from ReduceScatterOffset(n, W, p) on,
  // for the member at position p (the p-th smallest rank of the set).
  Ticket ReduceScatterAsync(const void* in, size_t n, DataType type, void* out,
                            const AllReduceOptions& options, Callback cb = nullptr);
  Status ReduceScatter(const void* in, size_t n, DataType type, void* out,
                       const AllReduceOptions& options);
  static size_t ReduceScatterBlock(size_t n, size_t members, size_t position);
  static size_t ReduceScatterOffset(size_t n, size_t members, size_t position);
  // A barrier among the set's members (worker to worker; Barrier(Group) goes through the
  // scheduler). kTimeout names the members that did not arrive.
  Ticket CollectiveBarrierAsync(const CollectiveOptions& options, Callback cb = nullptr);
  Status CollectiveBarrier(const CollectiveOptions& options);
  // Horovod's join for the collectives of options.ranks' set: this member ran out of data.
  // Until every member of the set joined, it takes part in every AllReduce (and
  // GroupedAllReduce) the others start, contributing the op's identity (zeros for sum
  // and average, whose division stays by the full set size; +inf/-inf or the type's
  // extremes for min/max; ones for product) and dropping the result; any other
  // collective started meanwhile fails on every member (kInvalidArgument naming the
  // joined ranks). Returns OK once every member joined, with *last_rank the rank that
  // joined last (ties: the highest rank); kTimeout after `timeout`; kUnavailable when a
  // member dies. Scheduler barriers and bsp/ssp tables are Join(timeout)'s (below): a
  // worker that uses both calls both (layerps.torch.join does, concurrently).
  Status JoinCollectives(const CollectiveOptions& options, std::chrono::milliseconds timeout,
                         uint32_t* last_rank = nullptr);

  // The Status of a request this communicator (or its worker) started; kTimeout if it is
  // still in flight after `timeout` (Wait again), kNotFound for an unknown or already
  // waited ticket.
  Status Wait(Ticket ticket, std::chrono::milliseconds timeout);

  // The engine's side (src/worker/communicator_impl.h), made by the Worker.
  class Impl;

 private:
  friend class Worker;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_COMMUNICATOR_H_
