// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PS_DENSE_KERNEL: element-wise update loops compiled for AVX-512, AVX2 and the baseline;
// the loader picks the widest the CPU has (GCC function multi-versioning). Results are
// bit-identical across versions: no loop is reassociated nor contracted into fused
// multiply-adds (fp-contract=off), so a rule's result never depends on the machine.
#ifndef PS_SERVER_OPTIMIZERS_KERNEL_H_
#define PS_SERVER_OPTIMIZERS_KERNEL_H_

// (Not under ThreadSanitizer: the loader runs the versions' resolver before TSan's runtime
// is set up, which crashes the program at load.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define PS_DENSE_KERNEL \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#elif defined(__GNUC__) && !defined(__clang__)
#define PS_DENSE_KERNEL __attribute__((optimize("fp-contract=off")))
#else
#define PS_DENSE_KERNEL
#endif

#include <cstddef>

namespace ps {

// Calls f(row, grad) for every row of a sparse batch, prefetching a few rows ahead (rows
// are scattered over the store's blocks).
template <typename F>
inline void ForEachRowOf(float* const* rows, const float* const* grads, size_t count, F f) {
  constexpr size_t kAhead = 16;
  for (size_t j = 0; j < count; ++j) {
    if (j + kAhead < count) {
      __builtin_prefetch(rows[j + kAhead], 1);
      __builtin_prefetch(grads[j + kAhead]);
    }
    f(rows[j], grads[j]);
  }
}

}  // namespace ps

#endif  // PS_SERVER_OPTIMIZERS_KERNEL_H_
