// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The training loop the algorithm tests share: every worker of a LocalCluster trains a
// LinearRegression through a Trainer, each on its share of the global batch.
#ifndef PS_TESTS_TRAIN_EVERY_WORKER_H_
#define PS_TESTS_TRAIN_EVERY_WORKER_H_

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "local_cluster.h"
#include "ps/algorithm.h"
#include "training_problem.h"

namespace ps {
namespace testing {

// Called before each Step of worker `rank` at step t (after its gradient was computed).
using BeforeStep = std::function<void(int rank, int t)>;

// Trains `steps` steps with `opts` on every worker; returns each worker's final params
// (after Finish). Every worker starts elsewhere (rank r > 0 from 100 + r): rank 0's values
// must reach everyone through the Trainer. A worker's error fails the test (EXPECT) and
// leaves its entry empty.
inline std::vector<std::vector<float>> TrainEveryWorker(LocalCluster& c,
                                                        const LinearRegression& problem,
                                                        const TrainerOptions& opts,
                                                        size_t global_batch, int steps,
                                                        const BeforeStep& before = nullptr) {
  const int world = c.num_workers();
  std::vector<std::vector<float>> finals(world);
  std::vector<Status> errors(world);
  c.OnEveryWorker([&](int r) {
    std::vector<float> x = r == 0 ? problem.Init() : std::vector<float>(problem.dim(), 100.0f + r);
    std::vector<float> g(problem.dim());
    auto trainer = Trainer::Create(&c.worker(r), x.data(), x.size(), opts);
    if (!trainer.ok()) {
      errors[r] = trainer.status();
      return;
    }
    for (int t = 0; t < steps; ++t) {
      problem.Gradient(x.data(), t, global_batch, r, world, g.data());
      if (before) before(r, t);
      Status st = (*trainer)->Step(g.data());
      if (!st.ok()) {
        errors[r] = st.WithContext("step " + std::to_string(t));
        return;
      }
    }
    errors[r] = (*trainer)->Finish();
    finals[r] = x;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r].ToString();
  }
  return finals;
}

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TRAIN_EVERY_WORKER_H_
