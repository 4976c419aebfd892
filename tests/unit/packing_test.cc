// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Tests of the CPU packing reference (src/worker/packing.h). Inputs are random and drawn
// fresh per test; the seed is printed and LAYERPS_TEST_SEED=<seed> replays a run.
// Outputs are poisoned (0xFF bytes: NaN floats, all-ones keys) before each call, and the
// expected values are computed independently (std::map, linear scans, a table of every
// half value).
#include "worker/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <unordered_map>
#include <random>
#include <string>
#include <vector>

#include "common/hash.h"

namespace ps {
namespace pack {
namespace {

uint64_t TestSeed() {
  if (const char* s = std::getenv("LAYERPS_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

// Every test draws its own seed and prints it, so a failure can be replayed.
class PackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = TestSeed();
    rng_.seed(seed_);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::cout << "[ seed     ] " << info->name() << ": LAYERPS_TEST_SEED=" << seed_ << "\n";
    RecordProperty("seed", std::to_string(seed_));
  }

  std::string SeedMsg() const { return "replay with LAYERPS_TEST_SEED=" + std::to_string(seed_); }

  // Keys drawn from [0, space) (space 0 means the full 64-bit range); a few of them
  // replaced by the extremes 0 and 2^64-1 when the space allows.
  std::vector<Key> RandomKeys(size_t n, uint64_t space) {
    std::vector<Key> k(n);
    std::uniform_int_distribution<uint64_t> d(0, space == 0 ? ~uint64_t{0} : space - 1);
    for (auto& x : k) x = d(rng_);
    if (space == 0 && n >= 4) {
      k[n / 3] = 0;
      k[n / 2] = ~uint64_t{0};
    }
    return k;
  }

  // Never zero: magnitudes in [0.5, 2) with a random sign.
  std::vector<float> RandomRows(size_t count) {
    std::vector<float> v(count);
    std::uniform_real_distribution<float> mag(0.5f, 2.0f);
    std::bernoulli_distribution neg(0.5);
    for (auto& x : v) x = neg(rng_) ? -mag(rng_) : mag(rng_);
    return v;
  }

  // bucket_begin[0] = 0, then num_buckets-1 distinct ascending random boundaries.
  std::vector<uint64_t> RandomBuckets(size_t num_buckets) {
    std::vector<uint64_t> b;
    b.push_back(0);
    std::uniform_int_distribution<uint64_t> d(1, ~uint64_t{0});
    while (b.size() < num_buckets) {
      uint64_t x = d(rng_);
      if (std::find(b.begin(), b.end(), x) == b.end()) b.push_back(x);
    }
    std::sort(b.begin(), b.end());
    return b;
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

template <typename T>
void Poison(std::vector<T>& v) {
  if (!v.empty()) std::memset(v.data(), 0xFF, v.size() * sizeof(T));
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The bucket of key by a linear scan (independent of BucketOf's binary search).
size_t LinearBucket(Key key, const std::vector<uint64_t>& begin) {
  const uint64_t h = MixKey(key);
  size_t b = 0;
  for (size_t i = 0; i < begin.size(); ++i) {
    if (begin[i] <= h) b = i;
  }
  return b;
}

// Expected coalescing: key -> sum of its rows, summed in input order.
std::map<Key, std::vector<float>> ExpectedSums(const std::vector<Key>& keys,
                                               const std::vector<float>& rows, uint32_t dim) {
  std::map<Key, std::vector<float>> sums;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = sums.find(keys[i]);
    if (it == sums.end()) {
      sums.emplace(keys[i],
                   std::vector<float>(rows.begin() + i * dim, rows.begin() + (i + 1) * dim));
    } else {
      for (uint32_t j = 0; j < dim; ++j) it->second[j] += rows[i * dim + j];
    }
  }
  return sums;
}

struct Shape {
  size_t n;
  uint64_t space;  // 0: full 64-bit keys (few duplicates)
  uint32_t dim;
};

std::vector<Shape> CoalesceShapes() {
  return {{0, 10, 16},   {1, 10, 1},       {1, 0, 129},           {7, 3, 16},
          {1001, 50, 1}, {1001, 0, 16},    {1001, 500, 129},      {65537, 1000, 129},
          {65537, 0, 1}, {1000003, 0, 16}, {1000003, 100000, 16}, {1000003, 17, 1}};
}

// ---- Coalesce / UniqueKeys ------------------------------------------------------------

TEST_F(PackingTest, CoalesceMatchesMap) {
  for (const Shape& s : CoalesceShapes()) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " space=" + std::to_string(s.space) +
                 " dim=" + std::to_string(s.dim) + " " + SeedMsg());
    const auto keys = RandomKeys(s.n, s.space);
    const auto rows = RandomRows(s.n * s.dim);
    std::vector<Key> out_keys(s.n);
    std::vector<float> out_rows(s.n * s.dim);
    std::vector<uint32_t> inverse(s.n);
    Poison(out_keys);
    Poison(out_rows);
    Poison(inverse);
    const size_t m = Coalesce(keys.data(), rows.data(), s.n, s.dim, out_keys.data(),
                              out_rows.data(), inverse.data());
    const auto expected = ExpectedSums(keys, rows, s.dim);
    ASSERT_EQ(m, expected.size());
    size_t u = 0;
    for (const auto& [key, sum] : expected) {
      ASSERT_EQ(out_keys[u], key) << "u=" << u;
      for (uint32_t j = 0; j < s.dim; ++j) {
        // Same summation order as the contract: bit-exact.
        ASSERT_EQ(Bits(out_rows[u * s.dim + j]), Bits(sum[j])) << "u=" << u << " j=" << j;
      }
      ++u;
    }
    for (size_t i = 0; i < s.n; ++i) {
      ASSERT_LT(inverse[i], m);
      ASSERT_EQ(out_keys[inverse[i]], keys[i]) << "i=" << i;
    }
    // Nothing written past m.
    for (size_t i = m; i < s.n; ++i) ASSERT_EQ(out_keys[i], ~Key{0});
  }
}

TEST_F(PackingTest, CoalesceWithoutInverse) {
  const auto keys = RandomKeys(999, 20);
  const auto rows = RandomRows(999 * 3);
  std::vector<Key> out_keys(999);
  std::vector<float> out_rows(999 * 3);
  Poison(out_keys);
  Poison(out_rows);
  const size_t m =
      Coalesce(keys.data(), rows.data(), 999, 3, out_keys.data(), out_rows.data(), nullptr);
  EXPECT_EQ(m, ExpectedSums(keys, rows, 3).size()) << SeedMsg();
}

TEST_F(PackingTest, UniqueKeysMatchesSet) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{1001}, size_t{1000003}}) {
    for (uint64_t space : {uint64_t{5}, uint64_t{100000}, uint64_t{0}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " space=" + std::to_string(space) + " " + SeedMsg());
      const auto keys = RandomKeys(n, space);
      std::vector<Key> out_keys(n);
      std::vector<uint32_t> inverse(n);
      Poison(out_keys);
      Poison(inverse);
      const size_t m = UniqueKeys(keys.data(), n, out_keys.data(), inverse.data());
      std::vector<Key> expected(keys);
      std::sort(expected.begin(), expected.end());
      expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
      ASSERT_EQ(m, expected.size());
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), out_keys.begin()));
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out_keys[inverse[i]], keys[i]);
    }
  }
}

