// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// All-gather(v), broadcast, all-to-all(v) and the barrier (worker/collectives.h): checking
// the call, building the op, posting it with its algorithm (the direct exchange, or the
// broadcast the policy picks; worker/collective_algorithms.h).
#include "common/mutex.h"
#include "worker/collectives.h"

#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {

using namespace collective;  // NOLINT: the engine's own vocabulary (worker/collective_protocol.h)

namespace {

// The V variants (AllGatherV, AllToAllV): once every member's descriptor announced its
// length (`count_of` reads it), *out is sized for all the parts and every member's part
// is received straight into its place, in member order (data that arrives earlier waits
// in the peer channel). This member's own part (`own`, `own_count` elements) is copied
// in then too; it must stay valid until the collective completed, as every input does.
void GatherParts(const std::shared_ptr<collective::Op>& op, const void* own, size_t own_count,
                 size_t seg, uint64_t (*count_of)(const Descriptor&), GatherResult* out) {
  const size_t E = op->esize, W = op->world();
  struct Counts {
    Mutex mu;
    std::vector<size_t> of GUARDED_BY(mu);  // elements from each member, by position
    size_t known GUARDED_BY(mu) = 0;  // descriptors in (the own count is known from the start)
  };
  auto counts = std::make_shared<Counts>();
  {
    MutexLock lock(&counts->mu);  // not shared yet; taken for the analysis' sake
    counts->of.assign(W, 0);
    counts->of[op->pos] = own_count;
  }
  collective::Op* raw = op.get();
  // Runs once, when the last length is known (or at once alone): sizes *out, copies the
  // own part in and posts every receive into place.
  auto post_all = [raw, op, counts, seg, E, out, own]() {
    std::vector<size_t> of;
    {
      MutexLock lock(&counts->mu);  // every count is in: nothing writes them any more
      of = counts->of;
    }
    size_t total = 0;
    for (size_t c : of) total += c;
    out->data.resize(total * E);
    out->counts = of;
    uint8_t* base = out->data.data();
    for (size_t q = 0; q < of.size(); ++q) {
      const size_t count = of[q];
      if (q == raw->pos) {
        if (count > 0) std::memcpy(base, own, count * E);
      } else {
        raw->RecvSegments(op, q, 0, base, count, seg);
      }
      base += count * E;
    }
  };
  op->on_descriptor = [raw, counts, seg, E, count_of, post_all, W](size_t q) {
    uint64_t count = 0;
    {
      MutexLock lock(&raw->mu);
      count = count_of(raw->descs[q]);
    }
    if (MulOverflows(count, E) || count * E > kMaxAnnouncedBytes ||
        Segments(count, seg) >= kMaxDataMessages) {
      raw->Fail(InvalidArgument(raw->what + ": rank " + std::to_string(raw->ranks[q]) +
                                " announced " + std::to_string(count) + " elements"),
                1, false);
      return;
    }
    bool all = false;
    {
      MutexLock lock(&counts->mu);
      counts->of[q] = count;
      all = ++counts->known == W - 1;
    }
    // The last descriptor's own completion is still outstanding: the op cannot finish
    // before these receives are posted.
    if (all) post_all();
  };
  if (W == 1) post_all();
}

}  // namespace

Ticket Collectives::AllGather(const void* in, size_t n, DataType type, void* out,
                              const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("AllGather", o);
  Status s = CheckCommon(what, type, o, DataTypeSize(type));
  if (s.ok() && (in == nullptr || out == nullptr) && n > 0) s = InvalidArgument(what + ": null buffer");
  if (s.ok() && (MulOverflows(n, DataTypeSize(type)) || n * DataTypeSize(type) > (~size_t{0} >> 8))) {
    s = InvalidArgument(what + ": " + std::to_string(n) + " elements overflow the size");
  }
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  Ticket ticket = 0;
  auto op = NewOp(what, kAllGatherKind, o, std::move(*group), type, std::move(cb), &ticket);
  op->mine.count = n;
  const size_t E = op->esize, W = op->world();
  uint8_t* dst = static_cast<uint8_t*>(out);
  const auto* src = static_cast<const uint8_t*>(in);
  if (n > 0 && src != dst + op->pos * n * E) std::memmove(dst + op->pos * n * E, src, n * E);
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  const size_t segs = Segments(n, seg);
  if (segs >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  }
  if (segs < kMaxDataMessages) {
    // Every member's block to every other: this member's own, at its place in `out`.
    std::vector<collective::Block> send(W), recv(W);
    for (size_t q = 0; q < W; ++q) {
      send[q] = {dst + op->pos * n * E, nullptr, n};
      recv[q] = {nullptr, dst + q * n * E, n};
    }
    collective::DirectExchange::Post(op, send, recv, seg);
  }
  Launch(op);
  return ticket;
}

