// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "common/reduce.h"
#include "common/wire_type.h"

namespace ps {

namespace {

// The collective's own deadline decides its outcome (Tick: kTimeout); its messages expire
// a little later, so the tracker's expiry never wins the race.
constexpr int64_t kRequestGraceMs = 1000;

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Tag layout: [63] kCollectiveTagBit | [47..62] set hash | [24..46] sequence | [0..23] index.
// Index kDescriptorIndex carries the descriptors; data messages use the indices below it.
constexpr int kIndexBits = 24;
constexpr int kSeqBits = 23;
constexpr uint64_t kDescriptorIndex = (uint64_t{1} << kIndexBits) - 1;
constexpr uint64_t kMaxDataMessages = kDescriptorIndex;  // indices 0 .. kDescriptorIndex-1

// The most bytes one member's part of a V collective may announce (its receivers allocate
// that much before it arrives).
constexpr uint64_t kMaxAnnouncedBytes = uint64_t{1} << 40;

// Collective kinds, as the descriptors carry them.
enum Kind : uint8_t {
  kAllReduceKind = 1,
  kAllGatherKind = 2,
  kAllGatherVKind = 3,
  kBroadcastKind = 4,
  kAllToAllKind = 5,
  kAllToAllVKind = 6,
  kReduceScatterKind = 7,
  kBarrierKind = 8,
  kJoinKind = 9,  // a member that joined (Horovod's join): a wildcard beside an AllReduce
  kNumKinds = 10,
};

const char* KindName(uint8_t kind) {
  switch (kind) {
    case kAllReduceKind: return "AllReduce";
    case kAllGatherKind: return "AllGather";
    case kAllGatherVKind: return "AllGatherV";
    case kBroadcastKind: return "Broadcast";
    case kAllToAllKind: return "AllToAll";
    case kAllToAllVKind: return "AllToAllV";
    case kReduceScatterKind: return "ReduceScatter";
    case kBarrierKind: return "Barrier";
    case kJoinKind: return "Join";
  }
  return "an unknown collective";
}

// What a member says of its call. Sent as 96 bytes in the sender's (little-endian) layout
// to every other member (docs/wire-format.md, "Collectives").
struct Descriptor {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t wire = 0;      // compression: a WireDType value
  uint32_t root = 0;     // Broadcast: the root's rank
  uint64_t count = 0;    // elements (AllGatherV: this member's; AllToAllV: all it sends)
  uint64_t aux = 0;      // AllToAllV: the elements sent to the receiver (not compared)
  uint64_t layout = 0;   // grouped all-reduce: a hash of the group's (type, n) list
  uint64_t segment = 0;  // segment_bytes
  double prescale = 1.0;
  double postscale = 1.0;
  uint8_t algorithm = 0;  // as resolved (direct or ring), for the kinds that choose
  uint8_t reserved[7] = {};
  char name[32] = {};     // the first 31 bytes of the name, NUL-terminated
};
static_assert(sizeof(Descriptor) == 96, "a descriptor is 96 bytes on the wire");

std::string Name(const Descriptor& d) {
  return std::string(d.name, strnlen(d.name, sizeof(d.name)));
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string Describe(const Descriptor& d) {
  if (d.kind == 0 || d.kind >= kNumKinds || d.dtype >= kNumDataTypes || d.op >= kNumReduceOps ||
      d.wire > 2) {
    return "a malformed descriptor";
  }
  std::string s = KindName(d.kind);
  if (d.kind == kJoinKind) return s + " (joined at collective " + std::to_string(d.root) + ")";
  if (d.kind == kAllReduceKind || d.kind == kReduceScatterKind) {
    s += std::string("(") + ReduceOpName(static_cast<ReduceOp>(d.op)) + ")";
  }
  if (d.kind != kBarrierKind) {
    s += " of " + std::to_string(d.count) + " " + DataTypeName(static_cast<DataType>(d.dtype)) +
         " elements";
  }
  if (d.kind == kBroadcastKind) s += " from root " + std::to_string(d.root);
  if (d.wire != 0) s += std::string(", wire ") + WireDTypeName(static_cast<WireDType>(d.wire));
  if (d.prescale != 1.0 || d.postscale != 1.0) {
    s += ", prescale " + std::to_string(d.prescale) + ", postscale " + std::to_string(d.postscale);
  }
  if (d.layout != 0) s += ", tensor list " + std::to_string(d.layout);
  s += ", segment_bytes " + std::to_string(d.segment);
  if (d.kind == kAllReduceKind || d.kind == kBroadcastKind) {
    s += d.algorithm == static_cast<uint8_t>(AllReduceAlgorithm::kDirect) ? ", direct" : ", ring";
  }
  const std::string name = Name(d);
  if (!name.empty()) s += ", name '" + name + "'";
  return s;
}

// Empty when `b` agrees with `a`; else the first field that differs.
std::string Differs(const Descriptor& a, const Descriptor& b) {
  if (Describe(b) == "a malformed descriptor") return "malformed";
  if (a.kind != b.kind) return "kind";
  if (a.dtype != b.dtype) return "type";
  if (a.op != b.op) return "op";
  if (a.wire != b.wire) return "wire";
  if (a.root != b.root) return "root";
  const bool own_counts = a.kind == kAllGatherVKind || a.kind == kAllToAllVKind;
  if (!own_counts && a.count != b.count) return "count";
  if (a.layout != b.layout) return "tensor list";
  if (a.segment != b.segment) return "segment_bytes";
  if (a.prescale != b.prescale || a.postscale != b.postscale) return "scale";
  if (a.algorithm != b.algorithm) return "algorithm";
  if (Name(a) != Name(b)) return "name";
  return "";
}

// What the W descriptors of one collective say, the same on every member: empty when the
// call may proceed, else the error. Members that joined (Join) are wildcards beside an
// AllReduce: they contribute the op's identity. *all_joined: every member joined;
// *reference: the position whose descriptor the others agree with.
std::string CheckDescriptors(const std::vector<Descriptor>& all, const std::vector<uint32_t>& ranks,
                             bool* all_joined, size_t* reference) {
  std::vector<uint32_t> joined;
  size_t ref = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind == kJoinKind) {
      joined.push_back(ranks[i]);
    } else if (ref == all.size()) {
      ref = i;
    }
  }
  *all_joined = ref == all.size();
  *reference = ref;
  if (*all_joined) return "";
  for (size_t i = ref + 1; i < all.size(); ++i) {
    if (all[i].kind == kJoinKind) continue;
    const std::string field = Differs(all[ref], all[i]);
    if (field.empty()) continue;
    return std::string(KindName(all[ref].kind)) + " mismatch in process set " + RankList(ranks) +
           ": rank " + std::to_string(ranks[ref]) + " called " + Describe(all[ref]) + "; rank " +
           std::to_string(ranks[i]) + " called " + Describe(all[i]) + " (" + field + " differs)";
  }
  if (!joined.empty() && all[ref].kind != kAllReduceKind) {
    return std::string(KindName(all[ref].kind)) + " in process set " + RankList(ranks) +
           " while rank(s) " + RankList(joined) +
           " joined: only AllReduce (and GroupedAllReduce) runs until every member joined; rank " +
           std::to_string(ranks[ref]) + " called " + Describe(all[ref]);
  }
  return "";
}

uint64_t SetHash(const std::vector<NodeId>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (NodeId id : members) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint64_t>(id) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff;
}

size_t Mod(int64_t a, size_t w) {
  const int64_t m = static_cast<int64_t>(w);
  return static_cast<size_t>(((a % m) + m) % m);
}

// A buffer of `bytes` bytes whose pages are touched only when written (no zero fill).
std::shared_ptr<uint8_t> RawBuffer(uint64_t bytes) {
  return std::shared_ptr<uint8_t>(new uint8_t[std::max<uint64_t>(bytes, 1)],
                                  std::default_delete<uint8_t[]>());
}

// Rounds float32 values to what `wire` holds (narrow, then widen): the owner of a
// compressed chunk keeps what the others receive.
void RoundToWire(float* v, size_t n, pack::WireType wire) {
  constexpr size_t kBlock = 4096;
  uint16_t tmp[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    pack::ToWire(v + i, m, wire, tmp);
    pack::FromWire(tmp, m, wire, v + i);
  }
}

bool MulOverflows(uint64_t a, uint64_t b) { return b != 0 && a > ~uint64_t{0} / b; }

}  // namespace

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
struct Collectives::Op {
  Collectives* owner = nullptr;
  std::string what;  // "AllReduce 'name'", for errors
  DataType type = DataType::kFloat32;
  size_t esize = 4;                              // bytes per element of `type`
  pack::WireType wire = pack::WireType::kFloat32;  // compression (float32 data only)
  size_t wsize = 4;                              // bytes per element on the wire
  ReduceOp rop = ReduceOp::kSum;
  std::vector<NodeId> members;
  std::vector<uint32_t> ranks;
  size_t pos = 0;
  uint64_t epoch = 0;
  uint64_t tag_base = 0;
  uint64_t seq = 0;  // the set's collective number (its low 23 bits are in the tag)
  int64_t deadline_ms = 0;
  int64_t limit_ms = 0;
  bool limited_by_request_timeout = false;
  Ticket done = 0;

