// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// All-reduce (typed, compressed; the algorithm from the policy), grouped all-reduce,
// reduce-scatter and join (worker/collectives.h): checking the call, building the op,
// posting it with its algorithm (worker/collective_algorithms.h).
#include "common/mutex.h"
#include "worker/collectives.h"

#include "worker/collective_algorithms.h"
#include "worker/collective_op.h"

namespace ps {

using namespace collective;  // NOLINT: the engine's own vocabulary (worker/collective_protocol.h)

Ticket Collectives::AllReduce(const void* in, void* out, size_t n, DataType type,
                              const AllReduceOptions& options, Worker::Callback cb) {
  return StartAllReduce(in, out, n, type, options, 0, nullptr, std::move(cb));
}

Ticket Collectives::StartAllReduce(const void* in, void* out, size_t n, DataType type,
                                   const AllReduceOptions& o, uint64_t layout,
                                   std::function<void()> after, Worker::Callback cb) {
  const std::string what = Named("AllReduce", o);
  const size_t wire_elem = o.wire_dtype == WireDType::kFloat32 ? DataTypeSize(type) : 2;
  Status s = CheckCommon(what, type, o, wire_elem);
  if (s.ok()) s = CheckAllReduceArgs(what, in, out, n, type, o);
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));

  // Every member's input, prescaled, in `out`: the buffer the algorithm works in.
  const size_t bytes = n * DataTypeSize(type);
  if (in != out && bytes > 0) std::memmove(out, in, bytes);
  if (o.prescale != 1.0) reduce::Scale(type, out, n, o.prescale);

  Ticket ticket = 0;
  auto op = NewOp(what, kAllReduceKind, o, std::move(*group), type, std::move(cb), &ticket);
  op->rop = o.op;
  op->wire = static_cast<pack::WireType>(o.wire_dtype);
  op->wsize = wire_elem;
  op->data = static_cast<uint8_t*>(out);
  op->n = n;
  op->mine.op = static_cast<uint8_t>(o.op);
  op->mine.wire = static_cast<uint8_t>(o.wire_dtype);
  op->mine.count = n;
  op->mine.layout = layout;
  op->mine.prescale = o.prescale;
  op->mine.postscale = o.postscale;
  const collective::AllReduceMethod& method =
      collective::ChooseAllReduce(o.algorithm, bytes, op->world(), o.direct_max_bytes);
  op->mine.algorithm = static_cast<uint8_t>(method.id());
  const size_t world = op->world();
  const DataType t = type;
  const ReduceOp rop = o.op;
  const double postscale = o.postscale;
  op->finish = [out, n, t, rop, postscale, world, after]() {
    if (rop == ReduceOp::kAverage) reduce::Divide(t, out, n, world);
    if (postscale != 1.0) reduce::Scale(t, out, n, postscale);
    if (after) after();
    return Status::OK();
  };
  if (world > 1 && n > 0) method.Post(op, o.segment_bytes);
  Launch(op);
  return ticket;
}