Ticket Collectives::AllGatherV(const void* in, size_t n, DataType type, GatherResult* out,
                               const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("AllGatherV", o);
  Status s = CheckCommon(what, type, o, DataTypeSize(type));
  if (s.ok() && ((in == nullptr && n > 0) || out == nullptr)) s = InvalidArgument(what + ": null buffer");
  if (s.ok() && (MulOverflows(n, DataTypeSize(type)) || n * DataTypeSize(type) > kMaxAnnouncedBytes)) {
    s = InvalidArgument(what + ": " + std::to_string(n) + " elements exceed 2^40 bytes");
  }
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  Ticket ticket = 0;
  auto op = NewOp(what, kAllGatherVKind, o, std::move(*group), type, std::move(cb), &ticket);
  op->mine.count = n;
  const size_t E = op->esize, W = op->world();
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  // Member q's part is posted once its descriptor says how long it is.
  GatherParts(op, in, n, seg, [](const Descriptor& d) { return d.count; }, out);
  const size_t segs = Segments(n, seg);
  if (segs >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  }
  if (segs < kMaxDataMessages) {
    // Sends only: the receives wait for the counts (GatherParts).
    const std::vector<collective::Block> send(W, {static_cast<const uint8_t*>(in), nullptr, n});
    collective::DirectExchange::Post(op, send, {}, seg);
  }
  Launch(op);
  return ticket;
}

Ticket Collectives::Broadcast(void* data, size_t n, DataType type, uint32_t root,
                              const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("Broadcast", o);
  Status s = CheckCommon(what, type, o, DataTypeSize(type));
  if (s.ok() && data == nullptr && n > 0) s = InvalidArgument(what + ": null buffer");
  if (s.ok() && (MulOverflows(n, DataTypeSize(type)) || n * DataTypeSize(type) > (~size_t{0} >> 1))) {
    s = InvalidArgument(what + ": " + std::to_string(n) + " elements overflow the size");
  }
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  auto root_at = std::find(group->ranks.begin(), group->ranks.end(), root);
  if (root_at == group->ranks.end()) {
    return tracker_->Failed(InvalidArgument(what + ": root rank " + std::to_string(root) +
                                            " is not in the process set " + RankList(group->ranks)),
                            std::move(cb));
  }
  const size_t root_pos = static_cast<size_t>(root_at - group->ranks.begin());
  Ticket ticket = 0;
  auto op = NewOp(what, kBroadcastKind, o, std::move(*group), type, std::move(cb), &ticket);
  const size_t E = op->esize, W = op->world();
  op->mine.count = n;
  op->mine.root = root;
  const collective::BroadcastMethod& method =
      collective::ChooseBroadcast(o.algorithm, uint64_t{n} * E, W, o.direct_max_bytes);
  op->mine.algorithm = static_cast<uint8_t>(method.id());
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  if (Segments(n, seg) >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  } else {
    method.Post(op, static_cast<uint8_t*>(data), n, root_pos, seg);
  }
  Launch(op);
  return ticket;
}