  Descriptor mine;
  // AllToAllV: the elements this member sends to each member (descriptor aux).
  std::vector<size_t> send_counts;
  // The kind's last step, after every message completed OK (scaling, copying out).
  std::function<Status()> finish;
  // V variants: member `from`'s descriptor arrived (and agrees): post its receives.
  std::function<void(size_t from)> on_descriptor;

  // The data plane.
  uint8_t* data = nullptr;
  size_t n = 0;
  RingPlan plan;
  bool direct = false;
  // Direct all-reduce and reduce-scatter: each contribution lands in its sender's slot
  // (wire format) and is combined into `data` under mu; `arrived` counts them per
  // segment. V variants: each member's part in a buffer of its own.
  std::shared_ptr<uint8_t> staging;
  std::shared_ptr<uint8_t> staging_keep;  // a joined member's identity buffer
  std::vector<size_t> arrived;
  std::vector<std::shared_ptr<uint8_t>> parts;

  std::mutex mu;
  int outstanding = 1;             // guarded by mu: messages not completed + posting hold
  bool failed = false;             // guarded by mu
  int priority = 0;                // guarded by mu: of `status` (see Fail)
  Status status;                   // guarded by mu
  bool finished = false;           // guarded by mu
  bool cancelled_data = false;     // guarded by mu: data receives withdrawn
  bool cancelled_all = false;      // guarded by mu: descriptor receives withdrawn too
  std::vector<Descriptor> descs;   // guarded by mu until every one arrived
  std::vector<char> have;          // guarded by mu
  size_t descs_in = 0;             // guarded by mu
  std::vector<Ticket> data_receives;  // guarded by mu
  std::vector<Ticket> desc_receives;  // guarded by mu

