// Copyright LayerPS authors. Licensed under Apache-2.0.
// The optimizer seam: every rule gives the same bits in place, out of place and row-wise.
#include "server/optimizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ps {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class OptimizerTest : public ::testing::TestWithParam<UpdateRule> {};

TEST_P(OptimizerTest, InPlaceOutOfPlaceAndRowsAgree) {
  TableSpec spec = TableSpec::Dense("w", 1000, GetParam());
  spec.learning_rate = 0.125f;
  spec.elastic_alpha = 0.25f;
  auto opt = MakeOptimizer(spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const size_t n = 1000, dim = 8;
  const std::vector<float> x0 = Random(n, 1), g = Random(n, 2);
  std::vector<float> in_place = x0, out(n);
  (*opt)->Apply(in_place.data(), nullptr, n, g.data(), n);
  (*opt)->ApplyTo(out.data(), x0.data(), nullptr, n, g.data(), n);
  EXPECT_EQ(in_place, out);
  std::vector<float> rows = x0;
  std::vector<float*> xs;
  std::vector<const float*> gs;
  for (size_t r = 0; r < n / dim; ++r) {
    xs.push_back(rows.data() + r * dim);
    gs.push_back(g.data() + r * dim);
  }
  (*opt)->ApplyRows(xs.data(), gs.data(), xs.size(), dim);
  EXPECT_EQ(in_place, rows);
  // And the rule is what it says.
  for (size_t i = 0; i < n; ++i) {
    const float want = GetParam() == UpdateRule::kSum       ? x0[i] + g[i]
                       : GetParam() == UpdateRule::kElastic ? x0[i] + 0.25f * (g[i] - x0[i])
                                                            : x0[i] - 0.125f * g[i];
    ASSERT_EQ(in_place[i], want) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, OptimizerTest,
                         ::testing::Values(UpdateRule::kSum, UpdateRule::kSgd,
                                           UpdateRule::kElastic),
                         [](const ::testing::TestParamInfo<UpdateRule>& info) {
                           return std::string(UpdateRuleName(info.param));
                         });

TEST(OptimizerTest, UnknownRuleIsRefused) {
  TableSpec spec = TableSpec::Dense("w", 10);
  spec.rule = static_cast<UpdateRule>(99);
  auto opt = MakeOptimizer(spec);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Stateful rules: in place, out of place and row-wise agree bit for bit over several steps
// (the state planes laid out as each form expects), and the state changes the result.
class StatefulOptimizerTest : public ::testing::TestWithParam<UpdateRule> {};

TEST_P(StatefulOptimizerTest, FormsAgreeAndStateMatters) {
  TableSpec spec = TableSpec::Dense("w", 64, GetParam());
  spec.learning_rate = 0.05f;
  spec.l1 = 0.01f;
  auto opt = MakeOptimizer(spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const uint32_t w = (*opt)->state_width();
  ASSERT_GT(w, 0u);
  const size_t n = 64, dim = 8, rows = n / dim;
  std::vector<float> a = Random(n, 3), b = a, out(n);
  std::vector<float> sa(n * w, 0.0f), sb(n * w, 0.0f);
  // Rows: [dim values | w planes of dim] each.
  std::vector<float> r(rows * dim * (1 + w), 0.0f);
  for (size_t i = 0; i < rows; ++i)
    std::copy(a.begin() + i * dim, a.begin() + (i + 1) * dim, r.begin() + i * dim * (1 + w));
  std::vector<float> once;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = Random(n, 10 + step);
    (*opt)->Apply(a.data(), sa.data(), n, g.data(), n);
    (*opt)->ApplyTo(out.data(), b.data(), sb.data(), n, g.data(), n);
    b = out;
    std::vector<float*> xs;
    std::vector<const float*> gs;
    for (size_t i = 0; i < rows; ++i) {
      xs.push_back(r.data() + i * dim * (1 + w));
      gs.push_back(g.data() + i * dim);
    }
    (*opt)->ApplyRows(xs.data(), gs.data(), rows, dim);
    if (step == 0) once = a;
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(sa, sb);
  for (size_t i = 0; i < rows; ++i)
    for (size_t k = 0; k < dim; ++k) ASSERT_EQ(r[i * dim * (1 + w) + k], a[i * dim + k]);
  EXPECT_NE(once, a);  // later steps moved the values further
  EXPECT_NE(sa, std::vector<float>(n * w, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Rules, StatefulOptimizerTest,
                         ::testing::Values(UpdateRule::kMomentum, UpdateRule::kNesterov,
                                           UpdateRule::kAdagrad, UpdateRule::kAdam,
                                           UpdateRule::kFtrl),
                         [](const ::testing::TestParamInfo<UpdateRule>& info) {
                           return std::string(UpdateRuleName(info.param));
                         });

TEST(TableSpecHyperTest, BadHyperparametersAreRefused) {
  TableSpec s = TableSpec::Dense("w", 4, UpdateRule::kAdam);
  EXPECT_TRUE(s.Validate().ok());
  s.beta1 = 1.0f;
  EXPECT_EQ(s.Validate().code(), StatusCode::kInvalidArgument);
  s = TableSpec::Dense("w", 4, UpdateRule::kNesterov);
  s.momentum = -0.1f;
  EXPECT_EQ(s.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseUpdateRule("ftrl"), UpdateRule::kFtrl);
  EXPECT_EQ(*ParseUpdateRule("elastic"), UpdateRule::kElastic);
  EXPECT_EQ(*ParseSyncMode("ssp"), SyncMode::kSsp);
  EXPECT_FALSE(ParseSyncMode("lockstep").ok());
  EXPECT_FALSE(ParseUpdateRule("rmsprop").ok());
}

}  // namespace
}  // namespace ps
