// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/shm_manifest.h"

#include <cstring>

namespace ps {

std::string EncodeShmManifest(const std::string& name, const std::vector<ShmEntry>& entries) {
  ShmHead head{};
  head.magic = kShmMagic;
  head.count = static_cast<uint32_t>(entries.size());
  std::strncpy(head.name, name.c_str(), sizeof(head.name) - 1);
  std::string out(sizeof(head) + entries.size() * sizeof(ShmEntry), '\0');
  std::memcpy(&out[0], &head, sizeof(head));
  if (!entries.empty()) {
    std::memcpy(&out[sizeof(head)], entries.data(), entries.size() * sizeof(ShmEntry));
  }
  return out;
}

bool IsShmSegmentName(const std::string& name) {
  const size_t prefix = sizeof(kShmPrefix) - 1;
  return name.size() > prefix && name.size() <= kShmMaxName &&
         name.compare(0, prefix, kShmPrefix) == 0 && name.find('/', 1) == std::string::npos &&
         name.find('\0') == std::string::npos;
}

Status ParseShmManifest(const void* data, size_t size, const std::vector<size_t>& frame_sizes,
                        ShmManifest* out) {
  if (size < sizeof(ShmHead) || size > kMaxManifestBytes ||
      (size - sizeof(ShmHead)) % sizeof(ShmEntry) != 0) {
    return ProtocolError("malformed shared-memory manifest");
  }
  ShmHead head;
  std::memcpy(&head, data, sizeof(head));
  const size_t count = (size - sizeof(ShmHead)) / sizeof(ShmEntry);
  if (head.magic != kShmMagic || head.count != count || count == 0) {
    return ProtocolError("bad shared-memory manifest");
  }
  head.name[sizeof(head.name) - 1] = '\0';
  std::string name(head.name);
  if (!IsShmSegmentName(name)) {
    return ProtocolError("'" + name + "' is not a shared-memory segment name");
  }
  std::vector<ShmEntry> entries(count);
  std::memcpy(entries.data(), static_cast<const uint8_t*>(data) + sizeof(ShmHead),
              count * sizeof(ShmEntry));
  for (size_t i = 0; i < count; ++i) {
    const ShmEntry& e = entries[i];
    // Ascending frame indices: no frame is referenced twice.
    if (e.frame >= frame_sizes.size() || frame_sizes[e.frame] != 0 ||
        (i > 0 && e.frame <= entries[i - 1].frame) || e.slot >= kShmSlots || e.size == 0 ||
        e.offset % kShmBlockAlign != 0 || e.offset > kShmDataBytes ||
        e.size > kShmDataBytes - e.offset) {
      return ProtocolError("bad shared-memory frame reference");
    }
    for (size_t j = 0; j < i; ++j) {
      if (entries[j].slot == e.slot) return ProtocolError("shared-memory slot named twice");
    }
  }
  out->segment = std::move(name);
  out->frames = std::move(entries);
  return Status::OK();
}

}  // namespace ps
