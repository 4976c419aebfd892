// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The collectives engine: ring plans, process sets, ops and their descriptors, completion,
// deaths and deadlines (worker/collectives.h says how it all works).
#include "worker/collectives.h"

#include "worker/collective_op.h"

namespace ps {

using namespace collective;  // NOLINT: the engine's own vocabulary (worker/collective_protocol.h)

RingPlan RingPlan::Make(size_t n, size_t world, size_t segment_elems, size_t steps) {
  RingPlan p;
  p.n = n;
  p.world = std::max<size_t>(world, 1);
  p.segment = std::max<size_t>(segment_elems, 1);
  const size_t largest = (n + p.world - 1) / p.world;
  steps = std::max<size_t>(steps, 1);
  // Every message of one collective needs its own index below kMaxDataMessages: past
  // that, segments grow.
  const size_t max_segs = kMaxDataMessages / steps;
  if ((largest + p.segment - 1) / p.segment > max_segs)
    p.segment = (largest + max_segs - 1) / max_segs;
  p.segs = (largest + p.segment - 1) / p.segment;
  return p;
}

void RingPlan::Segment(size_t c, size_t k, size_t* begin, size_t* len) const {
  const size_t size = ChunkSize(c);
  const size_t from = k * segment;
  *begin = ChunkOffset(c) + std::min(from, size);
  *len = from >= size ? 0 : std::min(segment, size - from);
}

size_t RingPlan::SendChunk(size_t p, size_t step) const {
  const int64_t q = static_cast<int64_t>(p), t = static_cast<int64_t>(step);
  const int64_t w1 = static_cast<int64_t>(world) - 1;
  return step < world - 1 ? Mod(q - t, world) : Mod(q + 1 - (t - w1), world);
}

size_t RingPlan::RecvChunk(size_t p, size_t step) const {
  const int64_t q = static_cast<int64_t>(p), t = static_cast<int64_t>(step);
  const int64_t w1 = static_cast<int64_t>(world) - 1;
  return step < world - 1 ? Mod(q - t - 1, world) : Mod(q - (t - w1), world);
}

// One running collective. Shared by the caller and the callbacks of its messages.

// --- Setup ---------------------------------------------------------------------------------

StatusOr<Collectives::Group> Collectives::ResolveGroup(const std::string& what,
                                                       const std::vector<uint32_t>& asked) const {
  auto map = map_();
  if (!map) return FailedPrecondition(what + ": the worker is not started");
  const NodeId self = self_();
  std::vector<uint32_t> ranks = asked;
  std::map<uint32_t, const NodeInfo*> workers;
  for (const auto& node : map->nodes) {
    if (node.role == Role::kWorker) workers[node.rank] = &node;
  }
  if (ranks.empty()) {
    for (const auto& kv : workers) ranks.push_back(kv.first);
  }
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return InvalidArgument(what + ": process set " + RankList(asked) + " names a worker twice");
  }
  Group g;
  g.epoch = map->epoch;
  bool self_in = false;
  for (uint32_t r : ranks) {
    auto it = workers.find(r);
    if (it == workers.end()) {
      return InvalidArgument(what + ": no worker of rank " + std::to_string(r) + " (there are " +
                             std::to_string(workers.size()) + ")");
    }
    if (it->second->id == self) {
      self_in = true;
      g.pos = g.members.size();
    }
    g.members.push_back(it->second->id);
    g.ranks.push_back(r);
  }
  if (!self_in) {
    return InvalidArgument(what + ": process set " + RankList(asked) +
                           " does not include this worker");
  }
  // A dead member is not refused here: NewOp numbers the op and fails it as a death, so
  // that a survivor calling after the death reports what one in flight reports.
  return g;
}

Status Collectives::CheckCommon(const std::string& what, DataType type, const CollectiveOptions& o,
                                size_t wire_elem) const {
  if (!map_()) return FailedPrecondition(what + ": the worker is not started");
  if (DataTypeSize(type) == 0) {
    return InvalidArgument(what + ": unknown data type " + std::to_string(static_cast<int>(type)));
  }
  if (o.timeout.count() < 0) return InvalidArgument(what + ": negative timeout");
  if (o.segment_bytes < wire_elem) {
    return InvalidArgument(what + ": segment_bytes must be at least one element (" +
                           std::to_string(wire_elem) + " bytes), not " +
                           std::to_string(o.segment_bytes));
  }
  if (o.segment_bytes > static_cast<uint64_t>(options_.max_message_bytes) ||
      o.segment_bytes + sizeof(Header) > static_cast<uint64_t>(options_.max_message_bytes)) {
    return InvalidArgument(what + ": segment_bytes=" + std::to_string(o.segment_bytes) +
                           " exceeds max_message_bytes=" +
                           std::to_string(options_.max_message_bytes));
  }
  return Status::OK();
}

