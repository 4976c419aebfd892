// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Buffers that travel: Frame (a run of bytes and the owner that keeps it alive, what the
// transport sends without a copy) and BufferPool (recycled, already faulted-in buffers for
// replies). Every role uses them; they know nothing of the network.
#ifndef PS_COMMON_BUFFER_H_
#define PS_COMMON_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ps {

// A run of bytes kept alive by `owner`. Frames built with Borrow/Adopt are sent by the
// transport without a copy; the owner is released when the transport is done with it.
class Frame {
 public:
  Frame() = default;
  // Copies the bytes.
  static Frame Copy(const void* data, size_t size);
  // Takes ownership of a vector's storage.
  static Frame Adopt(std::vector<char>&& bytes);
  template <typename T>
  static Frame AdoptVector(std::shared_ptr<std::vector<T>> v) {
    const void* p = v->data();
    const size_t n = v->size() * sizeof(T);
    return Frame(std::shared_ptr<const void>(std::move(v), p), p, n);
  }
  // Shares memory that `keep_alive` keeps valid (may be a no-op token for borrowed memory).
  static Frame Borrow(const void* data, size_t size, std::shared_ptr<const void> keep_alive) {
    return Frame(std::move(keep_alive), data, size);
  }

  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  Frame(std::shared_ptr<const void> owner, const void* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  size_t size_ = 0;
};

// Reply buffers (pulls). A fresh std::vector per reply is zero-filled and, for large
// replies, page-faulted in again every time (glibc serves big blocks with mmap). The pool
// hands out uninitialized buffers from per-size-class free lists and takes them back when
// the last reference (the transport's, once the reply is sent) is dropped.
// Thread-safe. Buffers may outlive the pool object (they keep its state alive).
//
// A pool may also sit over another allocator whose calls are costly at any size, such as
// page-locked host memory for GPU copies (allocating and freeing it synchronizes the
// device): then every size is pooled, from size classes of 4 KiB up.
class BufferPool {
 public:
  // Requests below this many bytes get a plain allocation (small blocks are cheap).
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;
  // An allocator: `allocate` returns null on failure; `release` frees what it returned.
  struct Allocator {
    void* (*allocate)(size_t bytes);
    void (*release)(void* p);
  };
  // Idle buffers kept beyond this total are freed.
  explicit BufferPool(size_t max_idle_bytes = size_t{512} << 20);
  BufferPool(size_t max_idle_bytes, Allocator allocator);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` bytes (64-byte aligned, contents unspecified); throws
  // std::bad_alloc when the allocator fails.
  std::shared_ptr<uint8_t> Get(size_t bytes);
  // The same, or null when the allocator fails.
  std::shared_ptr<uint8_t> TryGet(size_t bytes);

  // Idle bytes held now (for tests and stats).
  size_t idle_bytes() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ps

#endif  // PS_COMMON_BUFFER_H_
