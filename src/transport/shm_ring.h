// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The shared-memory ring of the ZeroMQ transport's same-host path (zmq_transport.cc):
// the sender's segment, written as a ring of blocks, and the receiver's mapping of a
// peer's segment. A segment is kShmSlots flags (one per block in flight: set by the
// sender, cleared by the receiver once it let go of the block), then the data ring
// (transport/shm_manifest.h has the layout's constants and the manifest that names blocks).
#ifndef PS_TRANSPORT_SHM_RING_H_
#define PS_TRANSPORT_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "common/buffer.h"
#include "transport/shm_manifest.h"

namespace ps {

// The flags at the start of a mapped segment.
inline std::atomic<uint32_t>* ShmFlags(void* base) {
  return static_cast<std::atomic<uint32_t>*>(base);
}
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "shared flags must be plain lock-free words");

// The sending side: a segment this node created for one peer, used as a ring. Blocks are
// reclaimed in allocation order once the receiver cleared their flags. Not thread-safe:
// the transport guards it with the peer's mutex.
class ShmSender {
 public:
  ShmSender() = default;
  ShmSender(const ShmSender&) = delete;
  ShmSender& operator=(const ShmSender&) = delete;
  ~ShmSender();

  // Maps a fresh segment; false if shared memory is unavailable.
  bool Init();

  const std::string& name() const { return name_; }

  // Copies `f` into the segment; false (nothing changed) when there is no room.
  bool Put(const Frame& f, uint32_t frame_index, ShmEntry* entry);

  // A message that was prepared but not sent: take back its blocks (most recent first).
  void Undo(size_t blocks);

 private:
  struct Block {
    uint64_t offset, size;
    uint32_t slot;
  };

  void Reclaim();
  // Ring allocation in [0, kShmDataBytes): live bytes are [tail_, head_) or, wrapped,
  // [tail_, end) + [0, head_).
  bool Allocate(size_t size, uint64_t* off);

  std::string name_;
  void* base_ = nullptr;
  std::deque<Block> live_;
  uint64_t head_ = 0, tail_ = 0;
  uint32_t next_slot_ = 0;
};

// The receiving side: a peer's segment, mapped on first use; a mapping lives as long as
// any Frame handed out from it. Only the receive thread opens mappings.
struct ShmMapping {
  void* base = nullptr;
  ShmMapping() = default;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping();
};

}  // namespace ps

#endif  // PS_TRANSPORT_SHM_RING_H_