Ticket Collectives::GroupedAllReduce(const std::vector<CollectiveTensor>& tensors,
                                     const AllReduceOptions& o, Worker::Callback cb) {
  const std::string what = Named("GroupedAllReduce", o);
  // Checked whole before anything is sent.
  uint64_t layout = 1469598103934665603ull;
  std::map<DataType, std::vector<size_t>> by_type;  // tensors of each type, in order
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CollectiveTensor& t = tensors[i];
    const std::string which = what + " tensor " + std::to_string(i);
    Status s = CheckCommon(which, t.type, o, o.wire_dtype == WireDType::kFloat32 ? DataTypeSize(t.type) : 2);
    if (s.ok()) s = CheckAllReduceArgs(which, t.in, t.out, t.n, t.type, o);
    if (!s.ok()) return tracker_->Failed(s, std::move(cb));
    by_type[t.type].push_back(i);
    for (uint64_t v : {static_cast<uint64_t>(t.type), static_cast<uint64_t>(t.n)}) {
      layout = (layout ^ v) * 1099511628211ull;
    }
  }
  if (!map_()) return tracker_->Failed(FailedPrecondition(what + ": the worker is not started"), std::move(cb));
  layout |= 1;  // never 0 (0: not grouped)

  // One all-reduce per element type, each over the type's tensors packed in one buffer.
  // The call's error is chosen from all of theirs alike on every member (not the first
  // to arrive, which differs between members): the most telling code (a mismatch, then
  // a death, then the deadline...), then the all-reduce of the smallest type.
  struct Pending {
    Mutex mu;
    size_t left GUARDED_BY(mu) = 0;
    Status chosen GUARDED_BY(mu);
    int chosen_rank GUARDED_BY(mu) = 0;  // of `chosen`
    size_t chosen_index GUARDED_BY(mu) = 0;
    Ticket ticket = 0;  // set before any callback can run
  };
  auto rank_of = [](const Status& s) {
    switch (s.code()) {
      case StatusCode::kOk:
        return 0;
      case StatusCode::kInvalidArgument:
        return 5;  // a mismatch (or bad ranks)
      case StatusCode::kUnavailable:
        return 4;  // a member died
      case StatusCode::kTimeout:
        return 3;
      case StatusCode::kAborted:
        return 2;
      default:
        return 1;
    }
  };
  auto pending = std::make_shared<Pending>();
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  req->deadline_ms = NowMillis() + WaitLimit(o).count() + 10 * kRequestGraceMs;
  Part p;
  p.server = kUnassignedId;
  req->parts.push_back(p);
  {
    MutexLock lock(&pending->mu);  // not shared yet; taken for the analysis' sake
    pending->left = by_type.size() + 1;  // + this call's hold
  }
  pending->ticket = tracker_->Expect(req);
  RequestTracker* tracker = tracker_;
  auto one_done = [pending, tracker, rank_of](size_t index, const Status& s) {
    bool last = false;
    Status result;
    {
      MutexLock lock(&pending->mu);
      const int r = rank_of(s);
      if (r > pending->chosen_rank ||
          (r == pending->chosen_rank && r > 0 && index < pending->chosen_index)) {
        pending->chosen = s;
        pending->chosen_rank = r;
        pending->chosen_index = index;
      }
      last = --pending->left == 0;
      result = pending->chosen;
    }
    if (!last) return;
    if (result.ok()) {
      tracker->Deliver(pending->ticket, 0, Status::OK(), nullptr, 0);
    } else {
      tracker->Cancel(pending->ticket, result);
    }
  };
  size_t index = 0;
  for (auto& kv : by_type) {
    const size_t this_index = index++;
    const DataType type = kv.first;
    const size_t E = DataTypeSize(type);
    size_t total = 0;
    for (size_t i : kv.second) total += tensors[i].n;
    auto packed = std::shared_ptr<uint8_t>(RawBuffer(uint64_t{total} * E));
    size_t at = 0;
    std::vector<std::pair<void*, size_t>> outs;
    for (size_t i : kv.second) {
      if (tensors[i].n > 0) std::memcpy(packed.get() + at * E, tensors[i].in, tensors[i].n * E);
      outs.emplace_back(tensors[i].out, tensors[i].n);
      at += tensors[i].n;
    }
    auto unpack = [packed, outs, E]() {
      size_t at = 0;
      for (const auto& o : outs) {
        if (o.second > 0) std::memcpy(o.first, packed.get() + at * E, o.second * E);
        at += o.second;
      }
    };
    StartAllReduce(packed.get(), packed.get(), total, type, o, layout, unpack,
                   [one_done, this_index](const Status& s) { one_done(this_index, s); });
  }
  one_done(by_type.size(), Status::OK());  // this call's hold
  return pending->ticket;
}


Ticket Collectives::ReduceScatter(const void* in, size_t n, DataType type, void* out,
                                  const AllReduceOptions& o, Worker::Callback cb) {
  const std::string what = Named("ReduceScatter", o);
  const size_t wire_elem = o.wire_dtype == WireDType::kFloat32 ? DataTypeSize(type) : 2;
  Status s = CheckCommon(what, type, o, wire_elem);
  if (s.ok()) s = CheckAllReduceArgs(what, in, out, n, type, o);
  if (!s.ok()) return tracker_->Failed(s, std::move(cb));
  StatusOr<Group> group = ResolveGroup(what, o.ranks);
  if (!group.ok()) return tracker_->Failed(group.status(), std::move(cb));
  Ticket ticket = 0;
  auto op = NewOp(what, kReduceScatterKind, o, std::move(*group), type, std::move(cb), &ticket);
  const size_t E = op->esize, W = op->world();
  op->rop = o.op;
  op->wire = static_cast<pack::WireType>(o.wire_dtype);
  op->wsize = wire_elem;
  op->mine.op = static_cast<uint8_t>(o.op);
  op->mine.wire = static_cast<uint8_t>(o.wire_dtype);
  op->mine.count = n;
  op->mine.prescale = o.prescale;
  op->mine.postscale = o.postscale;
  // The blocks sent: the input itself, or a prescaled copy of it.
  const auto* src = static_cast<const uint8_t*>(in);
  std::shared_ptr<uint8_t> scaled;
  if (o.prescale != 1.0 && n > 0) {
    scaled = RawBuffer(uint64_t{n} * E);
    std::memcpy(scaled.get(), in, n * E);
    reduce::Scale(type, scaled.get(), n, o.prescale);
    src = scaled.get();
  }
  op->data = static_cast<uint8_t*>(out);
  op->n = n;
  collective::DirectReduceScatter::Post(op, src, o.segment_bytes);
  const size_t mine = op->plan.ChunkSize(op->pos);
  Op* raw = op.get();
  const ReduceOp rop = o.op;
  const double postscale = o.postscale;
  op->finish = [raw, scaled, mine, rop, postscale, W]() {
    if (rop == ReduceOp::kAverage) reduce::Divide(raw->type, raw->data, mine, W);
    if (postscale != 1.0) reduce::Scale(raw->type, raw->data, mine, postscale);
    return Status::OK();
  };
  Launch(op);
  return ticket;
}