  size_t world() const { return members.size(); }
  uint64_t Tag(uint64_t index) const { return tag_base | index; }
  bool compressed() const { return wire != pack::WireType::kFloat32; }

  // Priorities: a descriptor mismatch (3) beats a death or the deadline (2), which beat
  // any other error (1): every member then reports the same.
  static int PriorityOf(const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kAborted ||
                   s.code() == StatusCode::kTimeout
               ? 2
               : 1;
  }

  // Records a failure and withdraws the receives it makes pointless (`all`: the
  // descriptor receives too).
  void Fail(const Status& s, int prio, bool all) {
    std::vector<Ticket> cancel;
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (prio > priority) {
        status = s;
        priority = prio;
      }
      failed = true;
      why = status;
      if (!cancelled_data) {
        cancelled_data = true;
        cancel.swap(data_receives);
      }
      if (all && !cancelled_all) {
        cancelled_all = true;
        cancel.insert(cancel.end(), desc_receives.begin(), desc_receives.end());
        desc_receives.clear();
      }
    }
    for (Ticket t : cancel) owner->tracker_->Cancel(t, why);
  }

  // Counts a message about to be issued; false once the op failed (issue nothing more).
  // Descriptors are issued whatever happens (`always`).
  bool Begin(bool always = false) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed && !always) return false;
    ++outstanding;
    return true;
  }

  // A receive was posted: remembered for withdrawal, or withdrawn now if the op failed
  // meanwhile.
  void Posted(Ticket t, bool descriptor) {
    bool cancel_now = false;
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (descriptor ? cancelled_all : cancelled_data) {
        cancel_now = true;
        why = status;
      } else {
        (descriptor ? desc_receives : data_receives).push_back(t);
      }
    }
    if (cancel_now) owner->tracker_->Cancel(t, why);
  }

  // One message (or the posting hold) completed with `s`.
  void Done(const std::shared_ptr<Op>& self, const Status& s) {
    if (!s.ok()) Fail(s, PriorityOf(s), false);
    bool complete = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      complete = --outstanding == 0 && !finished;
      if (complete) finished = true;
    }
    if (complete) owner->Complete(self);
  }

  // Member at position `q`'s descriptor is in descs[q].
  void OnDescriptor(const std::shared_ptr<Op>& self, size_t q) {
    bool all = false, agrees = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (have[q]) return;
      have[q] = 1;
      all = ++descs_in == world() - 1;
      agrees = Differs(mine, descs[q]).empty();
    }
    if (agrees && on_descriptor) on_descriptor(q);
    if (!all) return;
    // Every descriptor is in: compare them all with the lowest rank's, so that every
    // member finds the same difference and says it the same way.
    std::vector<Descriptor> all_descs;
    {
      std::lock_guard<std::mutex> lock(mu);
      all_descs = descs;
    }
    all_descs[pos] = mine;
    bool all_joined = false;
    size_t reference = 0;
    const std::string error = CheckDescriptors(all_descs, ranks, &all_joined, &reference);
    if (!error.empty()) Fail(InvalidArgument(error), 3, false);
    (void)self;
  }

  // Sends `len` elements at `src` (the op's type) to member `to` under `index`: lent
  // without a copy, or narrowed to the wire type into a buffer of its own.
  void SendData(const std::shared_ptr<Op>& self, size_t to, uint64_t index, const uint8_t* src,
                size_t len) {
    if (!Begin()) return;
    auto cb = [self](const Status& s) { self->Done(self, s); };
    const int64_t deadline = deadline_ms + kRequestGraceMs;
    if (compressed()) {
      std::shared_ptr<uint8_t> buf = RawBuffer(len * wsize);
      pack::ToWire(reinterpret_cast<const float*>(src), len, wire, buf.get());
      owner->peers_->SendTyped(members[to], Tag(index), buf.get(), len * wsize,
                               static_cast<uint8_t>(wire), buf, epoch, cb, deadline);
    } else {
      owner->peers_->SendTyped(members[to], Tag(index), src, len * esize,
                               static_cast<uint8_t>(type), nullptr, epoch, cb, deadline);
    }
  }

  // Receives `len` wire elements from member `from` under `index` into `sink`; `then`
  // runs once they arrived, before the message counts as done.
  void RecvData(const std::shared_ptr<Op>& self, size_t from, uint64_t index, size_t len,
                std::function<void(const void*, size_t)> sink, std::function<void()> then) {
    if (!Begin()) return;
    auto cb = [self, then = std::move(then)](const Status& s) {
      if (s.ok() && then) then();
      self->Done(self, s);
    };
    const uint8_t dtype = compressed() ? static_cast<uint8_t>(wire) : static_cast<uint8_t>(type);
    const Ticket t = owner->peers_->RecvTyped(members[from], Tag(index), dtype, len * wsize,
                                              std::move(sink), cb, deadline_ms + kRequestGraceMs);
    Posted(t, false);
  }

  // Sinks: combine into, or copy into, `dst` (the op's type; wire elements arrive).
  std::function<void(const void*, size_t)> CombineInto(uint8_t* dst, size_t len) {
    if (compressed()) {
      const ReduceOp r = rop;
      const pack::WireType w = wire;
      return [dst, len, r, w](const void* src, size_t) {
        reduce::CombineWidening(r, reinterpret_cast<float*>(dst), src, w, len);
      };
    }
    const DataType t = type;
    const ReduceOp r = rop;
    return [dst, len, t, r](const void* src, size_t) { reduce::Combine(t, r, dst, src, len); };
  }
  std::function<void(const void*, size_t)> CopyInto(uint8_t* dst, size_t len) {
    if (compressed()) {
      const pack::WireType w = wire;
      return [dst, len, w](const void* src, size_t) {
        pack::FromWire(src, len, w, reinterpret_cast<float*>(dst));
      };
    }
    return [dst](const void* src, size_t bytes) { std::memcpy(dst, src, bytes); };
  }

  std::string Missing() {
    std::vector<uint32_t> missing;
    std::lock_guard<std::mutex> lock(mu);
    for (size_t q = 0; q < world(); ++q) {
      if (q != pos && !have[q]) missing.push_back(ranks[q]);
    }
    return missing.empty() ? std::string()
                           : "; no word from rank(s) " + RankList(missing) +
                                 " (not called yet, or another collective)";
  }
};

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
  std::vector<uint32_t> dead;
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
    if (!it->second->alive) dead.push_back(r);
    g.members.push_back(it->second->id);
    g.ranks.push_back(r);
  }
  if (!self_in) {
    return InvalidArgument(what + ": process set " + RankList(asked) +
                           " does not include this worker");
  }
  if (!dead.empty()) {
    return Unavailable(what + ": worker(s) " + RankList(dead) + " of the set are dead");
  }
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
  op->owner = this;
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
  op->descs.assign(op->world(), Descriptor{});
  op->have.assign(op->world(), 0);
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
    std::lock_guard<std::mutex> lock(mu_);
    if (tag_base != 0) {
      op->tag_base = tag_base;  // a joined member's part in a collective already numbered
    } else {
      op->seq = next_seq_[op->members]++;
      const uint64_t seq = op->seq & ((uint64_t{1} << kSeqBits) - 1);
      op->tag_base = kCollectiveTagBit | (SetHash(op->members) << (kIndexBits + kSeqBits)) |
                     (seq << kIndexBits);
    }
    running_.insert(op);
  }
  // A member that died before the op was registered: OnNodeDead did not see it.
  if (auto now = map_()) {
    for (size_t q = 0; q < op->world(); ++q) {
      const NodeInfo* node = now->FindNode(op->members[q]);
      if (node == nullptr || !node->alive) {
        op->Fail(Unavailable(what + ": worker " + std::to_string(op->ranks[q]) + " is dead"), 2,
                 true);
      }
    }
  }
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
      std::lock_guard<std::mutex> lock(raw->mu);
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
    op->Posted(t, true);
  }
  for (size_t q = 0; q < op->world() && descriptors; ++q) {
    if (q == op->pos) continue;
    op->Begin(/*always=*/true);
    auto d = std::make_shared<Descriptor>(op->mine);
    if (!op->send_counts.empty()) d->aux = op->send_counts[q];
    peers_->SendTyped(
        op->members[q], op->Tag(kDescriptorIndex), d.get(), sizeof(Descriptor),
        static_cast<uint8_t>(DataType::kUInt8), d, op->epoch,
        [op](const Status& s) { op->Done(op, s); }, op->deadline_ms + kRequestGraceMs);
  }
  op->Done(op, Status::OK());  // the posting hold
}

