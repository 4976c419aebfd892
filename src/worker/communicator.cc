// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The Communicator (ps/communicator.h): each public call checks the worker's state
// through Communicator::Impl (worker/communicator_impl.h) and hands the work to the peer
// messages or the collectives engine; the blocking forms wait on the engine's ticket.
#include "ps/communicator.h"

#include <algorithm>
#include <string>

#include "worker/collective_op.h"
#include "worker/communicator_impl.h"

namespace ps {

using namespace collective;  // NOLINT: the engine's own vocabulary (worker/collective_protocol.h)

// --- Communicator::Impl ----------------------------------------------------------------------

uint32_t Communicator::Impl::rank() const {
  auto m = host_.map();
  if (!m) return 0;
  const NodeInfo* self = m->FindNode(host_.self());
  return self ? self->rank : 0;
}

int Communicator::Impl::size() const {
  auto m = host_.map();
  return m ? m->CountRole(Role::kWorker) : 0;
}

Ticket Communicator::Impl::PeerRequest(uint32_t rank, bool send, uint64_t tag, const float* in,
                                       float* out, size_t n, Callback cb) {
  auto m = host_.map();
  if (!m) return tracker_->Failed(FailedPrecondition("the worker is not started"), std::move(cb));
  const NodeInfo* peer = nullptr;
  for (const auto& node : m->nodes) {
    if (node.role == Role::kWorker && node.rank == rank) peer = &node;
  }
  if (peer == nullptr) {
    return tracker_->Failed(NotFound("no worker of rank " + std::to_string(rank) + " (there are " +
                                     std::to_string(m->CountRole(Role::kWorker)) + ")"),
                            std::move(cb));
  }
  if (peer->id == host_.self()) {
    return tracker_->Failed(InvalidArgument("a worker cannot send to or receive from itself"),
                            std::move(cb));
  }
  if (!peer->alive || host_.gone(peer->id)) {
    return tracker_->Failed(Unavailable("worker " + std::to_string(rank) + " is dead or has left"),
                            std::move(cb));
  }
  if (Status failure = host_.failure(); !failure.ok()) {
    return tracker_->Failed(failure, std::move(cb));
  }
  if (tag & kCollectiveTagBit) {
    return tracker_->Failed(InvalidArgument("tags >= 2^63 are reserved for collectives"),
                            std::move(cb));
  }
  return send ? peers_->Send(peer->id, tag, in, n, m->epoch, std::move(cb))
              : peers_->Recv(peer->id, tag, out, n, std::move(cb));
}

Ticket Communicator::Impl::RecvFromAny(uint64_t tag, float* out, size_t n, uint32_t* from,
                                       Callback cb) {
  if (!host_.map()) {
    return tracker_->Failed(FailedPrecondition("the worker is not started"), std::move(cb));
  }
  if (tag & kCollectiveTagBit) {
    return tracker_->Failed(InvalidArgument("tags >= 2^63 are reserved for collectives"),
                            std::move(cb));
  }
  auto on_source = [this, from](NodeId sender) -> Status {
    auto m = host_.map();
    const NodeInfo* node = m ? m->FindNode(sender) : nullptr;
    if (node == nullptr || node->role != Role::kWorker) {
      return Internal("a tensor from node " + std::to_string(sender) + ", not a known worker");
    }
    if (from != nullptr) *from = node->rank;
    return Status::OK();
  };
  return peers_->RecvAny(tag, out, n, std::move(on_source), std::move(cb));
}

Ticket Communicator::Impl::Collective(const std::function<Ticket(Callback)>& start, Callback cb) {
  if (Status failure = host_.failure(); !failure.ok()) {
    return tracker_->Failed(failure, std::move(cb));
  }
  return start(std::move(cb));
}

Status Communicator::Impl::Blocking(Ticket ticket, const CollectiveOptions& options) {
  const auto limit = collectives_->WaitLimit(options);
  bool in_flight = false;
  Status s = tracker_->Wait(ticket, limit, &in_flight);
  // Not reached in practice: the op ends itself by its deadline, before `limit`.
  for (int i = 0; i < 3 && in_flight; ++i) s = tracker_->Wait(ticket, limit, &in_flight);
  return s;
}

// --- Communicator ----------------------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

uint32_t Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }

Ticket Communicator::SendTo(uint32_t to, uint64_t tag, const float* data, size_t n, Callback cb) {
  return impl_->PeerRequest(to, /*send=*/true, tag, data, nullptr, n, std::move(cb));
}
Ticket Communicator::RecvFrom(uint32_t from, uint64_t tag, float* out, size_t n, Callback cb) {
  return impl_->PeerRequest(from, /*send=*/false, tag, nullptr, out, n, std::move(cb));
}
Ticket Communicator::RecvFromAny(uint64_t tag, float* out, size_t n, uint32_t* from,
                                 Callback cb) {
  return impl_->RecvFromAny(tag, out, n, from, std::move(cb));
}

