// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// elastic: the centre variable of elastic averaging (EASGD). A push carries a worker's
// parameters x_i, not a gradient; the centre moves towards them by elastic_alpha:
//   x += alpha * (x_i - x)
// Stateless. The policies answer a pushpull on an elastic table with the centre BEFORE
// the update (server/apply_on_arrival.cc), so one round trip is the whole exchange: the
// worker then does x_i -= alpha * (x_i - x_old).
#include "server/optimizer.h"
#include "server/optimizers/kernel.h"

namespace ps {
namespace {

PS_DENSE_KERNEL void ElasticKernel(float* __restrict x, const float* __restrict xi, size_t n,
                                   float alpha) {
  for (size_t i = 0; i < n; ++i) x[i] += alpha * (xi[i] - x[i]);
}

PS_DENSE_KERNEL void ElasticKernelTo(float* __restrict out, const float* __restrict x,
                                     const float* __restrict xi, size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + alpha * (xi[i] - x[i]);
}

class ElasticOptimizer final : public Optimizer {
 public:
  explicit ElasticOptimizer(float alpha) : alpha_(alpha) {}
  uint32_t state_width() const override { return 0; }
  void Apply(float* x, float*, size_t, const float* g, size_t n) const override {
    ElasticKernel(x, g, n, alpha_);
  }
  void ApplyTo(float* out, const float* x, float*, size_t, const float* g,
               size_t n) const override {
    ElasticKernelTo(out, x, g, n, alpha_);
  }
  void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                 uint32_t dim) const override {
    const float alpha = alpha_;
    ForEachRowOf(rows, grads, count, [dim, alpha](float* __restrict x, const float* __restrict g) {
      for (uint32_t k = 0; k < dim; ++k) x[k] += alpha * (g[k] - x[k]);
    });
  }

 private:
  const float alpha_;
};

}  // namespace

std::unique_ptr<Optimizer> NewElasticOptimizer(const TableSpec& spec) {
  return std::make_unique<ElasticOptimizer>(spec.elastic_alpha);
}

}  // namespace ps
