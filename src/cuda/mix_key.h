// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// MixKey (common/hash.h) callable from device code. A copy, because common/hash.h is
// host-only; the GPU test checks that both agree on random values, and bucketing on the
// GPU is compared with the CPU reference key by key.
#ifndef PS_CUDA_MIX_KEY_H_
#define PS_CUDA_MIX_KEY_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps {
namespace pack {
namespace gpu {

// Must stay identical to ps::MixKey (the splitmix64 finalizer).
PS_HOST_DEVICE inline uint64_t MixKeyHD(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace gpu
}  // namespace pack
}  // namespace ps

#endif  // PS_CUDA_MIX_KEY_H_
