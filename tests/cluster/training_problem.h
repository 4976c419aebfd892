// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A small deterministic training problem for the algorithm tests: least-squares linear
// regression, loss(x) = mean over the batch of (a_j . x - b_j)^2 / 2. Step t's global
// batch is `global_batch` fixed rows; worker r of W takes rows [r*B/W, (r+1)*B/W) of it,
// so the mean of the W workers' gradients is exactly the global batch's gradient (up to
// float rounding). The single-process reference applies the same LocalOptimizer to it.
#ifndef PS_TESTS_TRAINING_PROBLEM_H_
#define PS_TESTS_TRAINING_PROBLEM_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ps/algorithm.h"

namespace ps {
namespace testing {

class LinearRegression {
 public:
  LinearRegression(size_t dim, size_t rows, uint64_t seed = 7) : dim_(dim), a_(rows * dim), b_(rows) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> truth(dim);
    for (auto& v : truth) v = normal(rng);
    for (size_t j = 0; j < rows; ++j) {
      float dot = 0;
      for (size_t i = 0; i < dim; ++i) {
        a_[j * dim + i] = normal(rng);
        dot += a_[j * dim + i] * truth[i];
      }
      b_[j] = dot + 0.1f * normal(rng);
    }
  }

  size_t dim() const { return dim_; }
  size_t rows() const { return b_.size(); }

  // Initial parameters (what rank 0 starts from).
  std::vector<float> Init(uint64_t seed = 11) const {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    std::vector<float> x(dim_);
    for (auto& v : x) v = u(rng);
    return x;
  }

  // Rows of step t's global batch of size B: rows (t*B + k) % rows() for k < B.
  // Worker `rank` of `world` gets k in [rank*B/world, (rank+1)*B/world).
  // grad = mean over its rows of (a.x - b) a   (the mean over the worker's own batch).
  void Gradient(const float* x, uint64_t step, size_t global_batch, int rank, int world,
                float* grad) const {
    const size_t lo = global_batch * rank / world, hi = global_batch * (rank + 1) / world;
    std::vector<double> g(dim_, 0.0);
    for (size_t k = lo; k < hi; ++k) {
      const size_t j = (step * global_batch + k) % rows();
      const float* a = &a_[j * dim_];
      double r = -b_[j];
      for (size_t i = 0; i < dim_; ++i) r += static_cast<double>(a[i]) * x[i];
      for (size_t i = 0; i < dim_; ++i) g[i] += r * a[i];
    }
    const double inv = hi > lo ? 1.0 / static_cast<double>(hi - lo) : 0.0;
    for (size_t i = 0; i < dim_; ++i) grad[i] = static_cast<float>(g[i] * inv);
  }

  double Loss(const float* x) const {
    double sum = 0;
    for (size_t j = 0; j < rows(); ++j) {
      double r = -b_[j];
      for (size_t i = 0; i < dim_; ++i) r += static_cast<double>(a_[j * dim_ + i]) * x[i];
      sum += r * r / 2;
    }
    return sum / static_cast<double>(rows());
  }

  // One process training with the global batch: `steps` steps of SGD per `opt`.
  std::vector<float> Reference(const LocalOptimizer& opt, size_t global_batch, int steps) const {
    std::vector<float> x = Init(), g(dim_), b(dim_, 0.0f);
    for (int t = 0; t < steps; ++t) {
      Gradient(x.data(), t, global_batch, 0, 1, g.data());
      const float lr = opt.LearningRateAt(t);
      for (size_t i = 0; i < dim_; ++i) {
        if (opt.momentum > 0) {
          b[i] = opt.momentum * b[i] + g[i];
          x[i] -= lr * (opt.nesterov ? g[i] + opt.momentum * b[i] : b[i]);
        } else {
          x[i] -= lr * g[i];
        }
      }
    }
    return x;
  }

 private:
  size_t dim_;
  std::vector<float> a_, b_;
};

// max_i |a_i - b_i| / max(1, |b_i|)
inline double MaxRelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) /
                                std::max(1.0, std::fabs(static_cast<double>(b[i]))));
  }
  return a.size() == b.size() ? worst : 1e30;
}

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TRAINING_PROBLEM_H_
