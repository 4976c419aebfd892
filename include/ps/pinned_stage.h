// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// GPU memory staged in the device path's pinned pool, for the calls that have no device
// variant of their own: the collectives (ps/communicator.h), send/receive between
// workers, PushPull and Assign. The device calls of ps/worker.h (PushDevice,
// PullSparseDevice, ...) pack on the GPU instead and need none of this.
//
// A PinnedStage holds one block of page-locked host memory from the process-wide pool
// that the device calls also draw on (freed blocks are kept for reuse: allocating pinned
// memory costs milliseconds and synchronizes the device). The pattern, on the caller's
// stream:
//
//   auto in = ps::PinnedStage::FromDevice(d_grad, bytes, stream);   // copy down, wait
//   comm.AllReduce(in->data(), in->data(), n, DataType::kFloat32, options);
//   in->ToDevice(d_grad, bytes, stream);    // copy up, enqueued after the caller's work
//
// Builds without CUDA, and processes that see no GPU, get kFailedPrecondition from every
// call, saying which (see Worker::DeviceSupport).
//
// Thread-safety: the static calls are thread-safe; one PinnedStage is not to be used by
// two threads at once. Copies of a PinnedStage share its block.
#ifndef PS_PINNED_STAGE_H_
#define PS_PINNED_STAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ps/export.h"
#include "ps/status.h"

namespace ps {

class LAYERPS_EXPORT PinnedStage {
 public:
  // A block of `bytes` (uninitialized) from the pool: the target of a collective whose
  // result goes up with ToDevice.
  static StatusOr<PinnedStage> Allocate(size_t bytes);
  // A block holding `bytes` copied from device memory `src`. The copy is enqueued on
  // `stream` (a cudaStream_t as void*; nullptr = the default stream), so it reads what
  // the caller's earlier work on that stream wrote; the call waits for that stream only
  // (never the whole device).
  static StatusOr<PinnedStage> FromDevice(const void* src, size_t bytes, void* stream);

  // Enqueues the copy of the block's first `bytes` (<= size()) to device memory `dst` on
  // `stream` and returns: later work on that stream sees the values. The block stays
  // allocated until the stream has read it, even if this object is dropped at once.
  Status ToDevice(void* dst, size_t bytes, void* stream) const;

  void* data() const { return block_.get(); }
  size_t size() const { return size_; }

 private:
  PinnedStage(std::shared_ptr<uint8_t> block, size_t size) : block_(std::move(block)), size_(size) {}
  std::shared_ptr<uint8_t> block_;
  size_t size_ = 0;
};

// Copies `bytes` from host memory `src` (pageable or pinned) to device memory `dst`,
// enqueued on `stream`, and waits for that stream: for results the core hands back in
// its own host buffers (AllGatherV, AllToAllV). kFailedPrecondition as above.
LAYERPS_EXPORT Status CopyHostToDevice(const void* src, size_t bytes, void* dst, void* stream);

}  // namespace ps

#endif  // PS_PINNED_STAGE_H_