void Collectives::Complete(const std::shared_ptr<Op>& op) {
  Status status;
  {
    std::lock_guard<std::mutex> lock(op->mu);
    status = op->status;
  }
  if (status.ok() && op->finish) status = op->finish();
  // Their captures may hold the op: let go of them (nothing calls them any more).
  op->finish = nullptr;
  op->on_descriptor = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(op);
  }
  if (status.ok()) {
    tracker_->Deliver(op->done, 0, Status::OK(), nullptr, 0);
  } else {
    tracker_->Cancel(op->done, status);
  }
}

void Collectives::OnNodeDead(NodeId id, const Status& why) {
  std::vector<std::shared_ptr<Op>> hit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& op : running_) {
      if (id == kSchedulerId ||
          std::find(op->members.begin(), op->members.end(), id) != op->members.end()) {
        hit.push_back(op);
      }
    }
  }
  for (const auto& op : hit) {
    op->Fail(Unavailable(op->what + ": " + why.message()), 2, true);
  }
}

void Collectives::Tick() {
  const int64_t now = NowMillis();
  std::vector<std::shared_ptr<Op>> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& op : running_) {
      if (now >= op->deadline_ms) late.push_back(op);
    }
  }
  for (const auto& op : late) {
    {
      std::lock_guard<std::mutex> lock(op->mu);
      if (op->cancelled_all) continue;  // already failed for good
    }
    op->Fail(Timeout(op->what + " did not complete within " + std::to_string(op->limit_ms) +
                     " ms" + (op->limited_by_request_timeout ? " (request_timeout_ms)" : "") +
                     op->Missing()),
             2, true);
  }
}