TEST_F(PackingTest, CoalesceSumsInInputOrder) {
  // 1e8 + 1 - 1e8 depends on the order: the contract is input order.
  const Key keys[] = {7, 3, 7, 7};
  const float rows[] = {1e8f, 5.0f, 1.0f, -1e8f};
  Key out_keys[4];
  float out_rows[4];
  ASSERT_EQ(Coalesce(keys, rows, 4, 1, out_keys, out_rows, nullptr), 2u);
  EXPECT_EQ(out_keys[0], 3u);
  EXPECT_EQ(out_keys[1], 7u);
  EXPECT_EQ(out_rows[0], 5.0f);
  EXPECT_EQ(out_rows[1], (1e8f + 1.0f) + -1e8f);
}

// ---- Bucket -----------------------------------------------------------------------------

TEST_F(PackingTest, BucketOfMatchesLinearScan) {
  for (size_t nb : {size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
    const auto begin = RandomBuckets(nb);
    for (Key k : RandomKeys(10000, 0)) {
      ASSERT_EQ(BucketOf(k, begin.data(), nb), LinearBucket(k, begin)) << SeedMsg();
    }
  }
}

TEST_F(PackingTest, BucketBoundaries) {
  // Keys whose mixed value lies exactly on, just below and just above a boundary.
  const auto some = RandomKeys(8, 0);
  std::vector<uint64_t> begin = {0};
  for (Key k : some) begin.push_back(MixKey(k));
  std::sort(begin.begin(), begin.end());
  begin.erase(std::unique(begin.begin(), begin.end()), begin.end());
  for (size_t b = 1; b < begin.size(); ++b) {
    // MixKey is a bijection; find the keys of begin[b] among the sample.
    for (Key k : some) {
      if (MixKey(k) == begin[b]) {
        EXPECT_EQ(BucketOf(k, begin.data(), begin.size()), b) << SeedMsg();
      }
    }
  }
  // Every key lands in the bucket whose range holds its mixed value.
  for (Key k : RandomKeys(2000, 0)) {
    const size_t b = BucketOf(k, begin.data(), begin.size());
    ASSERT_LE(begin[b], MixKey(k));
    if (b + 1 < begin.size()) {
      ASSERT_LT(MixKey(k), begin[b + 1]);
    }
  }
}

TEST_F(PackingTest, BucketMatchesPerBucketLists) {
  const std::vector<Shape> shapes = {
      {0, 10, 16}, {1, 0, 1}, {1001, 0, 129}, {1001, 30, 1}, {1000003, 0, 16}};
  for (const Shape& s : shapes) {
    for (size_t nb : {size_t{1}, size_t{3}, size_t{16}}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " dim=" + std::to_string(s.dim) +
                   " buckets=" + std::to_string(nb) + " " + SeedMsg());
      const auto keys = RandomKeys(s.n, s.space);
      const auto rows = RandomRows(s.n * s.dim);
      const auto begin = RandomBuckets(nb);
      std::vector<Key> out_keys(s.n);
      std::vector<float> out_rows(s.n * s.dim);
      std::vector<size_t> offsets(nb + 1);
      Poison(out_keys);
      Poison(out_rows);
      Poison(offsets);
      Bucket(keys.data(), rows.data(), s.n, s.dim, begin.data(), nb, out_keys.data(),
             out_rows.data(), offsets.data());
      // Expected: per-bucket lists in input order, built with the linear scan.
      std::vector<std::vector<size_t>> lists(nb);
      for (size_t i = 0; i < s.n; ++i) lists[LinearBucket(keys[i], begin)].push_back(i);
      size_t pos = 0;
      for (size_t b = 0; b < nb; ++b) {
        ASSERT_EQ(offsets[b], pos);
        for (size_t i : lists[b]) {
          ASSERT_EQ(out_keys[pos], keys[i]);
          ASSERT_EQ(0,
                    std::memcmp(&out_rows[pos * s.dim], &rows[i * s.dim], s.dim * sizeof(float)));
          ++pos;
        }
      }
      ASSERT_EQ(offsets[nb], s.n);
    }
  }
}

