// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// AlgorithmSpec parsing and validation, LocalOptimizer's checks and schedule.
#include <gtest/gtest.h>

#include <cmath>

#include "ps/algorithm.h"

namespace ps {
namespace {

TEST(AlgorithmSpecTest, ParsesEveryAlgorithmWithItsParameters) {
  auto bsp = ParseAlgorithm("BSP");
  ASSERT_TRUE(bsp.ok()) << bsp.status().ToString();
  EXPECT_EQ(bsp->kind, Algorithm::kBsp);
  auto ssp = ParseAlgorithm(" ssp( s = 3 ) ");
  ASSERT_TRUE(ssp.ok()) << ssp.status().ToString();
  EXPECT_EQ(ssp->kind, Algorithm::kSsp);
  EXPECT_EQ(ssp->staleness, 3);
  EXPECT_EQ(ParseAlgorithm("ssp(0)")->staleness, 0);
  auto easgd = ParseAlgorithm("easgd(4,0.25)");
  ASSERT_TRUE(easgd.ok());
  EXPECT_EQ(easgd->tau, 4);
  EXPECT_FLOAT_EQ(easgd->alpha, 0.25f);
  easgd = ParseAlgorithm("easgd(alpha=0.1,tau=8)");
  ASSERT_TRUE(easgd.ok());
  EXPECT_EQ(easgd->tau, 8);
  EXPECT_FLOAT_EQ(easgd->alpha, 0.1f);
  auto gosgd = ParseAlgorithm("gosgd(p=0.01)");
  ASSERT_TRUE(gosgd.ok());
  EXPECT_FLOAT_EQ(gosgd->p, 0.01f);
  EXPECT_EQ(ParseAlgorithm("arsgd")->kind, Algorithm::kArsgd);
  EXPECT_EQ(ParseAlgorithm("adpsgd")->kind, Algorithm::kAdpsgd);
  EXPECT_EQ(ParseAlgorithm("asp")->kind, Algorithm::kAsp);
}

TEST(AlgorithmSpecTest, ToStringRoundTrips) {
  for (const AlgorithmSpec& s :
       {AlgorithmSpec::Bsp(), AlgorithmSpec::Asp(), AlgorithmSpec::Ssp(5), AlgorithmSpec::Easgd(3, 0.125f),
        AlgorithmSpec::Arsgd(), AlgorithmSpec::Gosgd(0.5f), AlgorithmSpec::Adpsgd()}) {
    auto back = ParseAlgorithm(s.ToString());
    ASSERT_TRUE(back.ok()) << s.ToString() << ": " << back.status().ToString();
    EXPECT_EQ(back->ToString(), s.ToString());
    EXPECT_EQ(back->kind, s.kind);
  }
}

TEST(AlgorithmSpecTest, RejectsBadParametersNamingThem) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"ssp(-1)", "staleness"},       {"easgd(0,0.5)", "tau"},     {"easgd(2,0)", "alpha"},
      {"easgd(2,1)", "alpha"},        {"easgd(2,1.5)", "alpha"},   {"gosgd(-0.1)", "p must"},
      {"gosgd(1.01)", "p must"},      {"sgd", "unknown algorithm"}, {"ssp(1,2)", "takes 1"},
      {"ssp(x=1)", "no parameter"},   {"ssp(1.5)", "integer"},     {"ssp(abc)", "not a number"},
      {"ssp(3", "missing"},           {"easgd(tau=2,tau=3)", "twice"},
  };
  for (const auto& c : cases) {
    auto r = ParseAlgorithm(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.text << ": " << r.status().message();
  }
  AlgorithmSpec s = AlgorithmSpec::Gosgd(std::nanf(""));
  EXPECT_FALSE(s.Validate().ok());
}

TEST(LocalOptimizerTest, ScheduleWarmsUpAndDecays) {
  LocalOptimizer o;
  o.learning_rate = 0.1f;
  EXPECT_FLOAT_EQ(o.LearningRateAt(0), 0.1f);
  EXPECT_FLOAT_EQ(o.LearningRateAt(1000), 0.1f);
  o.warmup_steps = 4;
  EXPECT_FLOAT_EQ(o.LearningRateAt(0), 0.025f);
  EXPECT_FLOAT_EQ(o.LearningRateAt(3), 0.1f);
  EXPECT_FLOAT_EQ(o.LearningRateAt(4), 0.1f);
  o.warmup_steps = 0;
  o.decay = LocalOptimizer::Decay::kStep;
  o.gamma = 0.5f;
  o.decay_every = 10;
  EXPECT_FLOAT_EQ(o.LearningRateAt(9), 0.1f);
  EXPECT_FLOAT_EQ(o.LearningRateAt(10), 0.05f);
  EXPECT_FLOAT_EQ(o.LearningRateAt(25), 0.025f);
  o.decay = LocalOptimizer::Decay::kExponential;
  EXPECT_NEAR(o.LearningRateAt(3), 0.1 * 0.125, 1e-7);
  o.decay = LocalOptimizer::Decay::kCosine;
  o.decay_every = 100;
  EXPECT_NEAR(o.LearningRateAt(50), 0.05, 1e-6);
  EXPECT_NEAR(o.LearningRateAt(100), 0.0, 1e-7);
  EXPECT_NEAR(o.LearningRateAt(200), 0.0, 1e-7);
  EXPECT_TRUE(o.Validate().ok());
}

TEST(LocalOptimizerTest, RejectsBadSwitches) {
  LocalOptimizer o;
  o.learning_rate = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = LocalOptimizer();
  o.momentum = 1.0f;
  EXPECT_FALSE(o.Validate().ok());
  o = LocalOptimizer();
  o.nesterov = true;
  EXPECT_NE(o.Validate().message().find("nesterov"), std::string::npos);
  o = LocalOptimizer();
  o.warmup_steps = -1;
  EXPECT_FALSE(o.Validate().ok());
  o = LocalOptimizer();
  o.decay = LocalOptimizer::Decay::kStep;
  EXPECT_NE(o.Validate().message().find("decay_every"), std::string::npos);
  o.decay_every = 5;
  o.gamma = 0;
  EXPECT_NE(o.Validate().message().find("gamma"), std::string::npos);
}

}  // namespace
}  // namespace ps
