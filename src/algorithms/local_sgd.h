// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The local update every worker-side algorithm shares: SGD with optional momentum or
// Nesterov and the LocalOptimizer's schedule (include/ps/algorithm.h has the formulas).
//
// Thread-safety: none; the owning Trainer serializes Apply with its own lock.
#ifndef PS_ALGORITHMS_LOCAL_SGD_H_
#define PS_ALGORITHMS_LOCAL_SGD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/algorithm.h"

namespace ps {
namespace algorithms {

class LocalSgd {
 public:
  LocalSgd(const LocalOptimizer& options, size_t n);
  // x -= lr(step) * update(g), with `scale` applied to g first (e.g. 1/W after an
  // all-reduce of gradients). Advances the step counter.
  void Apply(float* x, const float* g, float scale = 1.0f);
  uint64_t step() const { return step_; }
  float current_learning_rate() const { return options_.LearningRateAt(step_); }

 private:
  LocalOptimizer options_;
  size_t n_;
  std::vector<float> buf_;  // momentum buffer (empty without momentum)
  uint64_t step_ = 0;
};

}  // namespace algorithms
}  // namespace ps

#endif  // PS_ALGORITHMS_LOCAL_SGD_H_