TEST_F(PackingTest, BucketKeysOnly) {
  const auto keys = RandomKeys(501, 0);
  const auto begin = RandomBuckets(4);
  std::vector<Key> out_keys(501);
  std::vector<size_t> offsets(5);
  Poison(out_keys);
  Bucket(keys.data(), nullptr, 501, 8, begin.data(), 4, out_keys.data(), nullptr, offsets.data());
  EXPECT_EQ(offsets[4], 501u);
  std::vector<Key> a(keys), b(out_keys);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b) << SeedMsg();
}

// ---- CoalesceAndBucket --------------------------------------------------------------------

TEST_F(PackingTest, CoalesceAndBucketEqualsCoalesceThenBucket) {
  for (const Shape& s : CoalesceShapes()) {
    for (size_t nb : {size_t{1}, size_t{5}}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " space=" + std::to_string(s.space) + " dim=" +
                   std::to_string(s.dim) + " buckets=" + std::to_string(nb) + " " + SeedMsg());
      const auto keys = RandomKeys(s.n, s.space);
      const auto rows = RandomRows(s.n * s.dim);
      const auto begin = RandomBuckets(nb);
      // Two-step path.
      std::vector<Key> ck(s.n), bk(s.n);
      std::vector<float> cr(s.n * s.dim), br(s.n * s.dim);
      std::vector<size_t> boff(nb + 1);
      const size_t m1 =
          Coalesce(keys.data(), rows.data(), s.n, s.dim, ck.data(), cr.data(), nullptr);
      Bucket(ck.data(), cr.data(), m1, s.dim, begin.data(), nb, bk.data(), br.data(), boff.data());
      // Fused path.
      std::vector<Key> fk(s.n);
      std::vector<float> fr(s.n * s.dim);
      std::vector<uint32_t> inv(s.n);
      std::vector<size_t> foff(nb + 1);
      Poison(fk);
      Poison(fr);
      Poison(inv);
      Poison(foff);
      const size_t m2 = CoalesceAndBucket(keys.data(), rows.data(), s.n, s.dim, begin.data(), nb,
                                          fk.data(), fr.data(), inv.data(), foff.data());
      ASSERT_EQ(m1, m2);
      ASSERT_EQ(boff, foff);
      ASSERT_TRUE(std::equal(bk.begin(), bk.begin() + m1, fk.begin()));
      ASSERT_EQ(
          0, m1 * s.dim == 0 ? 0 : std::memcmp(br.data(), fr.data(), m1 * s.dim * sizeof(float)));
      for (size_t b = 0; b < nb; ++b) {
        // Each segment sorted by key and in its bucket.
        for (size_t p = foff[b]; p < foff[b + 1]; ++p) {
          ASSERT_EQ(LinearBucket(fk[p], begin), b);
          if (p > foff[b]) {
            ASSERT_LT(fk[p - 1], fk[p]);
          }
        }
      }
      for (size_t i = 0; i < s.n; ++i) ASSERT_EQ(fk[inv[i]], keys[i]);
    }
  }
}

