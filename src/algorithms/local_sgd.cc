// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "algorithms/local_sgd.h"

namespace ps {
namespace algorithms {

LocalSgd::LocalSgd(const LocalOptimizer& options, size_t n) : options_(options), n_(n) {
  if (options_.momentum > 0.0f) buf_.assign(n, 0.0f);
}

void LocalSgd::Apply(float* x, const float* g, float scale) {
  const float lr = options_.LearningRateAt(step_);
  const float m = options_.momentum;
  if (m > 0.0f) {
    // torch.optim.SGD with dampening 0: b starts at 0, so the first b is g.
    float* b = buf_.data();
    for (size_t i = 0; i < n_; ++i) {
      const float gi = g[i] * scale;
      b[i] = m * b[i] + gi;
      x[i] -= lr * (options_.nesterov ? gi + m * b[i] : b[i]);
    }
  } else {
    for (size_t i = 0; i < n_; ++i) x[i] -= lr * (g[i] * scale);
  }
  ++step_;
}

}  // namespace algorithms
}  // namespace ps
