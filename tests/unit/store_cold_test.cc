// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The RocksDB cold tier of bounded sparse tables (docs/sparse.md "Cold tier"): rows
// evicted from memory are spilled and read back whole (values and the rule's state), a
// store installed on the same directory finds them, and failures are errors, not crashes.
// Exact outcomes: capacity 4 uses one stripe (an exact LRU).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "server/store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path p = fs::path(testing::TempDir()) / ("layerps_cold_" + name);
  fs::remove_all(p);
  return p.string();
}

TableInfo Cold(uint32_t dim, uint64_t capacity, bool cold = true,
               UpdateRule rule = UpdateRule::kAdagrad) {
  TableInfo t;
  t.id = 0;
  t.spec = TableSpec::Sparse("emb", dim, rule);
  t.spec.learning_rate = 0.5f;
  t.spec.capacity = capacity;
  t.spec.eviction = capacity ? Eviction::kLru : Eviction::kNone;
  t.spec.cold_tier = cold;
  t.ranges = {KeyRange{0, 0, 1}};
  return t;
}

// Key k's gradient in round r: distinct per key and round.
std::vector<float> Grad(Key k, int r) {
  return {1.0f + k + 0.25f * r, -0.5f * (k + 1) + r};
}

void PushRound(Store& s, int r, uint32_t dim = 2) {
  for (Key k = 0; k < 20; ++k) {
    std::vector<float> g = Grad(k, r);
    g.resize(dim, 0.125f);
    ASSERT_TRUE(s.ApplySparse(0, &k, 1, dim, g.data(), ApplyOp::kRule).ok()) << k;
  }
}

// Every row of a table as VisitRows gives it (values and the rule's state), by id.
std::map<Key, std::vector<float>> WholeRows(Store& s) {
  std::map<Key, std::vector<float>> rows;
  const uint32_t width = s.RowWidth(0);
  EXPECT_TRUE(s.VisitRows(0, [&](Key k, const float* row) {
                 rows[k].assign(row, row + width);
                 return Status::OK();
               }).ok());
  return rows;
}

// Per element (adagrad: 2 state floats per row of 2) and per row (rowwise_adagrad: 1).
class StoreColdRuleTest : public ::testing::TestWithParam<UpdateRule> {};

TEST_P(StoreColdRuleTest, EvictedRowsComeBackExactlyWithTheirState) {
  const UpdateRule rule = GetParam();
  const std::string dir = FreshDir(std::string("exact_") + UpdateRuleName(rule));
  Store cold(1, dir);
  ASSERT_TRUE(cold.Install(Cold(2, 4, true, rule)).ok());
  EXPECT_EQ(cold.RowWidth(0), rule == UpdateRule::kRowwiseAdagrad ? 3u : 4u);
  // The reference: the same pushes on a table that never evicts.
  Store ref(1);
  ASSERT_TRUE(ref.Install(Cold(2, 0, false, rule)).ok());
  for (int r = 0; r < 2; ++r) {
    PushRound(cold, r);
    PushRound(ref, r);
  }
  // Round 0: 20 rows created, 16 evicted (spilled). Round 1: LRU holds 16..19 and the
  // keys come in order 0..19, so every key misses (reloaded) and evicts one (spilled).
  Store::SparseCounters c = cold.SparseStats().at(0);
  EXPECT_EQ(c.rows_live, 4u);
  EXPECT_EQ(c.spilled, 36u);
  EXPECT_EQ(c.evicted, 36u);
  EXPECT_EQ(c.reloaded, 20u);
  EXPECT_EQ(c.admitted, 40u);  // reloaded rows count as admitted (rows_live identity)
  EXPECT_EQ(cold.sparse_rows(), 4u);
  // Adagrad's second step depends on the accumulator: equal values mean the state came
  // back too.
  for (Key k = 0; k < 20; ++k) {
    float a[2], b[2];
    ASSERT_TRUE(cold.ReadSparse(0, &k, 1, 2, a).ok());
    ASSERT_TRUE(ref.ReadSparse(0, &k, 1, 2, b).ok());
    EXPECT_EQ(a[0], b[0]) << k;
    EXPECT_EQ(a[1], b[1]) << k;
  }
  c = cold.SparseStats().at(0);
  EXPECT_EQ(c.reloaded, 40u);
  EXPECT_EQ(c.spilled, 56u);
  EXPECT_EQ(c.rows_live, 4u);
  // And the state itself, bit for bit: the rows on disk and in memory are the reference's.
  const std::map<Key, std::vector<float>> got = WholeRows(cold), want = WholeRows(ref);
  EXPECT_EQ(got.size(), 20u);
  EXPECT_EQ(got, want);
  EXPECT_NE(want.at(3).back(), 0.0f);  // an accumulator the pushes grew
}