Ticket Collectives::AllToAll(const void* in, size_t n, DataType type, void* out,
                             const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("AllToAll", o);
  Status s = CheckCommon(what, type, o, DataTypeSize(type));
  if (s.ok() && (in == nullptr || out == nullptr) && n > 0) s = InvalidArgument(what + ": null buffer");
  if (s.ok() && in == out && n > 0) s = InvalidArgument(what + ": in and out must not be the same buffer");
  if (s.ok() && (MulOverflows(n, DataTypeSize(type)) || n * DataTypeSize(type) > (~size_t{0} >> 8))) {
    s = InvalidArgument(what + ": " + std::to_string(n) + " elements overflow the size");
  }
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  Ticket ticket = 0;
  auto op = NewOp(what, kAllToAllKind, o, std::move(*group), type, std::move(cb), &ticket);
  op->mine.count = n;
  const size_t E = op->esize, W = op->world();
  const auto* src = static_cast<const uint8_t*>(in);
  uint8_t* dst = static_cast<uint8_t*>(out);
  if (n > 0) std::memcpy(dst + op->pos * n * E, src + op->pos * n * E, n * E);
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  const size_t segs = Segments(n, seg);
  if (segs >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  }
  if (segs < kMaxDataMessages) {
    // Block q of the input to member q; member q's block for this one into place q.
    std::vector<collective::Block> send(W), recv(W);
    for (size_t q = 0; q < W; ++q) {
      send[q] = {src + q * n * E, nullptr, n};
      recv[q] = {nullptr, dst + q * n * E, n};
    }
    collective::DirectExchange::Post(op, send, recv, seg);
  }
  Launch(op);
  return ticket;
}

Ticket Collectives::AllToAllV(const void* in, const std::vector<size_t>& send_counts, DataType type,
                              GatherResult* out, const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("AllToAllV", o);
  Status s = CheckCommon(what, type, o, DataTypeSize(type));
  uint64_t total = 0;
  for (size_t c : send_counts) {
    if (total + c < total) total = ~uint64_t{0};
    else total += c;
  }
  if (s.ok() && ((in == nullptr && total > 0) || out == nullptr)) s = InvalidArgument(what + ": null buffer");
  if (s.ok() && (MulOverflows(total, DataTypeSize(type)) || total * DataTypeSize(type) > kMaxAnnouncedBytes)) {
    s = InvalidArgument(what + ": the send counts exceed 2^40 bytes");
  }
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  if (send_counts.size() != group->members.size()) {
    return tracker_->Failed(InvalidArgument(what + ": " + std::to_string(send_counts.size()) +
                                            " send counts for a process set of " +
                                            std::to_string(group->members.size())),
                            std::move(cb));
  }
  Ticket ticket = 0;
  auto op = NewOp(what, kAllToAllVKind, o, std::move(*group), type, std::move(cb), &ticket);
  op->mine.count = total;
  op->send_counts = send_counts;
  const size_t E = op->esize, W = op->world();
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  const auto* src = static_cast<const uint8_t*>(in);
  std::vector<size_t> offset(W, 0);
  for (size_t q = 1; q < W; ++q) offset[q] = offset[q - 1] + send_counts[q - 1];
  // What member q sends this one (its descriptor's aux) is posted once that arrived.
  GatherParts(op, src + offset[op->pos] * E, send_counts[op->pos], seg,
              [](const Descriptor& d) { return d.aux; }, out);
  std::vector<collective::Block> send(W);
  bool too_many = false;
  for (size_t q = 0; q < W; ++q) {
    send[q] = {src + offset[q] * E, nullptr, send_counts[q]};
    too_many |= q != op->pos && Segments(send_counts[q], seg) >= kMaxDataMessages;
  }
  if (too_many) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  } else {
    collective::DirectExchange::Post(op, send, {}, seg);  // receives: GatherParts
  }
  Launch(op);
  return ticket;
}


Ticket Collectives::Barrier(const CollectiveOptions& o, Worker::Callback cb) {
  const std::string what = Named("Barrier", o);
  Status s = CheckCommon(what, DataType::kUInt8, o, 1);
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  Ticket ticket = 0;
  auto op = NewOp(what, kBarrierKind, o, std::move(*group), DataType::kUInt8, std::move(cb), &ticket);
  Launch(op);
  return ticket;
}


}  // namespace ps