std::chrono::milliseconds Collectives::WaitLimit(const CollectiveOptions& o) const {
  const int64_t limit = o.timeout.count() > 0
                            ? std::min<int64_t>(o.timeout.count(), options_.request_timeout_ms)
                            : options_.request_timeout_ms;
  return std::chrono::milliseconds(limit + 4 * kRequestGraceMs + 5000);
}

std::shared_ptr<Collectives::Op> Collectives::NewOp(const std::string& what, uint8_t kind,
                                                    const CollectiveOptions& o, Group group,
                                                    DataType type, Worker::Callback cb,
                                                    Ticket* ticket, uint64_t tag_base,
                                                    bool uncapped) {
  auto op = std::make_shared<Op>();
  op->host = this;
  op->what = what;
  op->type = type;
  op->esize = DataTypeSize(type);
  op->wsize = op->esize;
  op->members = std::move(group.members);
  op->ranks = std::move(group.ranks);
  op->pos = group.pos;
  op->epoch = group.epoch;
  op->limited_by_request_timeout =
      o.timeout.count() == 0 || (!uncapped && o.timeout.count() >= options_.request_timeout_ms);
  op->limit_ms = o.timeout.count() > 0
                     ? (uncapped ? o.timeout.count()
                                 : std::min<int64_t>(o.timeout.count(), options_.request_timeout_ms))
                     : options_.request_timeout_ms;
  op->deadline_ms = NowMillis() + op->limit_ms;
  {
    MutexLock lock(&op->mu);  // not shared yet; taken for the analysis' sake
    op->descs.assign(op->world(), Descriptor{});
    op->have.assign(op->world(), 0);
  }
  op->mine.kind = kind;
  op->mine.dtype = static_cast<uint8_t>(type);
  op->mine.segment = o.segment_bytes;
  std::strncpy(op->mine.name, o.name.c_str(), sizeof(op->mine.name) - 1);

  // The ticket: a request no message answers; Complete delivers or cancels it. Its own
  // deadline is far: the op ends it first.
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  req->deadline_ms = op->deadline_ms + 10 * kRequestGraceMs;
  Part p;
  p.server = kUnassignedId;
  p.table = kInvalidTable;
  req->parts.push_back(p);
  op->done = tracker_->Expect(req);
  *ticket = op->done;
  {
    MutexLock lock(&mu_);
    if (tag_base != 0) {
      op->tag_base = tag_base;  // a joined member's part in a collective already numbered
      op->seq = (tag_base >> kIndexBits) & ((uint64_t{1} << kSeqBits) - 1);
    } else {
      op->seq = next_seq_[op->members]++;
      const uint64_t seq = op->seq & ((uint64_t{1} << kSeqBits) - 1);
      op->tag_base = kCollectiveTagBit | (SetHash(op->members) << (kIndexBits + kSeqBits)) |
                     (seq << kIndexBits);
    }
    running_.insert(op);
  }
  // A member that died before the op was registered: OnNodeDead did not see it.
  const size_t dead = DeadPosition(*op);
  if (dead < op->world()) op->Fail(op->MemberDied(dead), Op::kDeathPriority, true);
  return op;
}

