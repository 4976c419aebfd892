// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The units the sparse row store is made of, each on its own: the index (against a
// std::unordered_map under random inserts and erases), the eviction and expiry order
// (exact victims for lru, lfu and decayed), admission (the sketch's counts, the
// probability's determinism) and the cold tier (put, get, visit, delete, clear, reopen).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <unordered_map>
#include <vector>

#include "common/hash.h"
#include "server/admission.h"
#include "server/cold_tier.h"
#include "server/row_index.h"
#include "server/row_policy.h"

namespace ps {
namespace {

TEST(RowIndexTest, AgreesWithAMapUnderInsertsAndErases) {
  RowIndex index;
  std::unordered_map<Key, uint32_t> want;
  std::mt19937_64 rng(7);
  uint32_t next_row = 0;
  for (int i = 0; i < 200000; ++i) {
    // Keys from a small range so that erases hit and probes collide.
    const Key key = rng() % 50000;
    const uint64_t h = MixKey(key);
    size_t slot = 0;
    const uint32_t row = index.Find(key, h, &slot);
    auto it = want.find(key);
    ASSERT_EQ(row, it == want.end() ? RowIndex::kNoRow : it->second) << "key " << key;
    if (row == RowIndex::kNoRow) {
      want[key] = next_row;
      index.Insert(key, h, next_row++, slot, want.size());
    } else if (rng() % 2 == 0) {
      index.Erase(h, row);
      want.erase(key);
    }
    // At most half full, always.
    ASSERT_LE(want.size() * 2, index.slots());
  }
  size_t seen = 0;
  index.ForEach([&](Key key, uint32_t row) {
    ++seen;
    ASSERT_EQ(want.at(key), row);
  });
  EXPECT_EQ(seen, want.size());
}

TEST(RowIndexTest, GrowsFromEmptyAndKeepsEveryKey) {
  RowIndex index;
  EXPECT_EQ(index.Find(5, MixKey(5)), RowIndex::kNoRow);
  for (uint32_t k = 0; k < 10000; ++k) index.Insert(k, MixKey(k), k, RowIndex::kNoSlot, k + 1);
  EXPECT_EQ(index.slots(), 32768u);  // the smallest power of two with 10000 <= half
  for (uint32_t k = 0; k < 10000; ++k) ASSERT_EQ(index.Find(k, MixKey(k)), k);
}

// Adds rows 0..n-1 (keys 100 + row) at push step 1.
void AddRows(RowPolicy* p, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    bool fresh = false;
    ASSERT_EQ(p->Allocate(&fresh), i);
    ASSERT_TRUE(fresh);
    p->Add(i, 100 + i, /*step=*/1, /*table_step=*/1, /*now_ms=*/0, /*scored=*/true);
  }
}

TEST(RowPolicyTest, LruEvictsTheLeastRecentlyTouched) {
  RowPolicy p(Eviction::kLru, /*expiry=*/false, 0);
  AddRows(&p, 4);
  EXPECT_EQ(p.Victim(), 0u);
  p.Touch(0, 2, 0);
  EXPECT_EQ(p.Victim(), 1u);
  p.Remove(1);
  EXPECT_EQ(p.Victim(), 2u);
  EXPECT_EQ(p.live(), 3u);
  bool fresh = true;
  EXPECT_EQ(p.Allocate(&fresh), 1u);  // the dropped number first
  EXPECT_FALSE(fresh);
  p.Add(1, 7, 3, 3, 0, true);
  EXPECT_EQ(p.meta(1).key, 7u);
  EXPECT_EQ(p.Victim(), 2u);
}

TEST(RowPolicyTest, LfuEvictsTheLeastTouchedThenTheOldest) {
  RowPolicy p(Eviction::kLfu, false, 0);
  AddRows(&p, 5);
  for (uint32_t r : {0u, 0u, 1u, 3u, 3u, 3u, 4u}) p.Touch(r, 2, 0);
  EXPECT_EQ(p.Victim(), 2u);  // one touch, the only one
  p.Remove(2);
  EXPECT_EQ(p.Victim(), 1u);  // two touches (1 and 4): 1 was touched first
  p.Remove(1);
  EXPECT_EQ(p.Victim(), 4u);
  p.Remove(4);
  EXPECT_EQ(p.Victim(), 0u);  // three touches against four
}

TEST(RowPolicyTest, DecayedEvictsTheLowestScore) {
  // score_decay 0.5: a row pushed at steps 1 and 2 scores 1 * 0.5 + 1 = 1.5 at step 2, a
  // row pushed at step 2 alone scores 1, one pushed at step 1 alone 0.5.
  RowPolicy p(Eviction::kDecayed, false, std::log(2.0));
  for (uint32_t i = 0; i < 3; ++i) {
    bool fresh;
    p.Allocate(&fresh);
  }
  p.Add(0, 10, 1, 1, 0, true);
  p.Add(1, 11, 1, 1, 0, true);
  p.Add(2, 12, 2, 2, 0, true);
  p.Touch(0, 2, 0);
  EXPECT_EQ(p.Victim(), 1u);
  p.Remove(1);
  EXPECT_EQ(p.Victim(), 2u);
  // A row a pull created scores 0: it goes first.
  bool fresh;
  const uint32_t r = p.Allocate(&fresh);
  p.Add(r, 13, /*step=*/0, /*table_step=*/2, 0, /*scored=*/false);
  EXPECT_EQ(p.Victim(), r);
}

TEST(RowPolicyTest, TheUpdateListKeepsTheOldestPushLast) {
  RowPolicy p(Eviction::kNone, /*expiry=*/true, 0);
  AddRows(&p, 3);
  EXPECT_EQ(p.Oldest(), 0u);
  p.Touch(0, 5, 50);  // a push: to the front
  EXPECT_EQ(p.Oldest(), 1u);
  p.Touch(1, 0, 60);  // a pull does not refresh expiry
  EXPECT_EQ(p.Oldest(), 1u);
  EXPECT_EQ(p.meta(0).step, 5u);
  EXPECT_EQ(p.meta(0).update_ms, 50);
  p.Remove(1);
  p.Remove(2);
  EXPECT_EQ(p.Oldest(), 0u);
  p.Remove(0);
  EXPECT_EQ(p.Oldest(), RowPolicy::kNoRow);
}

TEST(AdmissionTest, AfterCountsPushesOfAnId) {
  TableSpec spec;
  spec.admit_after = 3;
  Admission a(spec, /*name_hash=*/1, /*stripes=*/16);
  ASSERT_TRUE(a.enabled());
  AdmissionSketch sketch = a.NewSketch();
  const uint64_t h = MixKey(42);
  EXPECT_FALSE(a.Admit(42, h, &sketch));
  EXPECT_FALSE(a.Admit(42, h, &sketch));
  EXPECT_TRUE(a.Admit(42, h, &sketch));  // the third push
  EXPECT_FALSE(a.Admit(43, MixKey(43), &sketch));
}

TEST(AdmissionTest, ProbabilityIsAFixedFunctionOfTheId) {
  TableSpec spec;
  spec.admit_probability = 0.25f;
  Admission a(spec, 1, 1), b(spec, 1, 1), other(spec, 2, 1);
  AdmissionSketch s = a.NewSketch();
  int admitted = 0, differ = 0;
  for (Key k = 0; k < 20000; ++k) {
    const bool yes = a.Admit(k, MixKey(k), &s);
    ASSERT_EQ(yes, a.Admit(k, MixKey(k), &s));  // always the same answer
    ASSERT_EQ(yes, b.Admit(k, MixKey(k), &s));  // in another store too
    differ += yes != other.Admit(k, MixKey(k), &s);
    admitted += yes;
  }
  EXPECT_NEAR(admitted / 20000.0, 0.25, 0.02);
  EXPECT_GT(differ, 1000);  // another table name: other ids
}

TEST(AdmissionTest, WithoutARuleEveryIdPasses) {
  Admission a(TableSpec{}, 1, 16);
  EXPECT_FALSE(a.enabled());
}

#ifdef LAYERPS_HAVE_ROCKSDB
TEST(ColdTierTest, RowsSurviveACloseAndComeBackInIdOrder) {
  const std::string dir = testing::TempDir() + "/layerps_cold_unit";
  std::filesystem::remove_all(dir);
  {
    auto cold = ColdTier::Open(dir, "t");
    ASSERT_TRUE(cold.ok()) << cold.status();
    for (Key k : {Key{5}, Key{1}, Key{1} << 40}) {
      const float row[3] = {float(k % 7), 1.5f, -2.0f};
      ASSERT_TRUE((*cold)->Put(k, row, 3).ok());
    }
    ASSERT_TRUE((*cold)->Delete(5).ok());
    ASSERT_TRUE((*cold)->Close().ok());
  }
  auto cold = ColdTier::Open(dir, "t");
  ASSERT_TRUE(cold.ok()) << cold.status();
  float row[3];
  bool found = true;
  ASSERT_TRUE((*cold)->Get(5, row, 3, &found).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE((*cold)->Get(1, row, 3, &found).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[2], -2.0f);
  // A read with another width is corrupt data, an error.
  EXPECT_EQ((*cold)->Get(1, row, 2, &found).code(), StatusCode::kIoError);
  std::vector<Key> ids;
  ASSERT_TRUE((*cold)->ForEach(3, [&](Key k, const float*) {
                       ids.push_back(k);
                       return Status::OK();
                     }).ok());
  EXPECT_EQ(ids, (std::vector<Key>{1, Key{1} << 40}));
  ASSERT_TRUE((*cold)->Clear().ok());
  ASSERT_TRUE((*cold)->Get(1, row, 3, &found).ok());
  EXPECT_FALSE(found);
}
#endif

TEST(ColdTierTest, BadPlacesAreRefused) {
  EXPECT_EQ(ColdTier::Open("", "t").status().code(), StatusCode::kFailedPrecondition);
#ifdef LAYERPS_HAVE_ROCKSDB
  EXPECT_EQ(ColdTier::Open(testing::TempDir(), "a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ColdTier::Open(testing::TempDir(), "..").status().code(), StatusCode::kInvalidArgument);
#endif
}

}  // namespace
}  // namespace ps