// The hash-based packing agrees with the sorted one up to the order of keys inside a
// bucket, which is the order of first occurrence.
TEST_F(PackingTest, HashCoalesceAndBucketAgreesWithTheSortedOne) {
  for (const Shape& s : CoalesceShapes()) {
    // 1: the unique keys written in place; 5 and 16: the bucket counted without a branch;
    // 40: by binary search.
    for (size_t nb : {size_t{1}, size_t{5}, size_t{16}, size_t{40}}) {
      for (bool with_inverse : {true, false}) {
        if (s.n > 100000 && (nb != 5 || !with_inverse)) continue;  // big ones once: time
        SCOPED_TRACE("n=" + std::to_string(s.n) + " space=" + std::to_string(s.space) +
                     " dim=" + std::to_string(s.dim) + " buckets=" + std::to_string(nb) +
                     " inverse=" + std::to_string(with_inverse) + " " + SeedMsg());
        const auto keys = RandomKeys(s.n, s.space);
        const auto rows = RandomRows(s.n * s.dim);
        const auto begin = RandomBuckets(nb);
        std::vector<Key> sk(s.n), hk(s.n);
        std::vector<float> sr(s.n * s.dim), hr(s.n * s.dim);
        std::vector<uint32_t> sinv(s.n), hinv(s.n);
        std::vector<size_t> soff(nb + 1), hoff(nb + 1);
        Poison(hk);
        Poison(hr);
        Poison(hinv);
        Poison(hoff);
        const size_t m1 = CoalesceAndBucket(keys.data(), rows.data(), s.n, s.dim, begin.data(), nb,
                                            sk.data(), sr.data(), sinv.data(), soff.data());
        const size_t m2 = HashCoalesceAndBucket(keys.data(), rows.data(), s.n, s.dim,
                                                begin.data(), nb, hk.data(), hr.data(),
                                                with_inverse ? hinv.data() : nullptr, hoff.data());
        ASSERT_EQ(m1, m2);
        ASSERT_EQ(soff, hoff);
        // Every key's summed row, bit for bit, and in its bucket.
        std::unordered_map<Key, size_t> sorted_pos;
        for (size_t p = 0; p < m1; ++p) sorted_pos[sk[p]] = p;
        ASSERT_EQ(sorted_pos.size(), m1);
        for (size_t b = 0; b < nb; ++b) {
          for (size_t p = hoff[b]; p < hoff[b + 1]; ++p) {
            auto it = sorted_pos.find(hk[p]);
            ASSERT_NE(it, sorted_pos.end());
            ASSERT_GE(it->second, soff[b]);
            ASSERT_LT(it->second, soff[b + 1]);
            ASSERT_EQ(0, s.dim == 0 ? 0
                                    : std::memcmp(&hr[p * s.dim], &sr[it->second * s.dim],
                                                  s.dim * sizeof(float)));
          }
        }
        // Inside a bucket: the order of first occurrence in the input.
        std::unordered_map<Key, size_t> first;
        for (size_t i = 0; i < s.n; ++i) first.emplace(keys[i], i);
        for (size_t b = 0; b < nb; ++b) {
          for (size_t p = hoff[b] + 1; p < hoff[b + 1]; ++p) {
            ASSERT_LT(first[hk[p - 1]], first[hk[p]]);
          }
        }
        if (with_inverse) {
          for (size_t i = 0; i < s.n; ++i) ASSERT_EQ(hk[hinv[i]], keys[i]);
        }
      }
    }
  }
  // Keys only, nothing, and a request past what a thread keeps of its scratch (twice: the
  // scratch is rebuilt after it is dropped).
  std::vector<Key> k(1);
  std::vector<size_t> off(3, 7);
  EXPECT_EQ(HashCoalesceAndBucket(nullptr, nullptr, 0, 4, RandomBuckets(2).data(), 2, k.data(),
                                  nullptr, nullptr, off.data()),
            0u);
  EXPECT_EQ(off, std::vector<size_t>({0, 0, 0}));
  for (int round = 0; round < 2; ++round) {
    const size_t n = (size_t{1} << 21) + 5;
    std::vector<Key> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = (i * 2654435761u) % (n / 2);
    const auto begin = RandomBuckets(3);
    std::vector<Key> out(n);
    std::vector<uint32_t> inv(n);
    std::vector<size_t> o(4);
    const size_t m = HashCoalesceAndBucket(keys.data(), nullptr, n, 0, begin.data(), 3,
                                           out.data(), nullptr, inv.data(), o.data());
    ASSERT_EQ(m, n / 2);
    ASSERT_EQ(o[3], m);
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(out[inv[i]], keys[i]);
  }
}

