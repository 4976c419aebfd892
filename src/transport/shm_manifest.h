// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The shared-memory manifest (docs/wire-format.md): the part a sender puts before the
// header of a message to a same-host peer when some payload frames travel through its
// shared-memory segment instead of the socket. Layout, encoding and the checks a
// receiver makes before it opens or maps anything (the ZeroMQ transport acts on a
// manifest only after these pass, and only from a member's connection).
#ifndef PS_TRANSPORT_SHM_MANIFEST_H_
#define PS_TRANSPORT_SHM_MANIFEST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/status.h"
#include "transport/message.h"

namespace ps {

// A segment: kShmSlots flags of 4 bytes (one per block in flight), then the data ring.
constexpr size_t kShmMinFrame = size_t{64} << 10;    // smaller frames take the socket
constexpr size_t kShmSlots = 4096;                   // blocks in flight per segment
constexpr size_t kShmControlBytes = kShmSlots * 4;   // one atomic flag per slot
constexpr size_t kShmDataBytes = size_t{128} << 20;  // ring of payload bytes
constexpr size_t kShmSegmentBytes = kShmControlBytes + kShmDataBytes;
constexpr size_t kShmMaxFrame = kShmDataBytes / 4;     // bigger frames take the socket
constexpr uint64_t kShmMagic = 0x31304D4853535046ull;  // "FPSSHM01"
constexpr char kShmPrefix[] = "/layerps-shm-";
constexpr size_t kShmMaxName = 55;     // characters of a segment name (NUL excluded)
constexpr size_t kShmBlockAlign = 64;  // blocks start on this boundary of the data area

// The manifest part: 72 bytes of head, then one entry per frame in shared memory. Its
// size is never 64, the size of a header part.
struct ShmHead {
  uint64_t magic;
  uint32_t count;
  uint32_t reserved;
  char name[56];  // NUL-terminated segment name
};
struct ShmEntry {
  uint32_t frame;   // index among the payload frames
  uint32_t slot;    // flag slot, set to 0 by the receiver when done
  uint64_t offset;  // in the data area
  uint64_t size;
};
static_assert(sizeof(ShmHead) == 72 && sizeof(ShmEntry) == 24, "manifest layout");
constexpr size_t kMaxManifestBytes = sizeof(ShmHead) + kMaxFrames * sizeof(ShmEntry);

struct ShmManifest {
  std::string segment;           // the segment's name, checked by IsShmSegmentName
  std::vector<ShmEntry> frames;  // 1..kMaxFrames, ascending by frame index
};

// The manifest of `entries` in segment `name`.
std::string EncodeShmManifest(const std::string& name, const std::vector<ShmEntry>& entries);

// A LayerPS segment name: kShmPrefix, then no '/', at most kShmMaxName characters.
bool IsShmSegmentName(const std::string& name);

// Decodes a received manifest part and checks it against the message it came with:
// `frame_sizes` are the sizes of the payload parts as received. Every entry must name a
// distinct payload frame that arrived empty, a distinct slot below kShmSlots, and a
// non-empty block inside the data area starting on a kShmBlockAlign boundary; the name
// must be a segment name. kProtocolError otherwise.
Status ParseShmManifest(const void* data, size_t size, const std::vector<size_t>& frame_sizes,
                        ShmManifest* out);

}  // namespace ps

#endif  // PS_TRANSPORT_SHM_MANIFEST_H_