TEST(StoreColdTest, MemoryOnlyBoundedTableForgetsWhatTheColdTierKeeps) {
  // The same pushes without the cold tier: evicted keys restart from the initializer, so
  // the exact test above checks something the cold tier does.
  Store hot(1);
  ASSERT_TRUE(hot.Install(Cold(2, 4, false)).ok());
  Store ref(1);
  ASSERT_TRUE(ref.Install(Cold(2, 0, false)).ok());
  for (int r = 0; r < 2; ++r) {
    PushRound(hot, r);
    PushRound(ref, r);
  }
  Key k = 0;
  float a[2], b[2];
  ASSERT_TRUE(hot.ReadSparse(0, &k, 1, 2, a).ok());
  ASSERT_TRUE(ref.ReadSparse(0, &k, 1, 2, b).ok());
  EXPECT_NE(a[0], b[0]);
  EXPECT_EQ(hot.SparseStats().at(0).spilled, 0u);
}

TEST_P(StoreColdRuleTest, ARestartedStoreFindsTheRows) {
  const UpdateRule rule = GetParam();
  const std::string dir = FreshDir(std::string("restart_") + UpdateRuleName(rule));
  std::vector<std::vector<float>> want(20, std::vector<float>(2));
  {
    Store s(1, dir);
    ASSERT_TRUE(s.Install(Cold(2, 4, true, rule)).ok());
    PushRound(s, 0);
    PushRound(s, 1);
    for (Key k = 0; k < 20; ++k) ASSERT_TRUE(s.ReadSparse(0, &k, 1, 2, want[k].data()).ok());
  }  // destroyed: the 4 rows in memory are written too
  Store s(1, dir);
  ASSERT_TRUE(s.Install(Cold(2, 4, true, rule)).ok());
  for (Key k = 0; k < 20; ++k) {
    float v[2];
    ASSERT_TRUE(s.ReadSparse(0, &k, 1, 2, v).ok());
    EXPECT_EQ(v[0], want[k][0]) << k;
    EXPECT_EQ(v[1], want[k][1]) << k;
  }
  const Store::SparseCounters c = s.SparseStats().at(0);
  EXPECT_EQ(c.reloaded, 20u);
  EXPECT_EQ(c.spilled, 16u);
  // And the optimizer state: one more round on both sides matches a reference that saw
  // all three rounds.
  Store ref(1);
  ASSERT_TRUE(ref.Install(Cold(2, 0, false, rule)).ok());
  for (int r = 0; r < 3; ++r) PushRound(ref, r);
  PushRound(s, 2);
  for (Key k = 0; k < 20; ++k) {
    float a[2], b[2];
    ASSERT_TRUE(s.ReadSparse(0, &k, 1, 2, a).ok());
    ASSERT_TRUE(ref.ReadSparse(0, &k, 1, 2, b).ok());
    EXPECT_EQ(a[0], b[0]) << k;
    EXPECT_EQ(a[1], b[1]) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, StoreColdRuleTest,
                         ::testing::Values(UpdateRule::kAdagrad, UpdateRule::kRowwiseAdagrad),
                         [](const ::testing::TestParamInfo<UpdateRule>& info) {
                           return std::string(UpdateRuleName(info.param));
                         });

TEST(StoreColdTest, UnusableDirectoryIsAnErrorAtInstall) {
  // A regular file where the directory should be (root can write anywhere, so not a mode).
  const std::string dir = FreshDir("file");
  fs::create_directories(dir);
  { std::ofstream(dir + "/blocker") << "x"; }
  Store s(1, dir + "/blocker");
  const Status st = s.Install(Cold(2, 4));
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st;
  EXPECT_NE(st.message().find("cold tier"), std::string::npos) << st;
  EXPECT_FALSE(s.Has(0));

  Store none(1);  // no cold_dir
  const Status st2 = none.Install(Cold(2, 4));
  EXPECT_EQ(st2.code(), StatusCode::kFailedPrecondition) << st2;
  EXPECT_FALSE(none.Has(0));

  Store nocap(1, FreshDir("nocap"));
  EXPECT_EQ(nocap.Install(Cold(2, 0)).code(), StatusCode::kInvalidArgument);
  TableSpec spec = Cold(2, 0).spec;
  EXPECT_EQ(spec.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(StoreColdTest, RowOfTheWrongLengthIsAnErrorOnTheRequest) {
  const std::string dir = FreshDir("corrupt");
  {
    Store s(1, dir);
    ASSERT_TRUE(s.Install(Cold(2, 4)).ok());
    PushRound(s, 0);
  }
  // The same directory under a table of another dim: every stored row has the wrong size.
  Store s(1, dir);
  ASSERT_TRUE(s.Install(Cold(3, 4)).ok());
  Key k = 0;
  float v[3];
  const Status st = s.ReadSparse(0, &k, 1, 3, v);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st;
  EXPECT_NE(st.message().find("corrupt"), std::string::npos) << st;
  std::vector<float> g{1, 1, 1};
  EXPECT_EQ(s.ApplySparse(0, &k, 1, 3, g.data(), ApplyOp::kRule).code(), StatusCode::kIoError);
  // A key never stored is fine.
  Key fresh = 1000;
  EXPECT_TRUE(s.ReadSparse(0, &fresh, 1, 3, v).ok());
}

// A full disk: the cold tier lives on a 2 MiB tmpfs (mounted here, so root only; skipped
// otherwise). Pushes of new keys spill rows until the disk is full; the push that cannot
// spill fails with IoError naming the cold tier, and every key whose push succeeded still
// reads back its exact value: nothing is lost without an error.
TEST(StoreColdTest, AFullDiskIsAnErrorAndLosesNothing) {
  const std::string dir = FreshDir("full");
  fs::create_directories(dir);
  if (::geteuid() != 0 ||
      std::system(("mount -t tmpfs -o size=2m tmpfs " + dir + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "needs root to mount a small tmpfs";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { (void)std::system(("umount " + dir).c_str()); }
  } unmount{dir};
  TableInfo t;
  t.id = 0;
  t.spec = TableSpec::Sparse("emb", 256, UpdateRule::kSum);  // 1 KiB rows
  t.spec.capacity = 4;
  t.spec.eviction = Eviction::kLru;
  t.spec.cold_tier = true;
  t.ranges = {KeyRange{0, 0, 1}};
  std::vector<Key> done;
  Status failed;
  {
    Store s(1, dir);
    ASSERT_TRUE(s.Install(t).ok());
    std::vector<float> g(256);
    for (Key k = 1; k <= 20000 && failed.ok(); ++k) {
      for (size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>(k) + 0.001f * j;
      Status st = s.ApplySparse(0, &k, 1, 256, g.data(), ApplyOp::kRule);
      if (st.ok()) {
        done.push_back(k);
      } else {
        failed = st;
      }
    }
    ASSERT_FALSE(failed.ok()) << "2 MiB never filled after " << done.size() << " rows";
    EXPECT_EQ(failed.code(), StatusCode::kIoError) << failed;
    EXPECT_NE(failed.message().find("cold tier"), std::string::npos) << failed;
    EXPECT_GT(done.size(), 100u);
    // Every row a push succeeded for is still there, in memory or on disk.
    std::vector<float> v(256);
    size_t readable = 0;
    for (Key k : done) {
      Status st = s.ReadSparse(0, &k, 1, 256, v.data());
      if (!st.ok()) {
        // A read that would have to evict (and so spill) a row to make room may fail
        // too; it must say so, and lose nothing.
        EXPECT_EQ(st.code(), StatusCode::kIoError) << st;
        continue;
      }
      ++readable;
      ASSERT_EQ(v[0], static_cast<float>(k)) << k;
      ASSERT_EQ(v[255], static_cast<float>(k) + 0.001f * 255) << k;
    }
    EXPECT_GT(readable, 0u);
  }
}

}  // namespace
}  // namespace ps
