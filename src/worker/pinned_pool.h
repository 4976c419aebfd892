// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The device path's shared pieces (CUDA builds only): the process-wide pool of pinned
// host memory, stream-ordered release, and the errors every device call reports.
// Used by worker/device_path.cc (the device calls) and worker/pinned_stage.cc
// (ps::PinnedStage).
#ifndef PS_WORKER_PINNED_POOL_H_
#define PS_WORKER_PINNED_POOL_H_

#if LAYERPS_HAVE_CUDA

#include <memory>
#include <string>

#include "cuda/packing_cuda.h"
#include "ps/status.h"

namespace ps {
namespace device {

// Pinned host memory as a shared owner (back to the pool when the last owner lets go).
// Never destroyed: blocks may be released after main returns, when freeing pinned
// memory is no longer possible. kResourceExhausted when the allocation fails.
StatusOr<std::shared_ptr<uint8_t>> NewPinned(size_t bytes);

// Keeps `owner` alive until `stream` (a cudaStream_t) reaches this point, then drops it.
void ReleaseAfter(void* stream, std::shared_ptr<const void> owner);

// Why the device calls cannot run in this process: what the CUDA runtime says of its
// devices (kFailedPrecondition).
Status NoUsableDevice();

// "CUDA <what>: <the error's text>".
std::string CudaError(const char* what, pack::gpu::Error e);

}  // namespace device
}  // namespace ps

#endif  // LAYERPS_HAVE_CUDA
#endif  // PS_WORKER_PINNED_POOL_H_
