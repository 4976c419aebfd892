// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/hash.h"

namespace ps {
namespace {

TableInfo DenseTable(TableId id, uint64_t size, UpdateRule rule, NodeId server = 1) {
  TableInfo t;
  t.id = id;
  t.spec = TableSpec::Dense("dense" + std::to_string(id), size, rule);
  t.spec.learning_rate = 0.5f;
  t.chunk_elems = 7;
  t.ranges = {KeyRange{0, (size + 6) / 7, server}};
  return t;
}

TableInfo SparseTable(TableId id, uint32_t dim, UpdateRule rule,
                      std::vector<KeyRange> ranges = {}) {
  TableInfo t;
  t.id = id;
  t.spec = TableSpec::Sparse("sparse" + std::to_string(id), dim, rule);
  t.spec.learning_rate = 0.25f;
  t.ranges = ranges.empty() ? std::vector<KeyRange>{KeyRange{0, 0, 1}} : ranges;
  return t;
}

TEST(StoreTest, DenseSumSgdAssign) {
  Store store(1);
  ASSERT_TRUE(store.Install(DenseTable(0, 300000, UpdateRule::kSum)).ok());
  ASSERT_TRUE(store.Install(DenseTable(1, 5, UpdateRule::kSgd)).ok());
  std::vector<float> g(300000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 97) - 3.5f;
  ASSERT_TRUE(store.ApplyDense(0, 0, g.size(), g.data(), ApplyOp::kRule).ok());
  ASSERT_TRUE(store.ApplyDense(0, 0, g.size(), g.data(), ApplyOp::kRule).ok());
  std::vector<float> out(g.size());
  ASSERT_TRUE(store.ReadDense(0, 0, out.size(), out.data()).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], 2 * g[i]) << i;

  const float v[5] = {1, 2, 3, 4, 5};
  ASSERT_TRUE(store.ApplyDense(1, 0, 5, v, ApplyOp::kAssign).ok());
  const float grad[2] = {2, 4};
  ASSERT_TRUE(store.ApplyDense(1, 3, 2, grad, ApplyOp::kRule).ok());  // x -= 0.5 g
  float r[5];
  ASSERT_TRUE(store.ReadDense(1, 0, 5, r).ok());
  EXPECT_EQ(r[0], 1);
  EXPECT_EQ(r[3], 3);
  EXPECT_EQ(r[4], 3);
}

TEST(StoreTest, DenseRejectsRangesNotHeld) {
  Store store(1);
  ASSERT_TRUE(store.Install(DenseTable(0, 10, UpdateRule::kSum)).ok());
  ASSERT_TRUE(store.Install(DenseTable(1, 10, UpdateRule::kSum, /*server=*/2)).ok());
  float buf[20] = {0};
  EXPECT_EQ(store.ApplyDense(0, 5, 6, buf, ApplyOp::kRule).code(), StatusCode::kNotFound);
  EXPECT_EQ(store.ReadDense(0, 11, 0, buf).code(), StatusCode::kNotFound);
  EXPECT_EQ(store.ApplyDense(1, 0, 1, buf, ApplyOp::kRule).code(), StatusCode::kNotFound);
  EXPECT_EQ(store.ApplyDense(9, 0, 1, buf, ApplyOp::kRule).code(), StatusCode::kNotFound);
  EXPECT_EQ(store.ApplySparse(0, nullptr, 0, 1, buf, ApplyOp::kRule).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ApplyDense(0, uint64_t{1} << 63, uint64_t{1} << 63, buf, ApplyOp::kRule).code(),
            StatusCode::kNotFound);
}

TEST(StoreTest, SparseRowsCreatedOnFirstTouchAndUpdated) {
  Store store(1);
  ASSERT_TRUE(store.Install(SparseTable(0, 3, UpdateRule::kSgd)).ok());
  const Key keys[2] = {42, 0xFFFFFFFFFFFFFFFFull};
  float rows[6];
  ASSERT_TRUE(store.ReadSparse(0, keys, 2, 3, rows).ok());
  for (float v : rows) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(store.sparse_rows(), 2u);
  const float g[6] = {4, 8, 12, 1, 1, 1};
  ASSERT_TRUE(store.ApplySparse(0, keys, 2, 3, g, ApplyOp::kRule).ok());
  ASSERT_TRUE(store.ReadSparse(0, keys, 2, 3, rows).ok());
  EXPECT_EQ(rows[0], -1.0f);
  EXPECT_EQ(rows[2], -3.0f);
  EXPECT_EQ(rows[5], -0.25f);
  EXPECT_EQ(store.ApplySparse(0, keys, 2, 4, g, ApplyOp::kRule).code(),
            StatusCode::kInvalidArgument);
}

TEST(StoreTest, SparseManyKeysInParallel) {
  Store store(1);
  ASSERT_TRUE(store.Install(SparseTable(0, 4, UpdateRule::kSum)).ok());
  std::mt19937_64 rng(1);
  std::vector<Key> keys(50000);
  for (auto& k : keys) k = rng();
  std::vector<float> g(keys.size() * 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 13);
  ASSERT_TRUE(store.ApplySparse(0, keys.data(), keys.size(), 4, g.data(), ApplyOp::kRule).ok());
  std::vector<float> out(g.size());
  ASSERT_TRUE(store.ReadSparse(0, keys.data(), keys.size(), 4, out.data()).ok());
  EXPECT_EQ(out, g);
}

TEST(StoreTest, SparseRejectsKeysOfOtherServers) {
  Store store(1);
  // This server holds only the lower half of the hash space.
  ASSERT_TRUE(store
                  .Install(SparseTable(
                      0, 1, UpdateRule::kSum,
                      {KeyRange{0, uint64_t{1} << 63, 1}, KeyRange{uint64_t{1} << 63, 0, 2}}))
                  .ok());
  Key theirs = 0;
  while (MixKey(theirs) < (uint64_t{1} << 63)) ++theirs;  // first key routed to server 2
  float v = 1;
  Key keys[1] = {theirs};
  EXPECT_EQ(store.ApplySparse(0, keys, 1, 1, &v, ApplyOp::kRule).code(), StatusCode::kNotFound);
  EXPECT_EQ(store.sparse_rows(), 0u);  // nothing was created
}

TEST(StoreTest, InitializersAreDeterministicAndShaped) {
  TableSpec u = TableSpec::Sparse("emb", 8);
  u.init = Initializer::kUniform;
  u.init_a = -0.5f;
  u.init_b = 0.5f;
  u.seed = 9;
  const uint64_t h = HashName(u.name);
  double sum = 0;
  for (Key k = 0; k < 2000; ++k) {
    for (uint32_t j = 0; j < 8; ++j) {
      const float v = InitialValue(u, h, k, j);
      ASSERT_GE(v, -0.5f);
      ASSERT_LT(v, 0.5f);
      ASSERT_EQ(v, InitialValue(u, h, k, j));
      sum += v;
    }
  }
  EXPECT_NEAR(sum / 16000, 0.0, 0.02);
  TableSpec n = u;
  n.init = Initializer::kNormal;
  n.init_a = 1.0f;
  n.init_b = 2.0f;
  double s1 = 0, s2 = 0;
  const int count = 20000;
  for (int k = 0; k < count; ++k) {
    const double v = InitialValue(n, h, k, 0);
    s1 += v;
    s2 += v * v;
  }
  const double mean = s1 / count, var = s2 / count - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.05);
  // Another seed gives other values.
  TableSpec u2 = u;
  u2.seed = 10;
  EXPECT_NE(InitialValue(u, h, 1, 0), InitialValue(u2, h, 1, 0));
}

