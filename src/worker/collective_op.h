// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The inside of the collectives engine (worker/collectives.h), shared by its files:
// collectives.cc (descriptors, setup, completion, deadlines), collectives_reduce.cc
// (all-reduce, grouped all-reduce, reduce-scatter, join) and collectives_exchange.cc
// (all-gather(v), broadcast, all-to-all(v), barrier). Not for anything else to include.
#ifndef PS_WORKER_COLLECTIVE_OP_H_
#define PS_WORKER_COLLECTIVE_OP_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/reduce.h"
#include "common/wire_type.h"
#include "worker/collectives.h"

namespace ps {
namespace collective_internal {


// The collective's own deadline decides its outcome (Tick: kTimeout); its messages expire
// a little later, so the tracker's expiry never wins the race.
constexpr int64_t kRequestGraceMs = 1000;

inline int64_t NowMillis() {
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

inline const char* KindName(uint8_t kind) {
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

inline std::string Name(const Descriptor& d) {
  return std::string(d.name, strnlen(d.name, sizeof(d.name)));
}

inline std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

inline std::string Describe(const Descriptor& d) {
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
inline std::string Differs(const Descriptor& a, const Descriptor& b) {
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
inline std::string CheckDescriptors(const std::vector<Descriptor>& all, const std::vector<uint32_t>& ranks,
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

inline uint64_t SetHash(const std::vector<NodeId>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (NodeId id : members) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint64_t>(id) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff;
}

inline size_t Mod(int64_t a, size_t w) {
  const int64_t m = static_cast<int64_t>(w);
  return static_cast<size_t>(((a % m) + m) % m);
}

// A buffer of `bytes` bytes whose pages are touched only when written (no zero fill).
inline std::shared_ptr<uint8_t> RawBuffer(uint64_t bytes) {
  return std::shared_ptr<uint8_t>(new uint8_t[std::max<uint64_t>(bytes, 1)],
                                  std::default_delete<uint8_t[]>());
}

// Rounds float32 values to what `wire` holds (narrow, then widen): the owner of a
// compressed chunk keeps what the others receive.
inline void RoundToWire(float* v, size_t n, pack::WireType wire) {
  constexpr size_t kBlock = 4096;
  uint16_t tmp[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    pack::ToWire(v + i, m, wire, tmp);
    pack::FromWire(tmp, m, wire, v + i);
  }
}

inline bool MulOverflows(uint64_t a, uint64_t b) { return b != 0 && a > ~uint64_t{0} / b; }



inline std::string Named(const char* kind, const CollectiveOptions& o) {
  return o.name.empty() ? std::string(kind) : std::string(kind) + " '" + o.name + "'";
}

inline Status CheckAllReduceArgs(const std::string& what, const void* in, void* out, size_t n,
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



// Segments of `count` elements of `segment` each: [k * segment, ...).
inline size_t Segments(size_t count, size_t segment) { return (count + segment - 1) / segment; }


}  // namespace collective_internal

using namespace collective_internal;  // NOLINT: the engine's own vocabulary, in its files only

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
  // (wire format); `arrived` counts them per segment under mu, and the last to arrive
  // combines them all into `data` in member order (the same float result every run).
  std::shared_ptr<uint8_t> staging;
  std::shared_ptr<uint8_t> staging_keep;  // a joined member's identity buffer
  std::vector<size_t> arrived;

  Mutex mu;
  int outstanding GUARDED_BY(mu) = 1;  // messages not completed + posting hold
  bool failed GUARDED_BY(mu) = false;
  int priority GUARDED_BY(mu) = 0;  // of `status` (see Fail)
  Status status GUARDED_BY(mu);
  bool finished GUARDED_BY(mu) = false;
  bool decided GUARDED_BY(mu) = false;  // a final Join round: no failure counts
  bool cancelled_data GUARDED_BY(mu) = false;  // data receives withdrawn
  bool cancelled_all GUARDED_BY(mu) = false;  // descriptor receives withdrawn too
  std::vector<Descriptor> descs GUARDED_BY(mu);  // until every one arrived
  std::vector<char> have GUARDED_BY(mu);
  size_t descs_in GUARDED_BY(mu) = 0;
  std::vector<Ticket> data_receives GUARDED_BY(mu);
  std::vector<Ticket> desc_receives GUARDED_BY(mu);

  size_t world() const { return members.size(); }
  uint64_t Tag(uint64_t index) const { return tag_base | index; }
  bool compressed() const { return wire != pack::WireType::kFloat32; }

  // Priorities: a descriptor mismatch beats a member's death, which beats the deadline, a
  // lost scheduler or a failed message (kUnavailable, kAborted, kTimeout), which beat any
  // other error: every member then reports the same. A later failure of a higher priority
  // replaces the status as long as the op has not completed.
  static constexpr int kMismatchPriority = 4;
  static constexpr int kDeathPriority = 3;
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
      MutexLock lock(&mu);
      if (decided) return;
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
    MutexLock lock(&mu);
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
      MutexLock lock(&mu);
      if (descriptor ? cancelled_all : cancelled_data) {
        cancel_now = true;
        why = status;
      } else {
        (descriptor ? desc_receives : data_receives).push_back(t);
      }
    }
    if (cancel_now) owner->tracker_->Cancel(t, why);
  }

  // A receive from member `q` was posted: as Posted, and failed at once if `q` left
  // cleanly (what it sent before leaving was kept and taken by now: this one never
  // comes). A ticket delivered meanwhile ignores the cancel.
  void PostedFrom(Ticket t, size_t q, bool descriptor) {
    Posted(t, descriptor);
    if (owner->HasLeft(members[q])) owner->tracker_->Cancel(t, MemberDied(q));
  }

  // The status a send to member `q` counts with: delivered if it failed because `q`
  // left cleanly (Collectives::OnNodeDead), or because a Join round outlived it.
  Status Sent(size_t q, const Status& s) {
    if (s.ok() || owner->HasLeft(members[q]) || Outlived(q)) return Status::OK();
    return s;
  }

  // The error every survivor reports when the member at position `q` died (or left):
  // built from what every member knows alike (the collective, its number in the set, the
  // member), so that the text is the same on every survivor whichever way the death
  // reached it (the scheduler's notice, a failed message, the map, a call started after).
  Status MemberDied(size_t q) const {
    return Unavailable(what + " #" + std::to_string(seq) + " failed: member rank " +
                       std::to_string(ranks[q]) + " (node " + std::to_string(members[q]) +
                       ") died");
  }

  // A Join round outlives a member whose Join descriptor is in: that member may leave
  // (its own Join returned once it heard from everyone) before this one heard from every
  // other member, and its leaving changes nothing here.
  bool Outlived(size_t q) {
    MutexLock lock(&mu);
    return mine.kind == kJoinKind && have[q] && descs[q].kind == kJoinKind;
  }

  // A failure of `s`: a member's death when `s` is kUnavailable and a member is known
  // dead (a message to or from it failed), else `s` as it is.
  void FailWith(const Status& s, bool all) {
    if (s.code() == StatusCode::kUnavailable) {
      const size_t q = owner->DeadPosition(*this);
      if (q < world()) {
        Fail(MemberDied(q), kDeathPriority, true);
        return;
      }
    }
    Fail(s, PriorityOf(s), all);
  }

  // One message (or the posting hold) completed with `s`.
  void Done(const std::shared_ptr<Op>& self, const Status& s) {
    if (!s.ok()) FailWith(s, false);
    bool complete = false;
    {
      MutexLock lock(&mu);
      complete = --outstanding == 0 && !finished;
      if (complete) finished = true;
    }
    if (complete) owner->Complete(self);
  }

  // Member at position `q`'s descriptor is in descs[q].
  void OnDescriptor(const std::shared_ptr<Op>& self, size_t q) {
    bool all = false, agrees = false;
    {
      MutexLock lock(&mu);
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
      MutexLock lock(&mu);
      all_descs = descs;
    }
    all_descs[pos] = mine;
    bool all_joined = false;
    size_t reference = 0;
    const std::string error = CheckDescriptors(all_descs, ranks, &all_joined, &reference);
    if (!error.empty()) Fail(InvalidArgument(error), kMismatchPriority, false);
    if (error.empty() && all_joined && mine.kind == kJoinKind) {
      // Every member joined: the outcome is known, and a member that leaves now (its own
      // join returned) while our acknowledgements are on their way changes nothing.
      MutexLock lock(&mu);
      decided = true;
    }
    (void)self;
  }

  // Sends `len` elements at `src` (the op's type) to member `to` under `index`: lent
  // without a copy, or narrowed to the wire type into a buffer of its own.
  void SendData(const std::shared_ptr<Op>& self, size_t to, uint64_t index, const uint8_t* src,
                size_t len) {
    if (!Begin()) return;
    auto cb = [self, to](const Status& s) { self->Done(self, self->Sent(to, s)); };
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
    PostedFrom(t, from, false);
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
    MutexLock lock(&mu);
    for (size_t q = 0; q < world(); ++q) {
      if (q != pos && !have[q]) missing.push_back(ranks[q]);
    }
    return missing.empty() ? std::string()
                           : "; no word from rank(s) " + RankList(missing) +
                                 " (not called yet, or another collective)";
  }
};


}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_OP_H_