Status Communicator::AllReduce(float* data, size_t n, std::chrono::milliseconds timeout) {
  return AllReduce(data, n, AllReduceOptions{}, timeout);
}
Status Communicator::AllReduce(float* data, size_t n, const AllReduceOptions& options,
                               std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) return InvalidArgument("AllReduce: negative timeout");
  AllReduceOptions o = options;
  o.timeout = std::max(timeout, std::chrono::milliseconds(1));  // 0 here: at once
  return impl_->Blocking(impl_->collectives().AllReduce(data, data, n, DataType::kFloat32, o,
                                                         nullptr),
                         o);
}

Ticket Communicator::AllReduceAsync(const void* in, void* out, size_t n, DataType type,
                                    const AllReduceOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().AllReduce(in, out, n, type, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::AllReduce(const void* in, void* out, size_t n, DataType type,
                               const AllReduceOptions& options) {
  return impl_->Blocking(AllReduceAsync(in, out, n, type, options), options);
}
Ticket Communicator::GroupedAllReduceAsync(const std::vector<CollectiveTensor>& tensors,
                                           const AllReduceOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().GroupedAllReduce(tensors, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::GroupedAllReduce(const std::vector<CollectiveTensor>& tensors,
                                      const AllReduceOptions& options) {
  return impl_->Blocking(GroupedAllReduceAsync(tensors, options), options);
}
Ticket Communicator::AllGatherAsync(const void* in, size_t n, DataType type, void* out,
                                    const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().AllGather(in, n, type, out, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::AllGather(const void* in, size_t n, DataType type, void* out,
                               const CollectiveOptions& options) {
  return impl_->Blocking(AllGatherAsync(in, n, type, out, options), options);
}
Ticket Communicator::AllGatherVAsync(const void* in, size_t n, DataType type, GatherResult* out,
                                     const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().AllGatherV(in, n, type, out, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::AllGatherV(const void* in, size_t n, DataType type, GatherResult* out,
                                const CollectiveOptions& options) {
  return impl_->Blocking(AllGatherVAsync(in, n, type, out, options), options);
}
Ticket Communicator::BroadcastAsync(void* data, size_t n, DataType type, uint32_t root,
                                    const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().Broadcast(data, n, type, root, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::Broadcast(void* data, size_t n, DataType type, uint32_t root,
                               const CollectiveOptions& options) {
  return impl_->Blocking(BroadcastAsync(data, n, type, root, options), options);
}
Ticket Communicator::AllToAllAsync(const void* in, size_t n, DataType type, void* out,
                                   const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().AllToAll(in, n, type, out, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::AllToAll(const void* in, size_t n, DataType type, void* out,
                              const CollectiveOptions& options) {
  return impl_->Blocking(AllToAllAsync(in, n, type, out, options), options);
}
Ticket Communicator::AllToAllVAsync(const void* in, const std::vector<size_t>& send_counts,
                                    DataType type, GatherResult* out,
                                    const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().AllToAllV(in, send_counts, type, out, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::AllToAllV(const void* in, const std::vector<size_t>& send_counts,
                               DataType type, GatherResult* out,
                               const CollectiveOptions& options) {
  return impl_->Blocking(AllToAllVAsync(in, send_counts, type, out, options), options);
}
Ticket Communicator::ReduceScatterAsync(const void* in, size_t n, DataType type, void* out,
                                        const AllReduceOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) {
        return impl_->collectives().ReduceScatter(in, n, type, out, options, std::move(c));
      },
      std::move(cb));
}
Status Communicator::ReduceScatter(const void* in, size_t n, DataType type, void* out,
                                   const AllReduceOptions& options) {
  return impl_->Blocking(ReduceScatterAsync(in, n, type, out, options), options);
}
size_t Communicator::ReduceScatterBlock(size_t n, size_t members, size_t position) {
  return RingPlan::Make(n, members, 1, 1).ChunkSize(position);
}
size_t Communicator::ReduceScatterOffset(size_t n, size_t members, size_t position) {
  return RingPlan::Make(n, members, 1, 1).ChunkOffset(position);
}
Ticket Communicator::CollectiveBarrierAsync(const CollectiveOptions& options, Callback cb) {
  return impl_->Collective(
      [&](Callback c) { return impl_->collectives().Barrier(options, std::move(c)); },
      std::move(cb));
}
Status Communicator::CollectiveBarrier(const CollectiveOptions& options) {
  return impl_->Blocking(CollectiveBarrierAsync(options), options);
}
Status Communicator::JoinCollectives(const CollectiveOptions& options,
                                     std::chrono::milliseconds timeout, uint32_t* last_rank) {
  if (Status failure = impl_->Failure(); !failure.ok()) return failure;
  return impl_->collectives().Join(options, timeout, last_rank);
}

Status Communicator::Wait(Ticket ticket, std::chrono::milliseconds timeout) {
  return impl_->tracker().Wait(ticket, timeout);
}

}  // namespace ps
