// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ShmReceiver (shm_receiver.h): the mapping of the segments members' manifests name, and
// the frames resolved into them.
#include "transport/shm_receiver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <iterator>

#include "transport/shm_manifest.h"

namespace ps {
namespace {

// Peers' segments mapped at once (address space); the segments themselves:
// transport/shm_ring.h.
constexpr size_t kShmMaxMappings = 1024;

}  // namespace

void ShmReceiver::SetPeers(std::vector<std::string> identities) {
  MutexLock lock(&mappings_mu_);
  shm_peers_ = std::unordered_set<std::string>(identities.begin(), identities.end());
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    it = shm_peers_.count(it->first) == 0 ? mappings_.erase(it) : std::next(it);
  }
}

StatusOr<std::shared_ptr<ShmMapping>> ShmReceiver::MapSegment(const std::string& name,
                                                              const std::string& identity) {
  if (!shm_enabled_) {
    return ProtocolError("shared-memory manifest refused: shared memory is off on this node");
  }
  MutexLock lock(&mappings_mu_);
  if (shm_peers_.count(identity) == 0) {
    return ProtocolError("shared-memory manifest from a connection that is not a member's");
  }
  auto it = mappings_.find(identity);
  if (it != mappings_.end() && it->second.name == name) return it->second.map;
  if (!IsShmSegmentName(name)) {
    return ProtocolError("'" + name + "' is not a shared-memory segment name");
  }
  if (it == mappings_.end() && mappings_.size() >= kShmMaxMappings) {
    return ProtocolError("too many shared-memory segments mapped (" +
                         std::to_string(kShmMaxMappings) + ")");
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return ProtocolError("cannot open shared-memory segment '" + name + "'");
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == kShmSegmentBytes) {
    p = mmap(nullptr, kShmSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  // The name is only needed to open it once: remove it so nothing is left behind.
  shm_unlink(name.c_str());
  if (p == MAP_FAILED) return ProtocolError("cannot map shared-memory segment '" + name + "'");
  auto m = std::make_shared<ShmMapping>();
  m->base = p;
  mappings_[identity] = Mapped{name, m};
  return m;
}

Status ShmReceiver::Resolve(const void* manifest, size_t manifest_size, const std::string& identity,
                            std::vector<Frame>* frames) {
  std::vector<size_t> sizes;
  for (const Frame& f : *frames) sizes.push_back(f.size());
  ShmManifest m;
  PS_RETURN_IF_ERROR(ParseShmManifest(manifest, manifest_size, sizes, &m));
  StatusOr<std::shared_ptr<ShmMapping>> mapped = MapSegment(m.segment, identity);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<ShmMapping> map = *mapped;
  for (const ShmEntry& e : m.frames) {
    std::atomic<uint32_t>* flag = ShmFlags(map->base) + e.slot;
    const uint8_t* data = static_cast<const uint8_t*>(map->base) + kShmControlBytes + e.offset;
    std::shared_ptr<const void> owner(
        data, [map, flag](const void*) { flag->store(0, std::memory_order_release); });
    (*frames)[e.frame] = Frame::Borrow(data, e.size, std::move(owner));
  }
  return Status::OK();
}

}  // namespace ps
