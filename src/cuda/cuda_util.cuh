// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Helpers shared by the .cu files of src/cuda (internal).
#ifndef PS_CUDA_CUDA_UTIL_CUH_
#define PS_CUDA_CUDA_UTIL_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/packing_cuda.h"

// Returns the CUDA error of expr from the enclosing function (which returns Error).
#define PS_CUDA_TRY(expr)                                                                      \
  do {                                                                                         \
    const cudaError_t ps_cuda_err_ = (expr);                                                   \
    if (ps_cuda_err_ != cudaSuccess) return static_cast<::ps::pack::gpu::Error>(ps_cuda_err_); \
  } while (0)

// After a kernel launch: reports a launch failure (bad configuration, no device).
#define PS_CUDA_TRY_LAUNCH() PS_CUDA_TRY(cudaGetLastError())

namespace ps {
namespace pack {
namespace gpu {
namespace detail {

constexpr int kThreads = 256;

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for `work` threads of kThreads each, at least 1, capped (kernels grid-stride).
inline unsigned Blocks(size_t work, int threads = kThreads) {
  const size_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(b, 1), size_t{1} << 30));
}

// Grid-stride loop over [0, n).
#define PS_GRID_LOOP(i, n)                                                             \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// Carves aligned sub-arrays out of one buffer. With a null base it only measures.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(size_t count) {
    offset_ = (offset_ + 255) & ~size_t{255};
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += count * sizeof(T);
    return p;
  }
  size_t size() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

}  // namespace detail
}  // namespace gpu
}  // namespace pack
}  // namespace ps

#endif  // PS_CUDA_CUDA_UTIL_CUH_