void Collectives::Launch(const std::shared_ptr<Op>& op, bool descriptors) {
  // The descriptors: received (compared as each arrives: `mine` and on_descriptor are
  // final now), then sent.
  for (size_t q = 0; q < op->world() && descriptors; ++q) {
    if (q == op->pos) continue;
    op->Begin(/*always=*/true);
    Op* raw = op.get();
    auto sink = [raw, q](const void* src, size_t) {
      MutexLock lock(&raw->mu);
      std::memcpy(&raw->descs[q], src, sizeof(Descriptor));
      raw->descs[q].name[sizeof(raw->descs[q].name) - 1] = '\0';
    };
    auto done = [op, q](const Status& s) {
      if (s.ok()) op->OnDescriptor(op, q);
      op->Done(op, s);
    };
    const Ticket t = peers_->RecvTyped(op->members[q], op->Tag(kDescriptorIndex),
                                       static_cast<uint8_t>(DataType::kUInt8), sizeof(Descriptor),
                                       sink, done, op->deadline_ms + kRequestGraceMs);
    op->PostedFrom(t, q, true);
  }
  for (size_t q = 0; q < op->world() && descriptors; ++q) {
    if (q == op->pos) continue;
    op->Begin(/*always=*/true);
    auto d = std::make_shared<Descriptor>(op->mine);
    if (!op->send_counts.empty()) d->aux = op->send_counts[q];
    // (A Join round does not fail when its descriptor reaches a member that joined and
    // left: Op::Outlived.)
    peers_->SendTyped(
        op->members[q], op->Tag(kDescriptorIndex), d.get(), sizeof(Descriptor),
        static_cast<uint8_t>(DataType::kUInt8), d, op->epoch,
        [op, q](const Status& s) { op->Done(op, op->Sent(q, s)); },
        op->deadline_ms + kRequestGraceMs);
  }
  op->Done(op, Status::OK());  // the posting hold
}

size_t Collectives::DeadPosition(const Op& op) const {
  const std::shared_ptr<const ClusterMap> now = map_();  // before mu_: no lock inside it
  MutexLock lock(&mu_);
  for (size_t q = 0; q < op.world(); ++q) {
    if (dead_.count(op.members[q])) return q;
    const NodeInfo* node = now ? now->FindNode(op.members[q]) : nullptr;
    if (now && (node == nullptr || !node->alive)) return q;
  }
  return op.world();
}

void Collectives::Complete(const std::shared_ptr<Op>& op) {
  Status status;
  int priority = 0;
  {
    MutexLock lock(&op->mu);
    status = op->status;
    priority = op->priority;
  }
  if (status.code() == StatusCode::kUnavailable && priority < Op::kDeathPriority) {
    // A message failed before the death reached OnNodeDead: said as the death, if it
    // is known by now.
    const size_t q = DeadPosition(*op);
    if (q < op->world()) status = op->MemberDied(q);
  }
  if (status.ok() && op->finish) status = op->finish();
  // Their captures may hold the op: let go of them (nothing calls them any more).
  op->finish = nullptr;
  op->on_descriptor = nullptr;
  {
    MutexLock lock(&mu_);
    running_.erase(op);
  }
  if (status.ok()) {
    tracker_->Deliver(op->done, 0, Status::OK(), nullptr, 0);
  } else {
    tracker_->Cancel(op->done, status);
  }
}

void Collectives::OnNodeDead(NodeId id, const Status& why, bool left) {
  std::vector<std::shared_ptr<Op>> hit;
  {
    MutexLock lock(&mu_);
    if (id != kSchedulerId) dead_.insert(id);
    if (id != kSchedulerId && left) {
      // Its receives fail as they are withdrawn (the tracker's parts for it) or posted
      // (Op::PostedFrom); its sends complete (Op::Sent).
      left_.insert(id);
      return;
    }
    for (const auto& op : running_) {
      if (id == kSchedulerId ||
          std::find(op->members.begin(), op->members.end(), id) != op->members.end()) {
        hit.push_back(op);
      }
    }
  }
  for (const auto& op : hit) {
    if (id == kSchedulerId) {
      op->Fail(Unavailable(op->what + ": " + why.message()), 2, true);
      continue;
    }
    // The same text on every survivor (Op::MemberDied), not the notice's own: the
    // reason the scheduler gives is not what a survivor that learns it otherwise sees.
    const size_t q = static_cast<size_t>(std::find(op->members.begin(), op->members.end(), id) -
                                         op->members.begin());
    if (op->Outlived(q)) continue;
    op->Fail(op->MemberDied(q), Op::kDeathPriority, true);
  }
}

void Collectives::Tick() {
  const int64_t now = NowMillis();
  std::vector<std::shared_ptr<Op>> late;
  {
    MutexLock lock(&mu_);
    for (const auto& op : running_) {
      if (now >= op->deadline_ms) late.push_back(op);
    }
  }
  for (const auto& op : late) {
    {
      MutexLock lock(&op->mu);
      if (op->cancelled_all) continue;  // already failed for good
    }
    op->Fail(Timeout(op->what + " did not complete within " + std::to_string(op->limit_ms) +
                     " ms" + (op->limited_by_request_timeout ? " (request_timeout_ms)" : "") +
                     op->Missing()),
             2, true);
  }
}


}  // namespace ps
