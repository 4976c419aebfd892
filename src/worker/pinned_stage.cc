// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The pinned pool (worker/pinned_pool.h) and ps::PinnedStage over it.
#include "ps/pinned_stage.h"

#include "ps/worker.h"

#if LAYERPS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <string>

#include "common/buffer.h"
#include "worker/pinned_pool.h"
#endif

namespace ps {

#if LAYERPS_HAVE_CUDA

namespace device {
namespace {

void* AllocatePinned(size_t bytes) {
  void* p = nullptr;
  return pack::gpu::AllocPinned(bytes, &p) == pack::gpu::kOk ? p : nullptr;
}
void ReleasePinned(void* p) { pack::gpu::FreePinned(p); }

// Idle pinned memory kept for reuse, process-wide.
constexpr size_t kPinnedIdleBytes = size_t{512} << 20;
BufferPool& PinnedPool() {
  static BufferPool* pool =
      new BufferPool(kPinnedIdleBytes, BufferPool::Allocator{AllocatePinned, ReleasePinned});
  return *pool;
}

}  // namespace

StatusOr<std::shared_ptr<uint8_t>> NewPinned(size_t bytes) {
  std::shared_ptr<uint8_t> p = PinnedPool().TryGet(bytes == 0 ? 1 : bytes);
  if (!p) return ResourceExhausted("CUDA pinned allocation of " + std::to_string(bytes) +
                                   " bytes failed");
  return p;
}

void ReleaseAfter(void* stream, std::shared_ptr<const void> owner) {
  auto s = static_cast<cudaStream_t>(stream);
  auto* held = new std::shared_ptr<const void>(std::move(owner));
  if (cudaLaunchHostFunc(
          s, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, held) !=
      cudaSuccess) {
    cudaStreamSynchronize(s);
    delete held;
  }
}

Status NoUsableDevice() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();  // clear a non-sticky error
  const std::string why = e != cudaSuccess ? std::string(cudaGetErrorString(e))
                                           : std::string("the CUDA runtime sees 0 devices");
  return FailedPrecondition("no usable CUDA device in this process (" + why +
                            "; LayerPS was built with CUDA " + std::to_string(CUDART_VERSION / 1000) +
                            "." + std::to_string(CUDART_VERSION % 1000 / 10) + ")");
}

std::string CudaError(const char* what, pack::gpu::Error e) {
  return std::string("CUDA ") + what + ": " + pack::gpu::ErrorString(e);
}

}  // namespace device

StatusOr<PinnedStage> PinnedStage::Allocate(size_t bytes) {
  if (!Worker::DeviceSupport()) return device::NoUsableDevice();
  auto block = device::NewPinned(bytes);
  if (!block.ok()) return block.status();
  return PinnedStage(std::move(*block), bytes);
}

StatusOr<PinnedStage> PinnedStage::FromDevice(const void* src, size_t bytes, void* stream) {
  if (!Worker::DeviceSupport()) return device::NoUsableDevice();
  if (bytes > 0 && src == nullptr) return InvalidArgument("PinnedStage::FromDevice: null source");
  StatusOr<PinnedStage> stage = Allocate(bytes);
  if (!stage.ok() || bytes == 0) return stage;
  auto s = static_cast<cudaStream_t>(stream);
  pack::gpu::Error e = pack::gpu::CopyAsync(stage->data(), src, bytes, s);
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk) return Internal(device::CudaError("device-to-host copy", e));
  return stage;
}

Status PinnedStage::ToDevice(void* dst, size_t bytes, void* stream) const {
  if (!block_) return FailedPrecondition("PinnedStage::ToDevice: an empty stage");
  if (bytes > size_) {
    return InvalidArgument("PinnedStage::ToDevice: " + std::to_string(bytes) +
                           " bytes from a block of " + std::to_string(size_));
  }
  if (bytes == 0) return Status::OK();
  if (dst == nullptr) return InvalidArgument("PinnedStage::ToDevice: null destination");
  const pack::gpu::Error e = pack::gpu::CopyAsync(dst, block_.get(), bytes, stream);
  if (e != pack::gpu::kOk) return Internal(device::CudaError("host-to-device copy", e));
  device::ReleaseAfter(stream, block_);  // the block stays until the copy has read it
  return Status::OK();
}

Status CopyHostToDevice(const void* src, size_t bytes, void* dst, void* stream) {
  if (!Worker::DeviceSupport()) return device::NoUsableDevice();
  if (bytes == 0) return Status::OK();
  if (src == nullptr || dst == nullptr) return InvalidArgument("CopyHostToDevice: null pointer");
  auto s = static_cast<cudaStream_t>(stream);
  pack::gpu::Error e = pack::gpu::CopyAsync(dst, src, bytes, s);
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);  // `src` may go once this returns
  if (e != pack::gpu::kOk) return Internal(device::CudaError("host-to-device copy", e));
  return Status::OK();
}

#else  // !LAYERPS_HAVE_CUDA

namespace {
Status NoCuda() {
  return FailedPrecondition("LayerPS was built without CUDA (LAYERPS_BUILD_CUDA=OFF): no device calls");
}
}  // namespace

StatusOr<PinnedStage> PinnedStage::Allocate(size_t) { return NoCuda(); }
StatusOr<PinnedStage> PinnedStage::FromDevice(const void*, size_t, void*) { return NoCuda(); }
Status PinnedStage::ToDevice(void*, size_t, void*) const { return NoCuda(); }
Status CopyHostToDevice(const void*, size_t, void*, void*) { return NoCuda(); }

#endif  // LAYERPS_HAVE_CUDA

}  // namespace ps
