// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ftrl: FTRL-proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches",
// 2013, Algorithm 1) per element, with alpha = learning_rate, beta = ftrl_beta, l1, l2.
// Two state planes, z and n:
//   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma * x;  n += g^2
//   x = 0                                                     if |z| <= l1
//   x = -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)   otherwise
// The weight is a function of (z, n): a row that is evicted and recreated starts again.
#include <cmath>

#include "server/optimizer.h"

namespace ps {
namespace {

class FtrlOptimizer final : public ElementwiseOptimizer<FtrlOptimizer> {
 public:
  FtrlOptimizer(float alpha, float beta, float l1, float l2)
      : alpha_(alpha), beta_(beta), l1_(l1), l2_(l2) {}
  uint32_t state_width() const override { return 2; }
  void Step(float x, float* out, float* state, size_t stride, float g) const {
    float& z = state[0];
    float& n = state[stride];
    const float n_new = n + g * g;
    const float sigma = (std::sqrt(n_new) - std::sqrt(n)) / alpha_;
    z += g - sigma * x;
    n = n_new;
    if (std::fabs(z) <= l1_) {
      *out = 0.0f;
    } else {
      const float sign = z < 0 ? -1.0f : 1.0f;
      *out = -(z - sign * l1_) / ((beta_ + std::sqrt(n)) / alpha_ + l2_);
    }
  }

 private:
  const float alpha_, beta_, l1_, l2_;
};

}  // namespace

std::unique_ptr<Optimizer> NewFtrlOptimizer(const TableSpec& spec) {
  return std::make_unique<FtrlOptimizer>(spec.learning_rate, spec.ftrl_beta, spec.l1, spec.l2);
}

}  // namespace ps