// --- AllReduce ------------------------------------------------------------------------------

namespace {

std::string Named(const char* kind, const CollectiveOptions& o) {
  return o.name.empty() ? std::string(kind) : std::string(kind) + " '" + o.name + "'";
}

Status CheckAllReduceArgs(const std::string& what, const void* in, void* out, size_t n,
                          DataType type, const AllReduceOptions& o) {
  if ((in == nullptr || out == nullptr) && n > 0) return InvalidArgument(what + ": null buffer");
  if (static_cast<int>(o.op) < 0 || static_cast<int>(o.op) >= kNumReduceOps) {
    return InvalidArgument(what + ": unknown reduce op " + std::to_string(static_cast<int>(o.op)));
  }
  if (MulOverflows(n, DataTypeSize(type)) || n * DataTypeSize(type) > (~size_t{0} >> 1)) {
    return InvalidArgument(what + ": " + std::to_string(n) + " elements overflow the size");
  }
  if (!std::isfinite(o.prescale) || !std::isfinite(o.postscale)) {
    return InvalidArgument(what + ": prescale and postscale must be finite");
  }
  if (o.wire_dtype != WireDType::kFloat32) {
    if (static_cast<int>(o.wire_dtype) < 0 || static_cast<int>(o.wire_dtype) > 2) {
      return InvalidArgument(what + ": unknown wire_dtype");
    }
    if (type != DataType::kFloat32) {
      return InvalidArgument(what + ": wire_dtype " + WireDTypeName(o.wire_dtype) +
                             " compresses float32 buffers only, not " + DataTypeName(type));
    }
  }
  return Status::OK();
}

}  // namespace

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
  op->direct = o.algorithm == AllReduceAlgorithm::kDirect ||
               (o.algorithm == AllReduceAlgorithm::kAuto && bytes <= o.direct_max_bytes);
  op->mine.algorithm = static_cast<uint8_t>(op->direct ? AllReduceAlgorithm::kDirect
                                                       : AllReduceAlgorithm::kRing);
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
  if (world > 1 && n > 0) PostAllReduce(op, o);
  Launch(op);
  return ticket;
}