// Keys a caller sorted and deduplicated take the path without a hash table: the same
// result as the sorted reference, bit for bit (a key one place out of order, or repeated,
// takes the hash table again, and still agrees).
// Bucketing without coalescing (a pull sent as it is): every key kept, repeats included,
// each in its bucket in input order, its row beside it, and the inverse its place.
TEST_F(PackingTest, BucketWithInverseKeepsEveryKeyInItsBucketInOrder) {
  for (size_t nb : {size_t{1}, size_t{3}, size_t{16}, size_t{40}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5000}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " buckets=" + std::to_string(nb) + " " + SeedMsg());
      const auto keys = RandomKeys(n, 300);  // many repeats
      const uint32_t dim = 3;
      const auto rows = RandomRows(n * dim);
      const auto begin = RandomBuckets(nb);
      std::vector<Key> ok(n);
      std::vector<float> orows(n * dim);
      std::vector<uint32_t> inv(n);
      std::vector<size_t> off(nb + 1, 99);
      BucketWithInverse(keys.data(), rows.data(), n, dim, begin.data(), nb, ok.data(),
                        orows.data(), inv.data(), off.data());
      ASSERT_EQ(off[0], 0u);
      ASSERT_EQ(off[nb], n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LT(inv[i], n);
        ASSERT_EQ(ok[inv[i]], keys[i]);
        ASSERT_EQ(0, std::memcmp(&orows[size_t{inv[i]} * dim], &rows[i * dim], dim * sizeof(float)));
        const size_t b = LinearBucket(keys[i], begin);
        ASSERT_GE(inv[i], off[b]);
        ASSERT_LT(inv[i], off[b + 1]);
        if (i > 0 && LinearBucket(keys[i - 1], begin) == b) {
          ASSERT_LT(inv[i - 1], inv[i]);  // input order inside a bucket
        }
      }
      // Keys only, no inverse: the same keys and offsets.
      std::vector<Key> ok2(n);
      std::vector<size_t> off2(nb + 1, 99);
      BucketWithInverse(keys.data(), nullptr, n, 0, begin.data(), nb, ok2.data(), nullptr, nullptr,
                        off2.data());
      ASSERT_EQ(off2, off);
      ASSERT_EQ(ok2, ok);
    }
  }
}

