// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The Trainer with AR-SGD: W workers equal one process training with the global batch
// (1e-5 relative over 100 steps), with and without momentum and a schedule; every
// replica ends identical; bad options are refused before anything is sent.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "local_cluster.h"
#include "ps/algorithm.h"
#include "train_every_worker.h"
#include "training_problem.h"

namespace ps {
namespace {

using testing::LinearRegression;
using testing::LocalCluster;
using testing::MaxRelativeError;
using testing::TrainEveryWorker;

class ArsgdTest : public ::testing::TestWithParam<int> {};

TEST_P(ArsgdTest, EqualsOneProcessWithTheGlobalBatch) {
  const int world = GetParam();
  LinearRegression problem(/*dim=*/37, /*rows=*/480);
  LocalCluster c(1, world);
  ASSERT_TRUE(c.Start().ok());
  for (bool momentum : {false, true}) {
    TrainerOptions opts;
    opts.algorithm = AlgorithmSpec::Arsgd();
    opts.optimizer.learning_rate = 0.05f;
    if (momentum) {
      opts.optimizer.momentum = 0.9f;
      opts.optimizer.nesterov = true;
      opts.optimizer.warmup_steps = 5;
      opts.optimizer.decay = LocalOptimizer::Decay::kStep;
      opts.optimizer.decay_every = 40;
      opts.optimizer.gamma = 0.5f;
    }
    const size_t batch = 24;
    const auto finals = TrainEveryWorker(c, problem, opts, batch, 100);
    const auto expected = problem.Reference(opts.optimizer, batch, 100);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(finals[r].size(), expected.size());
      EXPECT_LT(MaxRelativeError(finals[r], expected), 1e-5) << "rank " << r << " momentum " << momentum;
      EXPECT_EQ(finals[r], finals[0]) << "replicas differ at rank " << r;
    }
    // The run trained: the loss fell well below the start's.
    EXPECT_LT(problem.Loss(finals[0].data()), 0.5 * problem.Loss(problem.Init().data()));
  }
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Workers, ArsgdTest, ::testing::Values(2, 4));

TEST(TrainerCreateTest, RefusesBadOptions) {
  LocalCluster c(1, 1);
  ASSERT_TRUE(c.Start().ok());
  std::vector<float> x(8, 0.0f);
  TrainerOptions opts;
  opts.algorithm = AlgorithmSpec::Ssp(-1);
  auto t = Trainer::Create(&c.worker(0), x.data(), x.size(), opts);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  opts.algorithm = AlgorithmSpec::Arsgd();
  opts.optimizer.learning_rate = -1;
  EXPECT_EQ(Trainer::Create(&c.worker(0), x.data(), x.size(), opts).status().code(),
            StatusCode::kInvalidArgument);
  opts.optimizer.learning_rate = 0.1f;
  EXPECT_EQ(Trainer::Create(&c.worker(0), nullptr, 8, opts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Trainer::Create(nullptr, x.data(), 8, opts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(TrainerCreateTest, RefusesAWorkerNotStarted) {
  Options o = testing::FastOptions();
  o.num_workers = 1;
  o.num_servers = 1;
  Worker w(o);
  std::vector<float> x(4, 0.0f);
  TrainerOptions opts;
  opts.algorithm = AlgorithmSpec::Arsgd();
  EXPECT_EQ(Trainer::Create(&w, x.data(), 4, opts).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
