// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The collectives' protocol and vocabulary (worker/collectives.h): the tag layout, the kinds,
// the descriptor every member sends every other and how the W descriptors are compared,
// and the small helpers every algorithm uses. Included by the engine's files only.
#ifndef PS_WORKER_COLLECTIVE_PROTOCOL_H_
#define PS_WORKER_COLLECTIVE_PROTOCOL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "common/wire_type.h"
#include "ps/collectives.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {
namespace collective {

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
  if (static_cast<unsigned>(o.op) >= static_cast<unsigned>(kNumReduceOps)) {  // from a cast int
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

}  // namespace collective
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_PROTOCOL_H_
