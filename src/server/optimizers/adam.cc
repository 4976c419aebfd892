// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// adam: torch.optim.Adam (no weight decay, no amsgrad). Three state planes: the moments m
// and v, and the element's step count t (a float: exact to 2^24 steps). Dense tables step
// every element together, as torch steps a tensor; a sparse row counts its own steps (the
// lazy variant: a row is updated, and its moments decay, only when a push touches it).
//   t += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   x -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order)
#include <cmath>

#include "server/optimizer.h"

namespace ps {
namespace {

class AdamOptimizer final : public ElementwiseOptimizer<AdamOptimizer> {
 public:
  AdamOptimizer(float lr, float b1, float b2, float eps) : lr_(lr), b1_(b1), b2_(b2), eps_(eps) {}
  uint32_t state_width() const override { return 3; }
  void Step(float x, float* out, float* state, size_t stride, float g) const {
    float& m = state[0];
    float& v = state[stride];
    float& t = state[2 * stride];
    t += 1.0f;
    m = b1_ * m + (1.0f - b1_) * g;
    v = b2_ * v + (1.0f - b2_) * g * g;
    // Bias corrections in double, as torch computes them from a Python float step.
    const double c1 = 1.0 - std::pow(static_cast<double>(b1_), static_cast<double>(t));
    const double c2 = 1.0 - std::pow(static_cast<double>(b2_), static_cast<double>(t));
    const float step_size = static_cast<float>(lr_ / c1);
    const float denom = std::sqrt(v) / static_cast<float>(std::sqrt(c2)) + eps_;
    *out = x - step_size * (m / denom);
  }

 private:
  const float lr_, b1_, b2_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> NewAdamOptimizer(const TableSpec& spec) {
  return std::make_unique<AdamOptimizer>(spec.learning_rate, spec.beta1, spec.beta2, spec.epsilon);
}

}  // namespace ps
