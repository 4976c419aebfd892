// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace ps {
namespace {
std::atomic<uint64_t> g_shm_counter{0};
}  // namespace

ShmSender::~ShmSender() {
  if (base_ != nullptr) munmap(base_, kShmSegmentBytes);
  if (!name_.empty()) shm_unlink(name_.c_str());
}

bool ShmSender::Init() {
  name_ =
      std::string(kShmPrefix) + std::to_string(getpid()) + "-" + std::to_string(g_shm_counter++);
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    name_.clear();
    return false;
  }
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(kShmSegmentBytes)) == 0) {
    p = mmap(nullptr, kShmSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name_.c_str());
    name_.clear();
    return false;
  }
  base_ = p;
  return true;
}

bool ShmSender::Put(const Frame& f, uint32_t frame_index, ShmEntry* entry) {
  Reclaim();
  const size_t size = (f.size() + 63) / 64 * 64;
  if (live_.size() >= kShmSlots) return false;
  uint64_t off;
  if (!Allocate(size, &off)) return false;
  const uint32_t slot = next_slot_;
  std::atomic<uint32_t>& flag = ShmFlags(base_)[slot];
  if (flag.load(std::memory_order_acquire) != 0) return false;  // still held (cannot happen)
  next_slot_ = (next_slot_ + 1) % kShmSlots;
  std::memcpy(static_cast<uint8_t*>(base_) + kShmControlBytes + off, f.data(), f.size());
  flag.store(1, std::memory_order_release);
  live_.push_back(Block{off, size, slot});
  head_ = off + size;
  *entry = ShmEntry{frame_index, slot, off, f.size()};
  return true;
}

void ShmSender::Undo(size_t blocks) {
  for (size_t i = 0; i < blocks && !live_.empty(); ++i) {
    const Block b = live_.back();
    live_.pop_back();
    ShmFlags(base_)[b.slot].store(0, std::memory_order_release);
    next_slot_ = b.slot;
    head_ = b.offset;
  }
  if (live_.empty()) head_ = tail_ = 0;
}

void ShmSender::Reclaim() {
  while (!live_.empty() &&
         ShmFlags(base_)[live_.front().slot].load(std::memory_order_acquire) == 0) {
    live_.pop_front();
  }
  if (live_.empty()) {
    head_ = tail_ = 0;
  } else {
    tail_ = live_.front().offset;
  }
}

bool ShmSender::Allocate(size_t size, uint64_t* off) {
  if (live_.empty()) {
    *off = 0;
    return size <= kShmDataBytes;
  }
  if (head_ > tail_) {
    if (kShmDataBytes - head_ >= size) {
      *off = head_;
      return true;
    }
    if (tail_ > size) {  // wrap; keep one byte between head and tail
      *off = 0;
      return true;
    }
    return false;
  }
  // Wrapped: free space is [head_, tail_).
  if (tail_ > head_ && tail_ - head_ > size) {
    *off = head_;
    return true;
  }
  return false;
}

ShmMapping::~ShmMapping() {
  if (base != nullptr) munmap(base, kShmSegmentBytes);
}

}  // namespace ps