TEST(StoreTest, DenseInitializerMatchesAcrossServers) {
  // Two servers holding different halves agree with the single-server values.
  TableInfo t = DenseTable(0, 30, UpdateRule::kSum);
  t.spec.init = Initializer::kUniform;
  t.spec.init_a = 0;
  t.spec.init_b = 1;
  Store one(1);
  ASSERT_TRUE(one.Install(t).ok());
  TableInfo split = t;
  split.ranges = {KeyRange{0, 2, 1}, KeyRange{2, 5, 2}};
  Store a(1), b(2);
  ASSERT_TRUE(a.Install(split).ok());
  ASSERT_TRUE(b.Install(split).ok());
  float whole[30], lo[14], hi[16];
  ASSERT_TRUE(one.ReadDense(0, 0, 30, whole).ok());
  ASSERT_TRUE(a.ReadDense(0, 0, 14, lo).ok());
  ASSERT_TRUE(b.ReadDense(0, 14, 16, hi).ok());
  for (int i = 0; i < 14; ++i) EXPECT_EQ(whole[i], lo[i]);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(whole[14 + i], hi[i]);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A pull reply of a whole range lends the range's memory; an update while the reply is
// still held must not change what the reply carries (copy on write), and must apply.
TEST(StoreTest, WholeRangeReplyIsCopiedOnWrite) {
  Store store(1);
  ASSERT_TRUE(store.Install(DenseTable(0, 21, UpdateRule::kSum)).ok());  // one range: 21 elements
  std::vector<float> g(21);
  for (int i = 0; i < 21; ++i) g[i] = static_cast<float>(i);
  ASSERT_TRUE(store.ApplyDense(0, 0, 21, g.data(), ApplyOp::kRule).ok());
  Frame lent;
  ASSERT_TRUE(store.ReadDenseFrame(0, 0, 21, &lent).ok());
  ASSERT_EQ(lent.size(), 21 * sizeof(float));
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(store.ApplyDense(0, 0, 21, g.data(), ApplyOp::kRule).ok());
    const float* old = reinterpret_cast<const float*>(lent.data());
    for (int i = 0; i < 21; ++i) ASSERT_EQ(old[i], static_cast<float>(i)) << "round " << round;
  }
  std::vector<float> now(21);
  ASSERT_TRUE(store.ReadDense(0, 0, 21, now.data()).ok());
  for (int i = 0; i < 21; ++i) EXPECT_EQ(now[i], 4.0f * i);
  lent = Frame();  // released: the next update may write in place again
  ASSERT_TRUE(store.ApplyDense(0, 0, 21, g.data(), ApplyOp::kAssign).ok());
  ASSERT_TRUE(store.ReadDense(0, 0, 21, now.data()).ok());
  for (int i = 0; i < 21; ++i) EXPECT_EQ(now[i], static_cast<float>(i));
}

}  // namespace
}  // namespace ps
