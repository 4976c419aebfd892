// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The shared-memory manifest a same-host peer sends before a header (ParseShmManifest):
// nothing it accepts may point outside the segment's data area or at a frame that is not
// an empty placeholder. Input: a byte n (payload frames, mod kMaxFrames + 2), n bytes of
// frame sizes (0 = an empty part), then the manifest part.
#include "fuzz_util.h"
#include "transport/shm_manifest.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  if (size < 1) return 0;
  const size_t n = data[0] % (kMaxFrames + 2);
  if (size < 1 + n) return 0;
  std::vector<size_t> frame_sizes(data + 1, data + 1 + n);
  // The manifest in a buffer of its own size, so an over-read is an ASan report.
  std::vector<uint8_t> part(data + 1 + n, data + size);
  ShmManifest m;
  Status s = ParseShmManifest(part.empty() ? nullptr : part.data(), part.size(), frame_sizes, &m);
  if (!s.ok()) return 0;
  FUZZ_ASSERT(IsShmSegmentName(m.segment));
  FUZZ_ASSERT(!m.frames.empty() && m.frames.size() <= kMaxFrames);
  std::vector<bool> seen(frame_sizes.size(), false);
  for (const ShmEntry& e : m.frames) {
    FUZZ_ASSERT(e.frame < frame_sizes.size() && frame_sizes[e.frame] == 0 && !seen[e.frame]);
    seen[e.frame] = true;
    FUZZ_ASSERT(e.slot < kShmSlots && e.size > 0 && e.offset % kShmBlockAlign == 0);
    FUZZ_ASSERT(e.offset + e.size <= kShmDataBytes && e.offset + e.size > e.offset);
  }
  // What the sender would write for it parses back the same.
  const std::string again = EncodeShmManifest(m.segment, m.frames);
  ShmManifest m2;
  FUZZ_ASSERT(ParseShmManifest(again.data(), again.size(), frame_sizes, &m2).ok());
  FUZZ_ASSERT(m2.segment == m.segment && m2.frames.size() == m.frames.size());
  return 0;
}
