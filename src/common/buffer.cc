// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/buffer.h"

#include "common/mutex.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

namespace ps {

Frame Frame::Copy(const void* data, size_t size) {
  auto v = std::make_shared<std::vector<char>>(size);
  if (size) std::memcpy(v->data(), data, size);
  return AdoptVector(std::move(v));
}

Frame Frame::Adopt(std::vector<char>&& bytes) {
  return AdoptVector(std::make_shared<std::vector<char>>(std::move(bytes)));
}

// ---- BufferPool ---------------------------------------------------------------------------

namespace {
void* AlignedAllocate(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
void AlignedRelease(void* p) { std::free(p); }
}  // namespace

struct BufferPool::State {
  State(size_t max, Allocator a, size_t min_pooled, size_t min_class)
      : max_idle(max), allocator(a), min_pooled_bytes(min_pooled), min_class_bytes(min_class) {}
  ~State() {
    for (auto& kv : idle)
      for (void* p : kv.second) allocator.release(p);
  }
  const size_t max_idle;
  const Allocator allocator;
  const size_t min_pooled_bytes;  // below: a plain allocation, not pooled
  const size_t min_class_bytes;   // the smallest size class
  Mutex mu;
  std::map<size_t, std::vector<void*>> idle GUARDED_BY(mu);  // size class -> buffers
  size_t idle_bytes GUARDED_BY(mu) = 0;
};

BufferPool::BufferPool(size_t max_idle_bytes)
    : state_(std::make_shared<State>(max_idle_bytes, Allocator{AlignedAllocate, AlignedRelease},
                                     kMinPooledBytes, kMinPooledBytes)) {}
BufferPool::BufferPool(size_t max_idle_bytes, Allocator allocator)
    : state_(std::make_shared<State>(max_idle_bytes, allocator, 0, size_t{4} << 10)) {}
BufferPool::~BufferPool() = default;

size_t BufferPool::idle_bytes() const {
  MutexLock lock(&state_->mu);
  return state_->idle_bytes;
}

std::shared_ptr<uint8_t> BufferPool::Get(size_t bytes) {
  std::shared_ptr<uint8_t> buf = TryGet(bytes);
  if (!buf) throw std::bad_alloc();
  return buf;
}

std::shared_ptr<uint8_t> BufferPool::TryGet(size_t bytes) {
  if (bytes < state_->min_pooled_bytes) {
    return std::shared_ptr<uint8_t>(new (std::nothrow) uint8_t[bytes == 0 ? 1 : bytes],
                                    std::default_delete<uint8_t[]>());
  }
  // Size classes: powers of two and the midpoints between them (waste <= 1/3).
  size_t cls = state_->min_class_bytes;
  while (cls < bytes) {
    const size_t mid = cls + cls / 2;
    if (mid >= bytes) {
      cls = mid;
      break;
    }
    cls *= 2;
  }
  void* p = nullptr;
  {
    MutexLock lock(&state_->mu);
    auto it = state_->idle.find(cls);
    if (it != state_->idle.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      state_->idle_bytes -= cls;
    }
  }
  if (p == nullptr) {
    p = state_->allocator.allocate(cls);
    if (p == nullptr) return nullptr;
  }
  std::shared_ptr<State> st = state_;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [st, cls](uint8_t* q) {
    {
      MutexLock lock(&st->mu);
      if (st->idle_bytes + cls <= st->max_idle) {
        st->idle[cls].push_back(q);
        st->idle_bytes += cls;
        return;
      }
    }
    st->allocator.release(q);
  });
}

}  // namespace ps