void Collectives::PostAllReduce(const std::shared_ptr<Op>& op, const AllReduceOptions& o) {
  const size_t world = op->world();
  op->plan = RingPlan::Make(op->n, world, o.segment_bytes / op->wsize, op->direct ? 2 : 2 * (world - 1));
  const RingPlan& plan = op->plan;
  const size_t E = op->esize;
  uint8_t* data = op->data;

  if (op->direct) {
    // Phase 0: member q's contribution to this member's chunk, into q's slot, combined in
    // under mu; the last of the W-1 sends the result to everyone. Phase 1: member q's
    // combined chunk, copied into place.
    const size_t mine = plan.ChunkSize(op->pos), first = plan.ChunkOffset(op->pos);
    op->staging = RawBuffer(uint64_t{world - 1} * mine * op->wsize);
    op->arrived.assign(plan.segs, 0);
    for (size_t q = 0; q < world; ++q) {
      if (q == op->pos) continue;
      uint8_t* slot = op->staging.get() + (q < op->pos ? q : q - 1) * mine * op->wsize;
      for (size_t k = 0; k < plan.segs; ++k) {
        size_t begin = 0, len = 0;
        plan.Segment(op->pos, k, &begin, &len);
        if (len > 0) {
          uint8_t* staged = slot + (begin - first) * op->wsize;
          Op* raw = op.get();
          auto stage = [staged](const void* src, size_t b) { std::memcpy(staged, src, b); };
          auto combine = [raw, op, k, staged, begin, len]() {
            bool last = false;
            {
              std::lock_guard<std::mutex> lock(raw->mu);
              raw->CombineInto(raw->data + begin * raw->esize, len)(staged, len * raw->wsize);
              last = ++raw->arrived[k] == raw->world() - 1;
            }
            if (!last) return;
            if (raw->compressed()) {
              RoundToWire(reinterpret_cast<float*>(raw->data + begin * raw->esize), len, raw->wire);
            }
            for (size_t to = 0; to < raw->world(); ++to) {
              if (to != raw->pos) {
                raw->SendData(op, to, raw->plan.segs + k, raw->data + begin * raw->esize, len);
              }
            }
          };
          op->RecvData(op, q, k, len, stage, combine);
        }
        plan.Segment(q, k, &begin, &len);
        if (len > 0) op->RecvData(op, q, plan.segs + k, len, op->CopyInto(data + begin * E, len), nullptr);
      }
    }
    for (size_t q = 0; q < world; ++q) {
      if (q == op->pos) continue;
      for (size_t k = 0; k < plan.segs; ++k) {
        size_t begin = 0, len = 0;
        plan.Segment(q, k, &begin, &len);
        if (len > 0) op->SendData(op, q, k, data + begin * E, len);
      }
    }
    return;
  }

  // The ring: every receive first, straight into its place (reduce-scatter steps
  // combine, all-gather steps copy); each one, once it arrived, sends that segment on at
  // the next step.
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
  struct Pending {
    std::mutex mu;
    size_t left = 0;
    Status first;
    Ticket ticket = 0;
  };
  auto pending = std::make_shared<Pending>();
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  req->deadline_ms = NowMillis() + WaitLimit(o).count() + 10 * kRequestGraceMs;
  Part p;
  p.server = kUnassignedId;
  req->parts.push_back(p);
  pending->left = by_type.size() + 1;  // + this call's hold
  pending->ticket = tracker_->Expect(req);
  RequestTracker* tracker = tracker_;
  auto one_done = [pending, tracker](const Status& s) {
    bool last = false;
    Status result;
    {
      std::lock_guard<std::mutex> lock(pending->mu);
      if (!s.ok() && pending->first.ok()) pending->first = s;
      last = --pending->left == 0;
      result = pending->first;
    }
    if (!last) return;
    if (result.ok()) {
      tracker->Deliver(pending->ticket, 0, Status::OK(), nullptr, 0);
    } else {
      tracker->Cancel(pending->ticket, result);
    }
  };
  for (auto& kv : by_type) {
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
    StartAllReduce(packed.get(), packed.get(), total, type, o, layout, unpack, one_done);
  }
  one_done(Status::OK());  // this call's hold
  return pending->ticket;
}

// --- Gathers, broadcast, all-to-all, reduce-scatter, barrier -----------------------------------

