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
    const float want = GetParam() == UpdateRule::kSum ? x0[i] + g[i] : x0[i] - 0.125f * g[i];
    ASSERT_EQ(in_place[i], want) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, OptimizerTest,
                         ::testing::Values(UpdateRule::kSum, UpdateRule::kSgd),
                         [](const ::testing::TestParamInfo<UpdateRule>& info) {
                           return std::string(info.param == UpdateRule::kSum ? "sum" : "sgd");
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
