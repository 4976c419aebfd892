// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The decentralized Trainers. GoSGD: the push-sum weights of all workers sum to 1 after
// Finish (1e-12) for p = 0, 0.5, 1; from different starting points and no gradient, the
// weighted mean Σ a_i x_i stays the mean of the starting points and the models meet there;
// the models train. AD-PSGD: from different starting points, with gradient steps applied
// while averagings are in flight, Σ_i x_i ends exactly where the steps alone take it
// (1e-5 relative), every averaging an active worker made was served once by a passive one;
// without gradients the models meet; the models train (W = 1, 3, 4). Both: a worker that
// dies or is cut off mid-training makes every other fail with kUnavailable within a bound.
//
// Different starting points need the factories without the initial broadcast
// (algorithms::TrainerArgs::broadcast = false); everything else goes through
// Trainer::Create.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/trainers.h"
#include "local_cluster.h"
#include "ps/algorithm.h"
#include "training_problem.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LinearRegression;
using testing::LocalCluster;

using StartFn = std::function<std::vector<float>(int rank)>;
using GradFn = std::function<void(int rank, int step, const float* x, float* grad)>;

struct Outcome {
  std::vector<std::vector<float>> finals;  // each worker's params after Finish
  std::vector<TrainerStats> stats;
};

// Every worker: params from start(rank), `steps` Steps with grad(rank, t, params), Finish.
// broadcast = false builds the Trainers without the initial broadcast.
Outcome Train(LocalCluster& c, const TrainerOptions& opts, bool broadcast, const StartFn& start,
          const GradFn& grad, int steps) {
  const int world = c.num_workers();
  Outcome run;
  run.finals.resize(world);
  run.stats.resize(world);
  std::vector<Status> errors(world);
  c.OnEveryWorker([&](int r) {
    std::vector<float> x = start(r);
    std::unique_ptr<Trainer> trainer;
    if (broadcast) {
      auto t = Trainer::Create(&c.worker(r), x.data(), x.size(), opts);
      if (!t.ok()) {
        errors[r] = t.status();
        return;
      }
      trainer = std::move(*t);
    } else {
      algorithms::TrainerArgs args;
      args.worker = &c.worker(r);
      args.params = x.data();
      args.n = x.size();
      args.options = opts;
      args.broadcast = false;
      auto t = opts.algorithm.kind == Algorithm::kGosgd ? algorithms::NewGosgdTrainer(args)
                                                        : algorithms::NewAdpsgdTrainer(args);
      if (!t.ok()) {
        errors[r] = t.status();
        return;
      }
      trainer = std::move(*t);
    }
    // The communication thread changes x too: the gradient is taken on a consistent copy.
    std::vector<float> copy(x.size()), g(x.size());
    for (int t = 0; t < steps; ++t) {
      trainer->CopyParams(copy.data());
      grad(r, t, copy.data(), g.data());
      Status st = trainer->Step(g.data());
      if (!st.ok()) {
        errors[r] = st;
        return;
      }
    }
    errors[r] = trainer->Finish();
    run.stats[r] = trainer->stats();
    run.finals[r] = x;  // the Trainer's threads have stopped
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r];
  return run;
}

// Worker r starts at r * 10 + i / 10 + sin(i) (all different).
std::vector<float> DistinctStart(int r, size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 10.0f * r + 0.1f * i + std::sin(static_cast<float>(i));
  return x;
}

void NoGradient(int, int, const float*, float* g, size_t n) { std::fill(g, g + n, 0.0f); }

// max over i and r of |x_r[i] - m[i]|
double Spread(const std::vector<std::vector<float>>& xs, const std::vector<double>& m) {
  double worst = 0;
  for (const auto& x : xs) {
    for (size_t i = 0; i < m.size(); ++i) worst = std::max(worst, std::fabs(x[i] - m[i]));
  }
  return worst;
}

// ---- GoSGD ------------------------------------------------------------------------------

class GosgdTest : public ::testing::TestWithParam<float> {};

TEST_P(GosgdTest, WeightsSumToOneAndTheModelsTrain) {
  const float p = GetParam();
  LinearRegression problem(/*dim=*/37, /*rows=*/480);
  LocalCluster c(1, 4);
  ASSERT_TRUE(c.Start().ok());
  TrainerOptions opts;
  opts.algorithm = AlgorithmSpec::Gosgd(p);
  opts.optimizer.learning_rate = 0.05f;
  opts.seed = 3;
  const int steps = 100;
  Outcome run = Train(
      c, opts, /*broadcast=*/true,
      [&](int r) { return r == 0 ? problem.Init() : std::vector<float>(problem.dim(), 50.0f + r); },
      [&](int r, int t, const float* x, float* g) { problem.Gradient(x, t, 24, r, 4, g); }, steps);
  double weight = 0;
  uint64_t sent = 0, merged = 0;
  for (const TrainerStats& s : run.stats) {
    weight += s.gossip_weight;
    sent += s.exchanges;
    merged += s.merges;
    EXPECT_EQ(s.steps, static_cast<uint64_t>(steps));
  }
  EXPECT_NEAR(weight, 1.0, 1e-12);
  EXPECT_EQ(sent, merged);  // every gossip merged once
  if (p == 0.0f) {
    EXPECT_EQ(sent, 0u);
    for (const TrainerStats& s : run.stats) EXPECT_EQ(s.gossip_weight, 0.25);
  } else if (p == 1.0f) {
    EXPECT_EQ(sent, 4u * steps);
  } else {
    EXPECT_GT(sent, 4u * steps / 4);
    EXPECT_LT(sent, 4u * steps * 3 / 4);
  }
  const double start = problem.Loss(problem.Init().data());
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(run.finals[r].size(), problem.dim());
    EXPECT_LT(problem.Loss(run.finals[r].data()), 0.5 * start) << "rank " << r;
  }
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(P, GosgdTest, ::testing::Values(0.0f, 0.5f, 1.0f));

// Push-sum's invariant: with no gradient, Σ a_i x_i (gossips in flight counted) never
// changes, so after Finish it is still the mean of the starting points, and the models
// gather there.
TEST(GosgdInvariantTest, WeightedMeanStaysTheStartsMeanAndTheModelsMeet) {
  const size_t n = 50;
  LocalCluster c(1, 4);
  ASSERT_TRUE(c.Start().ok());
  std::vector<double> mean(n, 0.0);
  std::vector<std::vector<float>> starts;
  for (int r = 0; r < 4; ++r) {
    starts.push_back(DistinctStart(r, n));
    for (size_t i = 0; i < n; ++i) mean[i] += starts[r][i] / 4.0;
  }
  for (float p : {0.0f, 1.0f}) {
    TrainerOptions opts;
    opts.algorithm = AlgorithmSpec::Gosgd(p);
    opts.name = "gosgd-" + std::to_string(p);
    const int steps = 300;
    // The workers meet at a barrier every 20 steps: how close the models come depends on
    // how the gossips interleave, and a busy machine may otherwise run one worker's 300
    // steps (its weight halved by each gossip it sends) before the others gossip back.
    Outcome run = Train(
        c, opts, /*broadcast=*/false, [&](int r) { return starts[r]; },
        [&](int r, int t, const float* x, float* g) {
          NoGradient(r, t, x, g, n);
          if (t % 20 == 19) {
            EXPECT_TRUE(c.worker(r).Barrier(Group::kWorkers, std::chrono::seconds(60)).ok());
          }
        },
        steps);
    ASSERT_EQ(run.finals.size(), 4u);
    double weight = 0;
    std::vector<double> weighted(n, 0.0);
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(run.finals[r].size(), n);
      weight += run.stats[r].gossip_weight;
      for (size_t i = 0; i < n; ++i) weighted[i] += run.stats[r].gossip_weight * run.finals[r][i];
    }
    EXPECT_NEAR(weight, 1.0, 1e-12) << "p " << p;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(weighted[i], mean[i], 1e-5 * std::max(1.0, std::fabs(mean[i])))
          << "p " << p << " element " << i;
    }
    if (p == 0.0f) {
      for (int r = 0; r < 4; ++r) EXPECT_EQ(run.finals[r], starts[r]);  // nothing moved
    } else {
      // The starts are 30 apart; 1200 gossips bring every model near the mean.
      EXPECT_LT(Spread(run.finals, mean), 1e-2) << "p " << p;
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

// ---- AD-PSGD -----------------------------------------------------------------------------

// Gradient steps applied while averagings are in flight are all kept: Σ_i x_i after
// Finish equals the starts' sum minus every step applied (constant gradients c_r, so the
// total is known), and every averaging made was served once.
TEST(AdpsgdInvariantTest, SumIsConservedUnderConcurrentAveragingAndGradientSteps) {
  const size_t n = 64;
  const int world = 4, steps = 300;
  const float lr = 0.1f;
  LocalCluster c(1, world);
  ASSERT_TRUE(c.Start().ok());
  auto gradient = [](int r, size_t i) { return 0.01f * (r + 1) * (static_cast<int>(i % 7) - 3); };
  for (bool with_gradient : {true, false}) {
    TrainerOptions opts;
    opts.algorithm = AlgorithmSpec::Adpsgd();
    opts.optimizer.learning_rate = lr;
    opts.name = with_gradient ? "adpsgd-grad" : "adpsgd-nograd";
    std::vector<double> expected(n, 0.0);
    for (int r = 0; r < world; ++r) {
      const std::vector<float> s = DistinctStart(r, n);
      for (size_t i = 0; i < n; ++i) {
        expected[i] += s[i];
        if (with_gradient) expected[i] -= static_cast<double>(lr) * steps * gradient(r, i);
      }
    }
    Outcome run = Train(
        c, opts, /*broadcast=*/false, [&](int r) { return DistinctStart(r, n); },
        [&](int r, int, const float*, float* g) {
          for (size_t i = 0; i < n; ++i) g[i] = with_gradient ? gradient(r, i) : 0.0f;
        },
        steps);
    ASSERT_EQ(run.finals.size(), static_cast<size_t>(world));
    std::vector<double> sum(n, 0.0);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(run.finals[r].size(), n);
      for (size_t i = 0; i < n; ++i) sum[i] += run.finals[r][i];
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(sum[i], expected[i], 1e-5 * std::max(1.0, std::fabs(expected[i])))
          << "gradient " << with_gradient << " element " << i;
    }
    // Actives (0, 2) average once per step; passives (1, 3) serve them all.
    EXPECT_EQ(run.stats[0].exchanges, static_cast<uint64_t>(steps));
    EXPECT_EQ(run.stats[2].exchanges, static_cast<uint64_t>(steps));
    EXPECT_EQ(run.stats[1].merges + run.stats[3].merges, 2u * steps);
    EXPECT_GT(run.stats[1].merges, 0u);
    EXPECT_GT(run.stats[3].merges, 0u);
    if (!with_gradient) {
      std::vector<double> mean(n);
      for (size_t i = 0; i < n; ++i) mean[i] = expected[i] / world;
      EXPECT_LT(Spread(run.finals, mean), 1e-3);  // the starts are 30 apart
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

class AdpsgdTest : public ::testing::TestWithParam<int> {};

TEST_P(AdpsgdTest, TheModelsTrain) {
  const int world = GetParam();
  LinearRegression problem(/*dim=*/37, /*rows=*/480);
  LocalCluster c(1, world);
  ASSERT_TRUE(c.Start().ok());
  TrainerOptions opts;
  opts.algorithm = AlgorithmSpec::Adpsgd();
  opts.optimizer.learning_rate = 0.05f;
  opts.optimizer.momentum = 0.5f;
  const int steps = 100;
  Outcome run = Train(
      c, opts, /*broadcast=*/true,
      [&](int r) { return r == 0 ? problem.Init() : std::vector<float>(problem.dim(), 50.0f + r); },
      [&](int r, int t, const float* x, float* g) { problem.Gradient(x, t, 24, r, world, g); },
      steps);
  const double start = problem.Loss(problem.Init().data());
  uint64_t made = 0, served = 0;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(run.finals[r].size(), problem.dim());
    EXPECT_LT(problem.Loss(run.finals[r].data()), 0.5 * start) << "rank " << r;
    made += run.stats[r].exchanges;
    served += run.stats[r].merges;
  }
  EXPECT_EQ(made, served);
  EXPECT_EQ(made, world == 1 ? 0u : static_cast<uint64_t>((world + 1) / 2 * steps));
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Workers, AdpsgdTest, ::testing::Values(1, 3, 4));

// ---- A worker dies --------------------------------------------------------------------

struct Death {
  Algorithm algorithm;
  bool isolate;  // cut off by the fault injector, else Stop()
  int victim;
};

class PeerDeathTest : public ::testing::TestWithParam<Death> {};

TEST_P(PeerDeathTest, EveryOtherWorkerFailsUnavailableWithinABound) {
  const Death d = GetParam();
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.heartbeat_timeout_ms = 1000;
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 4, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  TrainerOptions opts;
  opts.algorithm = d.algorithm == Algorithm::kGosgd ? AlgorithmSpec::Gosgd(1.0f)
                                                    : AlgorithmSpec::Adpsgd();
  opts.timeout = std::chrono::seconds(30);  // a wait that ends by timeout fails the bound
  const size_t n = 1000;
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> died_at{0};  // Clock ticks
  std::vector<Status> first_error(4);
  std::vector<Clock::duration> took(4);
  c.OnEveryWorker([&](int r) {
    std::vector<float> x(n, 1.0f), g(n, 0.001f);
    auto t = Trainer::Create(&c.worker(r), x.data(), n, opts);
    ASSERT_TRUE(t.ok()) << "rank " << r << ": " << t.status();
    auto& trainer = *t;
    // Nobody dies before every Create's broadcast (an all-reduce) is over: a death fails
    // every collective still running.
    ASSERT_TRUE(c.worker(r).Barrier(Group::kWorkers, milliseconds(10000)).ok());
    if (r == d.victim) {
      for (int s = 0; s < 20; ++s) ASSERT_TRUE(trainer->Step(g.data()).ok());
      died_at = Clock::now().time_since_epoch().count();  // before: the others may fail at once
      if (d.isolate) {
        injector->Isolate(c.worker(r).id());
      } else {
        c.worker(r).Stop();
      }
      return;  // its Trainer goes without Finish
    }
    const auto begin = Clock::now();
    Status st;
    while (st.ok() && Clock::now() - begin < std::chrono::seconds(25)) {
      st = trainer->Step(g.data());
      std::this_thread::sleep_for(milliseconds(2));
    }
    Status fin = trainer->Finish();
    first_error[r] = st.ok() ? fin : st;
    ASSERT_NE(died_at.load(), 0) << "rank " << r << " failed before the victim died: " << first_error[r];
    took[r] = Clock::now() - Clock::time_point(Clock::duration(died_at.load()));
    EXPECT_EQ(fin.code(), first_error[r].code()) << "rank " << r << ": Finish " << fin;
  });
  for (int r = 0; r < 4; ++r) {
    if (r == d.victim) continue;
    EXPECT_EQ(first_error[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << first_error[r];
    EXPECT_LT(took[r], std::chrono::seconds(10)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Deaths, PeerDeathTest,
    ::testing::Values(Death{Algorithm::kGosgd, false, 1}, Death{Algorithm::kGosgd, true, 2},
                      Death{Algorithm::kAdpsgd, false, 1}, Death{Algorithm::kAdpsgd, true, 0}),
    [](const ::testing::TestParamInfo<Death>& i) {
      return std::string(AlgorithmName(i.param.algorithm)) + (i.param.isolate ? "Isolated" : "Stopped") +
             std::to_string(i.param.victim);
    });

}  // namespace
}  // namespace ps