namespace {

// Segments of `count` elements of `segment` each: [k * segment, ...).
size_t Segments(size_t count, size_t segment) { return (count + segment - 1) / segment; }

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
  for (size_t q = 0; q < W && segs < kMaxDataMessages; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < segs; ++k) {
      const size_t len = std::min(seg, n - k * seg);
      op->RecvData(op, q, k, len, op->CopyInto(dst + (q * n + k * seg) * E, len), nullptr);
    }
  }
  for (size_t q = 0; q < W && segs < kMaxDataMessages; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < segs; ++k) {
      op->SendData(op, q, k, dst + (op->pos * n + k * seg) * E, std::min(seg, n - k * seg));
    }
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
  op->parts.assign(W, nullptr);
  auto counts = std::make_shared<std::vector<size_t>>(W, 0);
  (*counts)[op->pos] = n;
  op->parts[op->pos] = RawBuffer(uint64_t{n} * E);
  if (n > 0) std::memcpy(op->parts[op->pos].get(), in, n * E);
  Op* raw = op.get();
  // Member q's part: posted once its descriptor says how long it is.
  op->on_descriptor = [raw, op, counts, seg, E](size_t q) {
    uint64_t count = 0;
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      count = raw->descs[q].count;
    }
    if (MulOverflows(count, E) || count * E > kMaxAnnouncedBytes || Segments(count, seg) >= kMaxDataMessages) {
      raw->Fail(InvalidArgument(raw->what + ": rank " + std::to_string(raw->ranks[q]) +
                                " announced " + std::to_string(count) + " elements"),
                1, false);
      return;
    }
    (*counts)[q] = count;
    raw->parts[q] = RawBuffer(count * E);
    uint8_t* base = raw->parts[q].get();
    for (size_t k = 0; k < Segments(count, seg); ++k) {
      const size_t len = std::min<size_t>(seg, count - k * seg);
      raw->RecvData(op, q, k, len, raw->CopyInto(base + k * seg * E, len), nullptr);
    }
  };
  const size_t segs = Segments(n, seg);
  if (segs >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  }
  for (size_t q = 0; q < W && segs < kMaxDataMessages; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < segs; ++k) {
      op->SendData(op, q, k, static_cast<const uint8_t*>(in) + k * seg * E, std::min(seg, n - k * seg));
    }
  }
  op->finish = [raw, counts, out, E]() {
    size_t total = 0;
    for (size_t c : *counts) total += c;
    out->data.resize(total * E);
    out->counts = *counts;
    size_t at = 0;
    for (size_t q = 0; q < counts->size(); ++q) {
      if ((*counts)[q] > 0) std::memcpy(out->data.data() + at * E, raw->parts[q].get(), (*counts)[q] * E);
      at += (*counts)[q];
    }
    raw->parts.clear();
    return Status::OK();
  };
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
  op->direct = o.algorithm == AllReduceAlgorithm::kDirect ||
               (o.algorithm == AllReduceAlgorithm::kAuto && n * E <= o.direct_max_bytes);
  op->mine.algorithm = static_cast<uint8_t>(op->direct ? AllReduceAlgorithm::kDirect
                                                       : AllReduceAlgorithm::kRing);
  uint8_t* buf = static_cast<uint8_t*>(data);
  const size_t seg = std::max<size_t>(o.segment_bytes / E, 1);
  const size_t segs = Segments(n, seg);
  if (segs >= kMaxDataMessages) {
    op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
  } else if (op->direct) {
    for (size_t k = 0; k < segs; ++k) {
      const size_t len = std::min(seg, n - k * seg);
      if (op->pos == root_pos) {
        for (size_t q = 0; q < W; ++q) {
          if (q != root_pos) op->SendData(op, q, k, buf + k * seg * E, len);
        }
      } else {
        op->RecvData(op, root_pos, k, len, op->CopyInto(buf + k * seg * E, len), nullptr);
      }
    }
  } else {
    // The chain root, root+1, ...: each member receives segment k from the one before it
    // and passes it on to the one after it.
    const size_t me = (op->pos + W - root_pos) % W;  // place in the chain
    const size_t next = (op->pos + 1) % W, prev = (op->pos + W - 1) % W;
    Op* raw = op.get();
    for (size_t k = 0; k < segs; ++k) {
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
  for (size_t q = 0; q < W && segs < kMaxDataMessages; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < segs; ++k) {
      const size_t len = std::min(seg, n - k * seg);
      op->RecvData(op, q, k, len, op->CopyInto(dst + (q * n + k * seg) * E, len), nullptr);
    }
  }
  for (size_t q = 0; q < W && segs < kMaxDataMessages; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < segs; ++k) {
      op->SendData(op, q, k, src + (q * n + k * seg) * E, std::min(seg, n - k * seg));
    }
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
  op->parts.assign(W, nullptr);
  auto counts = std::make_shared<std::vector<size_t>>(W, 0);
  (*counts)[op->pos] = send_counts[op->pos];
  op->parts[op->pos] = RawBuffer(uint64_t{send_counts[op->pos]} * E);
  if (send_counts[op->pos] > 0) {
    std::memcpy(op->parts[op->pos].get(), src + offset[op->pos] * E, send_counts[op->pos] * E);
  }
  Op* raw = op.get();
  op->on_descriptor = [raw, op, counts, seg, E](size_t q) {
    uint64_t count = 0;
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      count = raw->descs[q].aux;
    }
    if (MulOverflows(count, E) || count * E > kMaxAnnouncedBytes || Segments(count, seg) >= kMaxDataMessages) {
      raw->Fail(InvalidArgument(raw->what + ": rank " + std::to_string(raw->ranks[q]) +
                                " announced " + std::to_string(count) + " elements"),
                1, false);
      return;
    }
    (*counts)[q] = count;
    raw->parts[q] = RawBuffer(count * E);
    uint8_t* base = raw->parts[q].get();
    for (size_t k = 0; k < Segments(count, seg); ++k) {
      const size_t len = std::min<size_t>(seg, count - k * seg);
      raw->RecvData(op, q, k, len, raw->CopyInto(base + k * seg * E, len), nullptr);
    }
  };
  for (size_t q = 0; q < W; ++q) {
    if (q == op->pos) continue;
    const size_t segs = Segments(send_counts[q], seg);
    if (segs >= kMaxDataMessages) {
      op->Fail(InvalidArgument(what + ": too many segments; raise segment_bytes"), 1, false);
      break;
    }
    for (size_t k = 0; k < segs; ++k) {
      op->SendData(op, q, k, src + (offset[q] + k * seg) * E, std::min(seg, send_counts[q] - k * seg));
    }
  }
  op->finish = [raw, counts, out, E]() {
    size_t sum = 0;
    for (size_t c : *counts) sum += c;
    out->data.resize(sum * E);
    out->counts = *counts;
    size_t at = 0;
    for (size_t q = 0; q < counts->size(); ++q) {
      if ((*counts)[q] > 0) std::memcpy(out->data.data() + at * E, raw->parts[q].get(), (*counts)[q] * E);
      at += (*counts)[q];
    }
    raw->parts.clear();
    return Status::OK();
  };
  Launch(op);
  return ticket;
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
  op->plan = RingPlan::Make(n, W, o.segment_bytes / wire_elem, 1);
  const RingPlan& plan = op->plan;
  const size_t mine = plan.ChunkSize(op->pos), first = plan.ChunkOffset(op->pos);
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
  if (mine > 0) std::memmove(op->data, src + first * E, mine * E);
  op->staging = RawBuffer(uint64_t{W} * std::max<size_t>(mine, 1) * op->wsize);
  Op* raw = op.get();
  for (size_t q = 0; q < W; ++q) {
    if (q == op->pos) continue;
    uint8_t* slot = op->staging.get() + q * mine * op->wsize;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(op->pos, k, &begin, &len);
      if (len == 0) continue;
      uint8_t* staged = slot + (begin - first) * op->wsize;
      auto stage = [staged](const void* from, size_t b) { std::memcpy(staged, from, b); };
      auto combine = [raw, staged, begin, first, len]() {
        std::lock_guard<std::mutex> lock(raw->mu);
        raw->CombineInto(raw->data + (begin - first) * raw->esize, len)(staged, len * raw->wsize);
      };
      op->RecvData(op, q, k, len, stage, combine);
    }
  }
  for (size_t q = 0; q < W; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(q, k, &begin, &len);
      if (len > 0) op->SendData(op, q, k, src + begin * E, len);
    }
  }
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
      std::lock_guard<std::mutex> lock(op->mu);
      all = op->descs;
    }
    all[op->pos] = op->mine;
    bool all_joined = false;
    size_t ref = 0;
    const std::string error = CheckDescriptors(all, op->ranks, &all_joined, &ref);
    if (!r.ok() && error.empty()) return r;  // the deadline, a death, Stop
    if (!error.empty()) continue;            // the others' call failed on every member
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
    ar.segment_bytes = d.segment;
    ar.timeout = std::chrono::milliseconds(std::max<int64_t>(deadline - NowMillis(), 1));
    ar.op = static_cast<ReduceOp>(d.op);
    ar.wire_dtype = static_cast<WireDType>(d.wire);
    const DataType type = static_cast<DataType>(d.dtype);
    const size_t E = DataTypeSize(type);
    if (MulOverflows(d.count, E) || d.count * E > kMaxAnnouncedBytes) continue;
    Ticket part = 0;
    auto data_op = NewOp(Named("AllReduce", ar) + " (joined)", kAllReduceKind, ar, members, type,
                         nullptr, &part, op->tag_base, /*uncapped=*/true);
    auto identity = RawBuffer(d.count * E);
    reduce::FillIdentity(type, ar.op, identity.get(), d.count);
    data_op->staging_keep = identity;
    data_op->rop = ar.op;
    data_op->wire = static_cast<pack::WireType>(d.wire);
    data_op->wsize = d.wire != 0 ? 2 : E;
    data_op->data = identity.get();
    data_op->n = d.count;
    data_op->direct = d.algorithm == static_cast<uint8_t>(AllReduceAlgorithm::kDirect);
    {
      std::lock_guard<std::mutex> lock(data_op->mu);
      std::fill(data_op->have.begin(), data_op->have.end(), 1);  // the descriptors are in
    }
    if (data_op->world() > 1 && d.count > 0) PostAllReduce(data_op, ar);
    Launch(data_op, /*descriptors=*/false);
    Status p = tracker_->Wait(part, std::chrono::milliseconds(ar.timeout.count() + 4 * kRequestGraceMs));
    if (!p.ok() && p.code() != StatusCode::kInvalidArgument) return p;
  }
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
