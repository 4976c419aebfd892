// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// adagrad: torch.optim.Adagrad (lr_decay 0, initial accumulator 0, no weight decay). One
// state plane, the sum of squared gradients s.
//   s += g * g;  x -= lr * g / (sqrt(s) + epsilon)
#include <cmath>

#include "server/optimizer.h"

namespace ps {
namespace {

class AdagradOptimizer final : public ElementwiseOptimizer<AdagradOptimizer> {
 public:
  AdagradOptimizer(float lr, float eps) : lr_(lr), eps_(eps) {}
  uint32_t state_width() const override { return 1; }
  void Step(float x, float* out, float* state, size_t, float g) const {
    const float s = state[0] + g * g;
    state[0] = s;
    *out = x - lr_ * (g / (std::sqrt(s) + eps_));
  }

 private:
  const float lr_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> NewAdagradOptimizer(const TableSpec& spec) {
  return std::make_unique<AdagradOptimizer>(spec.learning_rate, spec.epsilon);
}

}  // namespace ps
