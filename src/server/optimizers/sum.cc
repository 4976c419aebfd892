// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// sum: aggregation, x += g. A pull returns the running sum; workers run their own
// optimizer on it (or use barriers to read one step's total).
#include "server/optimizer.h"
#include "server/optimizers/kernel.h"

namespace ps {
namespace {

PS_DENSE_KERNEL void SumKernel(float* __restrict x, const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += g[i];
}

PS_DENSE_KERNEL void SumKernelTo(float* __restrict out, const float* __restrict x,
                                 const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + g[i];
}

class SumOptimizer final : public Optimizer {
 public:
  uint32_t state_width() const override { return 0; }
  void Apply(float* x, float*, size_t, const float* g, size_t n) const override {
    SumKernel(x, g, n);
  }
  void ApplyTo(float* out, const float* x, float*, size_t, const float* g,
               size_t n) const override {
    SumKernelTo(out, x, g, n);
  }
  void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                 uint32_t dim) const override {
    ForEachRowOf(rows, grads, count, [dim](float* __restrict x, const float* __restrict g) {
      for (uint32_t k = 0; k < dim; ++k) x[k] += g[k];
    });
  }
};

}  // namespace

std::unique_ptr<Optimizer> NewSumOptimizer() { return std::make_unique<SumOptimizer>(); }

}  // namespace ps