Status Collectives::Join(const CollectiveOptions& o, std::chrono::milliseconds timeout,
                         uint32_t* last_rank) {
  const std::string what = Named("Join", o);
  if (timeout.count() < 0) return InvalidArgument(what + ": negative timeout");
  Status s = CheckCommon(what, DataType::kUInt8, o, 1);
  if (!s.ok()) return s;
  const int64_t deadline = NowMillis() + std::min<int64_t>(timeout.count(), int64_t{1} << 40);
  int64_t joined_at = -1;
  for (;;) {
    StatusOr<Group> group = ResolveGroup(what, o.ranks);
    if (!group.ok()) return group.status();
    const Group members = *group;
    // A round: a Join collective at the set's next number. The others' calls at that
    // number say what to do: all Join (done), an AllReduce (take part with the identity),
    // anything else (they fail; go on to the next round).
    CollectiveOptions round = o;
    round.timeout = std::chrono::milliseconds(std::max<int64_t>(deadline - NowMillis(), 1));
    Ticket ticket = 0;
    auto op = NewOp(what, kJoinKind, round, *group, DataType::kUInt8, nullptr, &ticket, 0,
                    /*uncapped=*/true);
    if (joined_at < 0) joined_at = static_cast<int64_t>(op->seq);
    op->mine.root = static_cast<uint32_t>(joined_at);
    Launch(op);
    Status r = tracker_->Wait(ticket, std::chrono::milliseconds(round.timeout.count() + 4 * kRequestGraceMs));
    std::vector<Descriptor> all;
    {
      MutexLock lock(&op->mu);
      all = op->descs;
    }
    all[op->pos] = op->mine;
    bool all_joined = false;
    size_t ref = 0;
    const std::string error = CheckDescriptors(all, op->ranks, &all_joined, &ref);
    // The deadline, a death, Stop: over. (A death leaves the descriptors incomplete, which
    // CheckDescriptors may call a mismatch: only kInvalidArgument is one.)
    if (!r.ok() && (error.empty() || r.code() != StatusCode::kInvalidArgument)) return r;
    if (!error.empty()) continue;  // the others' call failed on every member
    if (all_joined) {
      if (last_rank != nullptr) {
        size_t last = 0;
        for (size_t q = 1; q < all.size(); ++q) {
          if (all[q].root >= all[last].root) last = q;
        }
        *last_rank = op->ranks[last];
      }
      return Status::OK();
    }
    // The others all-reduce: this member sends the op's identity and drops the result.
    const Descriptor d = all[ref];
    AllReduceOptions ar;
    ar.ranks = o.ranks;
    ar.name = Name(d);  // the others' (as far as the descriptor carries it)
    ar.segment_bytes = d.segment;
    ar.timeout = std::chrono::milliseconds(std::max<int64_t>(deadline - NowMillis(), 1));
    ar.op = static_cast<ReduceOp>(d.op);
    ar.wire_dtype = static_cast<WireDType>(d.wire);
    const DataType type = static_cast<DataType>(d.dtype);
    const size_t E = DataTypeSize(type);
    if (MulOverflows(d.count, E) || d.count * E > kMaxAnnouncedBytes) continue;
    Ticket part = 0;
    // Named as the others name theirs: an error (a death) reads the same on every member.
    auto data_op = NewOp(Named("AllReduce", ar), kAllReduceKind, ar, members, type, nullptr, &part,
                         op->tag_base, /*uncapped=*/true);
    auto identity = RawBuffer(d.count * E);
    reduce::FillIdentity(type, ar.op, identity.get(), d.count);
    data_op->staging_keep = identity;
    data_op->rop = ar.op;
    data_op->wire = static_cast<pack::WireType>(d.wire);
    data_op->wsize = d.wire != 0 ? 2 : E;
    data_op->data = identity.get();
    data_op->n = d.count;
    {
      MutexLock lock(&data_op->mu);
      std::fill(data_op->have.begin(), data_op->have.end(), 1);  // the descriptors are in
    }
    if (data_op->world() > 1 && d.count > 0) {
      collective::AllReduceById(d.algorithm).Post(data_op, ar.segment_bytes);
    }
    Launch(data_op, /*descriptors=*/false);
    Status p = tracker_->Wait(part, std::chrono::milliseconds(ar.timeout.count() + 4 * kRequestGraceMs));
    if (!p.ok() && p.code() != StatusCode::kInvalidArgument) return p;
  }
}


}  // namespace ps
