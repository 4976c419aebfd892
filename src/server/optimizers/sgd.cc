// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// sgd: x -= learning_rate * g, applied as each push arrives.
#include "server/optimizer.h"
#include "server/optimizers/kernel.h"

namespace ps {
namespace {

PS_DENSE_KERNEL void SgdKernel(float* __restrict x, const float* __restrict g, size_t n, float lr) {
  for (size_t i = 0; i < n; ++i) x[i] -= lr * g[i];
}

PS_DENSE_KERNEL void SgdKernelTo(float* __restrict out, const float* __restrict x,
                                 const float* __restrict g, size_t n, float lr) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] - lr * g[i];
}

class SgdOptimizer final : public Optimizer {
 public:
  explicit SgdOptimizer(float lr) : lr_(lr) {}
  uint32_t state_width() const override { return 0; }
  void Apply(float* x, float*, size_t, const float* g, size_t n) const override {
    SgdKernel(x, g, n, lr_);
  }
  void ApplyTo(float* out, const float* x, float*, size_t, const float* g,
               size_t n) const override {
    SgdKernelTo(out, x, g, n, lr_);
  }
  void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                 uint32_t dim) const override {
    const float lr = lr_;
    ForEachRowOf(rows, grads, count, [dim, lr](float* __restrict x, const float* __restrict g) {
      for (uint32_t k = 0; k < dim; ++k) x[k] -= lr * g[k];
    });
  }

 private:
  const float lr_;
};

}  // namespace

std::unique_ptr<Optimizer> NewSgdOptimizer(float learning_rate) {
  return std::make_unique<SgdOptimizer>(learning_rate);
}

}  // namespace ps