TEST_F(PackingTest, HashCoalesceAndBucketOfSortedUniqueKeysMatchesTheReference) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{1000}, size_t{100000}}) {
    for (size_t nb : {size_t{1}, size_t{3}, size_t{40}}) {
      for (int variant = 0; variant < 3; ++variant) {  // sorted, one swap, one repeat
        SCOPED_TRACE("n=" + std::to_string(n) + " buckets=" + std::to_string(nb) +
                     " variant=" + std::to_string(variant) + " " + SeedMsg());
        auto keys = RandomKeys(n, uint64_t{1} << 40);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        if (variant == 1 && keys.size() > 1) std::swap(keys[keys.size() / 2], keys[keys.size() / 2 - 1]);
        if (variant == 2 && keys.size() > 1) keys[keys.size() - 1] = keys[0];
        const size_t m = keys.size();
        const uint32_t dim = 3;
        const auto rows = RandomRows(m * dim);
        const auto begin = RandomBuckets(nb);
        std::vector<Key> sk(m), hk(m);
        std::vector<float> sr(m * dim), hr(m * dim);
        std::vector<uint32_t> sinv(m), hinv(m);
        std::vector<size_t> soff(nb + 1), hoff(nb + 1);
        Poison(hk);
        Poison(hr);
        Poison(hinv);
        Poison(hoff);
        const size_t m1 = CoalesceAndBucket(keys.data(), rows.data(), m, dim, begin.data(), nb,
                                            sk.data(), sr.data(), sinv.data(), soff.data());
        const size_t m2 = HashCoalesceAndBucket(keys.data(), rows.data(), m, dim, begin.data(), nb,
                                                hk.data(), hr.data(), hinv.data(), hoff.data());
        ASSERT_EQ(m1, m2);
        ASSERT_EQ(soff, hoff);
        for (size_t i = 0; i < m; ++i) ASSERT_EQ(hk[hinv[i]], keys[i]);
        if (variant == 0) {
          // Ascending input: first-occurrence order is ascending order, so every output
          // equals the reference's exactly.
          ASSERT_TRUE(std::equal(sk.begin(), sk.begin() + m1, hk.begin()));
          ASSERT_EQ(0, std::memcmp(sr.data(), hr.data(), m1 * dim * sizeof(float)));
          ASSERT_TRUE(std::equal(sinv.begin(), sinv.end(), hinv.begin()));
        }
      }
    }
  }
}

TEST_F(PackingTest, CoalesceAndBucketKeysOnly) {
  const auto keys = RandomKeys(3001, 100);
  const auto begin = RandomBuckets(3);
  std::vector<Key> fk(3001);
  std::vector<uint32_t> inv(3001);
  std::vector<size_t> off(4);
  Poison(fk);
  const size_t m = CoalesceAndBucket(keys.data(), nullptr, 3001, 0, begin.data(), 3, fk.data(),
                                     nullptr, inv.data(), off.data());
  EXPECT_EQ(m, off[3]);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(fk[inv[i]], keys[i]) << SeedMsg();
}

// ---- ScatterRows ------------------------------------------------------------------------

TEST_F(PackingTest, ScatterUndoesCoalesceWithRepeatedKeys) {
  for (const Shape& s : CoalesceShapes()) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " dim=" + std::to_string(s.dim) + " " + SeedMsg());
    const auto keys = RandomKeys(s.n, s.space);
    std::vector<Key> uniq(s.n);
    std::vector<uint32_t> inverse(s.n);
    const size_t m = UniqueKeys(keys.data(), s.n, uniq.data(), inverse.data());
    // The "pulled" rows: a function of the key, so the expected value is independent.
    std::vector<float> pulled(m * s.dim);
    auto value = [](Key k, uint32_t j) {
      return static_cast<float>((MixKey(k) >> 40) % 1000 + 1) + 0.25f * static_cast<float>(j);
    };
    for (size_t u = 0; u < m; ++u) {
      for (uint32_t j = 0; j < s.dim; ++j) pulled[u * s.dim + j] = value(uniq[u], j);
    }
    std::vector<float> out(s.n * s.dim);
    Poison(out);
    ScatterRows(inverse.data(), s.n, pulled.data(), s.dim, out.data());
    for (size_t i = 0; i < s.n; ++i) {
      for (uint32_t j = 0; j < s.dim; ++j) {
        ASSERT_EQ(out[i * s.dim + j], value(keys[i], j)) << "i=" << i << " j=" << j;
      }
    }
  }
}

// ---- Conversions ------------------------------------------------------------------------

// Every finite non-negative half as a double, in ascending order (index = bits).
std::vector<double> HalfTable() {
  std::vector<double> t(0x7C00);
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const uint32_t e = h >> 10, m = h & 0x3FF;
    t[h] = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                  : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
  }
  return t;
}

// Round-to-nearest-even of a finite float into a half, by search in the table.
uint16_t ReferenceHalf(float f, const std::vector<double>& table) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  const auto it = std::upper_bound(table.begin(), table.end(), a);
  const size_t hi = static_cast<size_t>(it - table.begin());  // first > a
  const size_t lo = hi - 1;                                   // last <= a
  if (table[lo] == a || hi == table.size()) return static_cast<uint16_t>(sign | lo);
  const double dl = a - table[lo], dh = table[hi] - a;
  size_t pick = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  return static_cast<uint16_t>(sign | pick);
}

