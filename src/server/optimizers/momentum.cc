// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// momentum / nesterov: torch.optim.SGD(momentum=m, nesterov=...) with dampening 0 and no
// weight decay. One state plane, the velocity b (zero at first: b = m * 0 + g = g, as
// torch's first step).
//   b = m * b + g;  x -= lr * b                 (momentum)
//   b = m * b + g;  x -= lr * (g + m * b)       (nesterov)
#include "server/optimizer.h"

namespace ps {
namespace {

class MomentumOptimizer final : public ElementwiseOptimizer<MomentumOptimizer> {
 public:
  MomentumOptimizer(float lr, float m, bool nesterov) : lr_(lr), m_(m), nesterov_(nesterov) {}
  uint32_t state_width() const override { return 1; }
  void Step(float x, float* out, float* state, size_t, float g) const {
    const float b = m_ * state[0] + g;
    state[0] = b;
    *out = x - lr_ * (nesterov_ ? g + m_ * b : b);
  }

 private:
  const float lr_, m_;
  const bool nesterov_;
};

}  // namespace

std::unique_ptr<Optimizer> NewMomentumOptimizer(const TableSpec& spec) {
  return std::make_unique<MomentumOptimizer>(spec.learning_rate, spec.momentum,
                                             spec.rule == UpdateRule::kNesterov);
}

}  // namespace ps
