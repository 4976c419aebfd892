// Copyright LayerPS authors. Licensed under Apache-2.0.
// The optimizer seam: every rule gives the same bits in place, out of place and row-wise.
#include "server/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "server/optimizers/kernel.h"

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

namespace ps {
namespace {

// rowwise_adagrad against FBGEMM's EXACT_ROWWISE_ADAGRAD written out plainly, one row at a
// time: s += (sum_j g_j^2) / dim; m = lr / (sqrt(s) + eps); x_j -= m * g_j. Same order of
// operations as the rule, so bit for bit (no contraction into fused multiply-adds, as the
// rule's kernel).
PS_DENSE_KERNEL void ReferenceRowwiseAdagrad(std::vector<float>* x, float* s, const float* g,
                                             float lr, float eps) {
  const size_t dim = x->size();
  float sum = 0.0f;
  for (size_t j = 0; j < dim; ++j) sum += g[j] * g[j];
  *s = *s + sum / static_cast<float>(dim);
  const float m = lr / (std::sqrt(*s) + eps);
  for (size_t j = 0; j < dim; ++j) (*x)[j] -= m * g[j];
}

TEST(RowwiseAdagradTest, MatchesAPlainReferenceOverManyStepsAndRows) {
  for (uint32_t dim : {1u, 5u, 16u, 37u}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    TableSpec spec = TableSpec::Sparse("emb", dim, UpdateRule::kRowwiseAdagrad);
    spec.learning_rate = 0.05f;
    spec.epsilon = 1e-6f;
    auto opt = MakeOptimizer(spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_EQ((*opt)->state_width(), 0u);
    ASSERT_EQ((*opt)->row_state_floats(dim), 1u);  // one accumulator per row
    const size_t rows = 9, width = dim + 1;
    // The store's layout: [dim values | accumulator] per row; the reference's own copy.
    std::vector<float> store(rows * width, 0.0f);
    std::vector<std::vector<float>> ref_x(rows);
    std::vector<float> ref_s(rows, 0.0f);
    // And the definition in double precision, to a tolerance.
    std::vector<std::vector<double>> dbl_x(rows);
    std::vector<double> dbl_s(rows, 0.0);
    const std::vector<float> x0 = Random(rows * dim, 40 + dim);
    for (size_t r = 0; r < rows; ++r) {
      std::copy(x0.begin() + r * dim, x0.begin() + (r + 1) * dim, store.begin() + r * width);
      ref_x[r].assign(x0.begin() + r * dim, x0.begin() + (r + 1) * dim);
      dbl_x[r].assign(x0.begin() + r * dim, x0.begin() + (r + 1) * dim);
    }
    std::mt19937 pick(dim);
    for (int step = 0; step < 12; ++step) {
      // A batch of 6 rows, repeats allowed (applied in order), gradients of several scales.
      std::vector<size_t> batch(6);
      for (auto& b : batch) b = pick() % rows;
      std::vector<float> g = Random(batch.size() * dim, 100 * dim + step);
      for (size_t i = 0; i < g.size(); ++i) g[i] *= (step % 3 == 0) ? 10.0f : 0.1f;
      std::vector<float*> xs;
      std::vector<const float*> gs;
      for (size_t i = 0; i < batch.size(); ++i) {
        xs.push_back(store.data() + batch[i] * width);
        gs.push_back(g.data() + i * dim);
      }
      (*opt)->ApplyRows(xs.data(), gs.data(), xs.size(), dim);
      for (size_t i = 0; i < batch.size(); ++i) {
        ReferenceRowwiseAdagrad(&ref_x[batch[i]], &ref_s[batch[i]], g.data() + i * dim,
                                spec.learning_rate, spec.epsilon);
        double mean = 0;
        for (size_t j = 0; j < dim; ++j) mean += double{g[i * dim + j]} * g[i * dim + j] / dim;
        double& acc = dbl_s[batch[i]];
        acc += mean;
        for (size_t j = 0; j < dim; ++j) {
          dbl_x[batch[i]][j] -= 0.05 * g[i * dim + j] / (std::sqrt(acc) + 1e-6);
        }
      }
      for (size_t r = 0; r < rows; ++r) {
        for (size_t j = 0; j < dim; ++j) {
          ASSERT_EQ(store[r * width + j], ref_x[r][j]) << "step " << step << " row " << r;
        }
        ASSERT_EQ(store[r * width + dim], ref_s[r]) << "step " << step << " row " << r;
      }
    }
    for (size_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(store[r * width + dim], dbl_s[r], 1e-5 * dbl_s[r]) << "row " << r;
      for (size_t j = 0; j < dim; ++j) EXPECT_NEAR(store[r * width + j], dbl_x[r][j], 1e-5) << r;
    }
  }
}

// A worked example: one row g = (3, 4): s = (9 + 16) / 2 = 12.5 and both values move by
// lr / sqrt(12.5) times their gradient; a second push of the same gradient doubles s.
TEST(RowwiseAdagradTest, WorkedExample) {
  TableSpec spec = TableSpec::Sparse("emb", 2, UpdateRule::kRowwiseAdagrad);
  spec.learning_rate = 0.5f;
  spec.epsilon = 1e-10f;
  auto opt = MakeOptimizer(spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  float row[3] = {1.0f, -1.0f, 0.0f};
  const float g[2] = {3.0f, 4.0f};
  float* xs[1] = {row};
  const float* gs[1] = {g};
  (*opt)->ApplyRows(xs, gs, 1, 2);
  EXPECT_FLOAT_EQ(row[2], 12.5f);
  EXPECT_NEAR(row[0], 1.0 - 0.5 * 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(row[1], -1.0 - 0.5 * 4 / std::sqrt(12.5), 1e-6);
  (*opt)->ApplyRows(xs, gs, 1, 2);
  EXPECT_FLOAT_EQ(row[2], 25.0f);
  EXPECT_NEAR(row[0], 1.0 - 0.5 * 3 / std::sqrt(12.5) - 0.5 * 3 / 5.0, 1e-6);
}

TEST(RowwiseAdagradTest, SparseOnlyNamedAndChecked) {
  EXPECT_EQ(*ParseUpdateRule("rowwise_adagrad"), UpdateRule::kRowwiseAdagrad);
  EXPECT_STREQ(UpdateRuleName(UpdateRule::kRowwiseAdagrad), "rowwise_adagrad");
  TableSpec s = TableSpec::Sparse("emb", 4, UpdateRule::kRowwiseAdagrad);
  EXPECT_TRUE(s.Validate().ok()) << s.Validate();
  s.epsilon = 0.0f;
  EXPECT_NE(s.Validate().message().find("epsilon"), std::string::npos) << s.Validate();
  s = TableSpec::Sparse("emb", 4, UpdateRule::kRowwiseAdagrad);
  s.learning_rate = 0.0f;
  EXPECT_NE(s.Validate().message().find("learning_rate"), std::string::npos) << s.Validate();
  // A dense table has no rows: refused at declare (Validate) and by the factory.
  TableSpec d = TableSpec::Dense("w", 10, UpdateRule::kRowwiseAdagrad);
  const Status v = d.Validate();
  EXPECT_EQ(v.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("rowwise_adagrad is for sparse tables"), std::string::npos) << v;
  EXPECT_EQ(MakeOptimizer(d).status().code(), StatusCode::kInvalidArgument);
  // The per-element rules' rows: state_width planes of dim.
  for (UpdateRule r : {UpdateRule::kSgd, UpdateRule::kAdagrad, UpdateRule::kAdam}) {
    auto opt = MakeOptimizer(TableSpec::Sparse("e", 7, r));
    ASSERT_TRUE(opt.ok());
    EXPECT_EQ((*opt)->row_state_floats(7), 7 * (*opt)->state_width()) << UpdateRuleName(r);
  }
}

}  // namespace
}  // namespace ps