// Round-to-nearest-even of a float into a bfloat16, by comparing the two neighbours.
uint16_t ReferenceBf16(float f) {
  const uint32_t x = Bits(f);
  if (std::isinf(f)) return static_cast<uint16_t>(x >> 16);
  const uint32_t lo = x & 0xFFFF0000u;  // truncated toward zero
  const uint32_t hi = lo + 0x10000u;    // the next magnitude up (infinity past the max)
  const double a = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(FromBits(lo)));
  // For rounding, infinity sits where the exponent would continue: 2^128.
  const double vhi = (hi & 0x7FFFFFFFu) == 0x7F800000u
                         ? std::ldexp(1.0, 128)
                         : std::fabs(static_cast<double>(FromBits(hi)));
  const double dl = a - vlo, dh = vhi - a;
  const uint32_t pick = dl < dh ? lo : dh < dl ? hi : (((lo >> 16) & 1) ? hi : lo);
  return static_cast<uint16_t>(pick >> 16);
}

std::vector<float> InterestingFloats(std::mt19937_64& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          65519.996f,
                          -65520.0f,
                          1e-8f,
                          2.9802322e-8f /* 2^-25 */,
                          5.9604645e-8f /* 2^-24 */,
                          6.1035156e-5f /* 2^-14 */,
                          6.1031e-5f,
                          3.4e38f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  // Every half and every half midpoint (and one ulp either side), both signs.
  const auto table = HalfTable();
  for (size_t h = 0; h + 1 < table.size(); h += 7) {
    const float mid = static_cast<float>((table[h] + table[h + 1]) / 2);
    for (float x : {static_cast<float>(table[h]), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  // Random bit patterns (all exponents) and random bf16 midpoints.
  for (int i = 0; i < 200000; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    const float f = FromBits(r);
    if (!std::isnan(f)) v.push_back(f);
    const float mid = FromBits((r & 0xFFFF0000u) | 0x8000u);
    if (!std::isnan(mid)) v.push_back(mid);
  }
  return v;
}

TEST_F(PackingTest, HalfConversionMatchesTableRounding) {
  const auto table = HalfTable();
  for (float f : InterestingFloats(rng_)) {
    ASSERT_EQ(FloatToHalf(f), ReferenceHalf(f, table))
        << "f=" << f << " bits=0x" << std::hex << Bits(f) << std::dec << " " << SeedMsg();
  }
#if defined(__FLT16_MAX__)
  // A second, compiler-provided oracle where _Float16 exists.
  for (float f : InterestingFloats(rng_)) {
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(FloatToHalf(f), hb) << "f=" << f;
  }
#endif
}

TEST_F(PackingTest, HalfWideningIsExactForEveryHalf) {
  const auto table = HalfTable();
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F && m != 0) {
      ASSERT_EQ(Bits(f), 0x7FFFFFFFu) << "canonical NaN for h=" << h;
      ASSERT_EQ(FloatToHalf(f), 0x7FFF);
      continue;
    }
    if (e == 0x1F) {
      ASSERT_TRUE(std::isinf(f));
    } else {
      ASSERT_EQ(static_cast<double>(std::fabs(f)), table[h & 0x7FFF]) << "h=" << h;
    }
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    ASSERT_EQ(FloatToHalf(f), h) << "round trip h=" << h;
  }
}

TEST_F(PackingTest, BFloat16ConversionMatchesNeighbourRounding) {
  for (float f : InterestingFloats(rng_)) {
    ASSERT_EQ(FloatToBFloat16(f), ReferenceBf16(f))
        << "f=" << f << " bits=0x" << std::hex << Bits(f) << std::dec << " " << SeedMsg();
  }
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if ((b & 0x7FFF) > 0x7F80) {
      ASSERT_EQ(Bits(f), 0x7FFFFFFFu);
    } else {
      ASSERT_EQ(Bits(f), b << 16);
      ASSERT_EQ(FloatToBFloat16(f), b);
    }
  }
}

TEST_F(PackingTest, NaNsBecomeCanonical) {
  for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu}) {
    EXPECT_EQ(FloatToHalf(FromBits(bits)), 0x7FFF);
    EXPECT_EQ(FloatToBFloat16(FromBits(bits)), 0x7FFF);
  }
  EXPECT_EQ(Bits(HalfToFloat(0xFE01)), 0x7FFFFFFFu);
  EXPECT_EQ(Bits(BFloat16ToFloat(0xFFC1)), 0x7FFFFFFFu);
}

