// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RowCache against a reference model (a list in LRU order) under random gets, puts,
// drops and ticks: the same hits, the same rows, the same size, every step.
#include "worker/row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <vector>

namespace ps {
namespace {

struct RefEntry {
  Key key;
  uint64_t clock;
  float value;
};

TEST(RowCacheTest, MatchesAReferenceModel) {
  constexpr uint64_t kCap = 64;
  constexpr uint32_t kStale = 3;
  RowCache cache(kCap, 2, kStale);
  std::list<RefEntry> ref;  // front: most recent
  uint64_t clock = 0;
  std::mt19937_64 rng(42);
  auto find = [&](Key k) {
    return std::find_if(ref.begin(), ref.end(), [k](const RefEntry& e) { return e.key == k; });
  };
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    // Keys from a small space with collisions in the index's low bits.
    const Key k = (rng() % 200) << (rng() % 2 ? 0 : 20);
    if (op == 0) {
      cache.Tick();
      ++clock;
    } else if (op <= 4) {
      const float v = static_cast<float>(rng() % 1000);
      const float row[2] = {v, -v};
      cache.Put(&k, 1, row, clock);
      auto it = find(k);
      if (it != ref.end()) ref.erase(it);
      if (ref.size() >= kCap) ref.pop_back();
      ref.push_front(RefEntry{k, clock, v});
    } else if (op == 5) {
      cache.Drop(&k, 1);
      auto it = find(k);
      if (it != ref.end()) ref.erase(it);
    } else {
      float out[2] = {0, 0};
      std::vector<bool> hit;
      const size_t hits = cache.Get(&k, 1, out, &hit);
      auto it = find(k);
      bool want = false;
      if (it != ref.end()) {
        if (clock - it->clock >= kStale) {
          ref.erase(it);
        } else {
          want = true;
          ASSERT_EQ(out[0], it->value) << step;
          ASSERT_EQ(out[1], -it->value) << step;
          ref.splice(ref.begin(), ref, it);
        }
      }
      ASSERT_EQ(hits, want ? 1u : 0u) << "step " << step << " key " << k;
      ASSERT_EQ(hit[0], want);
    }
    ASSERT_EQ(cache.size(), ref.size()) << step;
  }
}

}  // namespace
}  // namespace ps
