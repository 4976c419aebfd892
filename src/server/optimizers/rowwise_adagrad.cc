// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// rowwise_adagrad: FBGEMM's EXACT_ROWWISE_ADAGRAD (no weight decay), for sparse tables.
// One accumulator s per row (not per element: row_state_floats(dim) = 1), the running sum
// of the mean squared gradient over the row:
//   s += (sum_j g_j^2) / dim;  m = lr / (sqrt(s) + epsilon);  x_j -= m * g_j  for every j
// in that order (FBGEMM's), the sum taken over j in order, in float. A row's state is the
// one float after its dim values. Dense tables have no rows: MakeOptimizer refuses them.
#include <cmath>
#include <cstdlib>

#include "server/optimizer.h"
#include "server/optimizers/kernel.h"

namespace ps {
namespace {

PS_DENSE_KERNEL void RowwiseAdagradRows(float* const* rows, const float* const* grads, size_t count,
                                        uint32_t dim, float lr, float eps) {
  constexpr size_t kAhead = 16;  // as ForEachRowOf
  for (size_t r = 0; r < count; ++r) {
    if (r + kAhead < count) {
      __builtin_prefetch(rows[r + kAhead], 1);
      __builtin_prefetch(grads[r + kAhead]);
    }
    float* __restrict x = rows[r];
    const float* __restrict g = grads[r];
    float sum = 0.0f;
    for (uint32_t j = 0; j < dim; ++j) sum += g[j] * g[j];
    const float s = x[dim] + sum / static_cast<float>(dim);
    x[dim] = s;
    const float m = lr / (std::sqrt(s) + eps);
    for (uint32_t j = 0; j < dim; ++j) x[j] -= m * g[j];
  }
}

class RowwiseAdagradOptimizer final : public Optimizer {
 public:
  RowwiseAdagradOptimizer(float lr, float eps) : lr_(lr), eps_(eps) {}
  // No state per element; one float per row.
  uint32_t state_width() const override { return 0; }
  uint32_t row_state_floats(uint32_t) const override { return 1; }
  // A dense table never gets this rule (MakeOptimizer refuses it): these are unreachable.
  void Apply(float*, float*, size_t, const float*, size_t) const override { std::abort(); }
  void ApplyTo(float*, const float*, float*, size_t, const float*, size_t) const override {
    std::abort();
  }
  void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                 uint32_t dim) const override {
    RowwiseAdagradRows(rows, grads, count, dim, lr_, eps_);
  }

 private:
  const float lr_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> NewRowwiseAdagradOptimizer(const TableSpec& spec) {
  return std::make_unique<RowwiseAdagradOptimizer>(spec.learning_rate, spec.epsilon);
}

}  // namespace ps