TEST_F(PackingTest, ArrayConversionsMatchScalar) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1000003}}) {
    const auto in = RandomRows(n);
    for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " type=" + std::to_string(int(t)) + " " + SeedMsg());
      std::vector<uint8_t> wire(n * WireBytes(t));
      Poison(wire);
      ToWire(in.data(), n, t, wire.data());
      std::vector<float> back(n);
      Poison(back);
      FromWire(wire.data(), n, t, back.data());
      for (size_t i = 0; i < n; ++i) {
        if (t == WireType::kFloat32) {
          ASSERT_EQ(Bits(back[i]), Bits(in[i]));
          continue;
        }
        uint16_t w;
        std::memcpy(&w, &wire[2 * i], 2);
        const uint16_t expect =
            t == WireType::kFloat16 ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
        ASSERT_EQ(w, expect) << "i=" << i;
        // Relative error of a round trip: 2^-11 (half), 2^-8 (bf16).
        const float tol = t == WireType::kFloat16 ? 1.0f / 2048 : 1.0f / 256;
        ASSERT_LE(std::fabs(back[i] - in[i]), tol * std::fabs(in[i])) << "i=" << i;
      }
    }
  }
  EXPECT_EQ(WireBytes(WireType::kFloat32), 4u);
  EXPECT_EQ(WireBytes(WireType::kFloat16), 2u);
  EXPECT_EQ(WireBytes(WireType::kBFloat16), 2u);
}

// ---- Fusion -----------------------------------------------------------------------------

TEST_F(PackingTest, FuseAndUnfuseRoundTrip) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{200}}) {
    std::uniform_int_distribution<size_t> len_dist(0, 5000);
    std::vector<size_t> lens(count);
    for (auto& l : lens) l = len_dist(rng_);
    if (count >= 3) {
      lens[1] = 0;  // empty tensors, with a null pointer
      lens[2] = 1;
    }
    std::vector<std::vector<float>> tensors(count);
    std::vector<const float*> srcs(count);
    for (size_t i = 0; i < count; ++i) {
      tensors[i] = RandomRows(lens[i]);
      srcs[i] = lens[i] == 0 ? nullptr : tensors[i].data();
    }
    std::vector<size_t> offsets(count + 1);
    Poison(offsets);
    const size_t total = FuseOffsets(lens.data(), count, offsets.data());
    size_t expect_total = 0;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(offsets[i], expect_total);
      expect_total += lens[i];
    }
    ASSERT_EQ(total, expect_total);
    ASSERT_EQ(offsets[count], total);
    for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
      SCOPED_TRACE("count=" + std::to_string(count) + " type=" + std::to_string(int(t)) + " " +
                   SeedMsg());
      std::vector<uint8_t> fused(total * WireBytes(t) + 16);
      Poison(fused);
      Fuse(srcs.data(), lens.data(), count, t, fused.data());
      // Independent expectation: concatenate, then convert the whole array.
      std::vector<float> concat;
      for (const auto& v : tensors) concat.insert(concat.end(), v.begin(), v.end());
      std::vector<uint8_t> expect(total * WireBytes(t));
      ToWire(concat.data(), total, t, expect.data());
      ASSERT_EQ(0, total == 0 ? 0 : std::memcmp(fused.data(), expect.data(), expect.size()));
      for (size_t b = expect.size(); b < fused.size(); ++b) ASSERT_EQ(fused[b], 0xFF);
      // Back.
      std::vector<std::vector<float>> outs(count);
      std::vector<float*> dsts(count);
      for (size_t i = 0; i < count; ++i) {
        outs[i].assign(lens[i], std::numeric_limits<float>::quiet_NaN());
        dsts[i] = lens[i] == 0 ? nullptr : outs[i].data();
      }
      Unfuse(fused.data(), t, dsts.data(), lens.data(), count);
      for (size_t i = 0; i < count; ++i) {
        std::vector<float> want(lens[i]);
        FromWire(expect.data() + offsets[i] * WireBytes(t), lens[i], t, want.data());
        ASSERT_EQ(
            0, lens[i] == 0 ? 0 : std::memcmp(outs[i].data(), want.data(), lens[i] * sizeof(float)))
            << "tensor " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pack
}  // namespace ps
