// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The worker-side row cache (TableSpec::cache_rows, cache_staleness; docs/sparse.md
// "Worker cache"): exact staleness, LRU capacity, partial hits with duplicate ids over
// several servers, bytes saved, assigns dropping rows, and declare-time errors.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;
constexpr uint32_t kDim = 4;

TableSpec Cached(uint64_t rows, uint32_t staleness) {
  TableSpec s = TableSpec::Sparse("c", kDim);  // sum: pulled values count the pushes
  s.cache_rows = rows;
  s.cache_staleness = staleness;
  return s;
}

std::vector<float> Pull(Worker& w, TableId t, const std::vector<Key>& keys) {
  std::vector<float> out(keys.size() * kDim, -1.0f);
  Status s = w.Wait(w.PullSparse(t, keys.data(), keys.size(), out.data(), out.size()), kWait);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}
void Push(Worker& w, TableId t, const std::vector<Key>& keys, float v) {
  std::vector<float> rows(keys.size() * kDim, v);
  ASSERT_TRUE(w.Wait(w.PushSparse(t, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
}
std::vector<float> Rows(std::initializer_list<float> per_key) {
  std::vector<float> v;
  for (float x : per_key) v.insert(v.end(), kDim, x);
  return v;
}

// A row is answered from the cache until this worker pushed `staleness` times to the
// table since it was fetched; another worker's pushes meanwhile are not seen.
TEST(WorkerCacheTest, StaleWithinTheBoundFreshAfter) {
  LocalCluster c(2, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  auto t = w0.DeclareTable(Cached(100, 2));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(w1.DeclareTable(Cached(100, 2)).ok());
  EXPECT_EQ(Pull(w0, *t, {1, 2}), Rows({0, 0}));
  EXPECT_EQ(w0.stats().cache_misses, 2u);
  Push(w1, *t, {1, 2}, 1.0f);
  EXPECT_EQ(Pull(w0, *t, {1, 2}), Rows({0, 0}));  // cached: w1's push not seen
  EXPECT_EQ(w0.stats().cache_hits, 2u);
  Push(w0, *t, {3}, 5.0f);                        // w0's clock 1: still fresh
  EXPECT_EQ(Pull(w0, *t, {2, 1}), Rows({0, 0}));
  EXPECT_EQ(w0.stats().cache_hits, 4u);
  Push(w0, *t, {3}, 5.0f);                        // clock 2: fetched 2 pushes ago, stale
  EXPECT_EQ(Pull(w0, *t, {1, 2, 3}), Rows({1, 1, 10}));
  EXPECT_EQ(w0.stats().cache_hits, 4u);
  EXPECT_EQ(w0.stats().cache_misses, 5u);
  // The worker without pulls of its own sees the servers' values.
  EXPECT_EQ(Pull(w1, *t, {1, 3}), Rows({1, 10}));
  EXPECT_TRUE(c.Finish().ok());
}

// At most cache_rows rows, the least recently used dropped; a pull with duplicates and
// a mix of cached and uncached ids over two servers gets every row in place, and only the
// uncached ids travel.
TEST(WorkerCacheTest, LruCapacityPartialHitsAndBytes) {
  LocalCluster c(2, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(Cached(3, 100));
  ASSERT_TRUE(t.ok()) << t.status();
  // Distinct values per id, set through an assign (which also drops cached rows).
  std::vector<Key> ids;
  std::vector<float> vals;
  for (Key k = 1; k <= 20; ++k) {
    ids.push_back(k * 1000003);
    for (uint32_t j = 0; j < kDim; ++j) vals.push_back(static_cast<float>(k * 10 + j));
  }
  ASSERT_TRUE(w.Wait(w.AssignSparse(*t, ids.data(), ids.size(), vals.data(), vals.size()), kWait).ok());
  const auto row = [&](size_t i) {
    return std::vector<float>(vals.begin() + i * kDim, vals.begin() + (i + 1) * kDim);
  };
  Pull(w, *t, {ids[0]});
  Pull(w, *t, {ids[1]});
  Pull(w, *t, {ids[2]});
  Pull(w, *t, {ids[0]});  // a hit: ids[0] is now the newest, ids[1] the oldest
  Pull(w, *t, {ids[3]});  // evicts ids[1]
  WorkerStats before = w.stats();
  EXPECT_EQ(before.cache_hits, 1u);
  // ids[0], ids[2], ids[3] cached; ids[1], ids[4] not. Duplicates, any order.
  const std::vector<Key> ask = {ids[4], ids[0], ids[1], ids[0], ids[3], ids[4], ids[2]};
  const std::vector<float> got = Pull(w, *t, ask);
  std::vector<float> want;
  for (size_t i : {4, 0, 1, 0, 3, 4, 2}) {
    const std::vector<float> r = row(i);
    want.insert(want.end(), r.begin(), r.end());
  }
  EXPECT_EQ(got, want);
  const WorkerStats after = w.stats();
  EXPECT_EQ(after.cache_hits - before.cache_hits, 3u);      // ids 0, 2, 3 (unique)
  EXPECT_EQ(after.cache_misses - before.cache_misses, 2u);  // ids 1, 4
  EXPECT_EQ(after.bytes_received - before.bytes_received, 2u * kDim * sizeof(float));
  // A pull the cache answers whole sends nothing.
  before = w.stats();
  EXPECT_EQ(Pull(w, *t, {ids[4], ids[1]}), [&] {
    std::vector<float> v = row(4);
    const std::vector<float> r = row(1);
    v.insert(v.end(), r.begin(), r.end());
    return v;
  }());
  EXPECT_EQ(w.stats().requests_sent, before.requests_sent);
  // An assign from this worker drops the rows it assigns: the next pull fetches them.
  std::vector<float> nine(kDim, 9.0f);
  ASSERT_TRUE(w.Wait(w.AssignSparse(*t, &ids[4], 1, nine.data(), nine.size()), kWait).ok());
  EXPECT_EQ(Pull(w, *t, {ids[4]}), nine);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(WorkerCacheTest, DeclareTimeErrors) {
  LocalCluster c(1, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  TableSpec dense = TableSpec::Dense("d", 10);
  dense.cache_rows = 10;
  dense.cache_staleness = 1;
  StatusOr<TableId> d = w.DeclareTable(dense);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("cache_rows is for sparse tables only"), std::string::npos)
      << d.status();
  TableSpec bsp = Cached(10, 1);
  bsp.sync = SyncMode::kBsp;
  StatusOr<TableId> b = w.DeclareTable(bsp);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("forbids a worker cache"), std::string::npos) << b.status();
  StatusOr<TableId> half = w.DeclareTable(Cached(10, 0));
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("both cache_rows and cache_staleness"), std::string::npos)
      << half.status();
  // Two workers must agree on the cache as on any field.
  ASSERT_TRUE(w.DeclareTable(Cached(10, 1)).ok());
  StatusOr<TableId> other = w.DeclareTable(Cached(10, 2));
  EXPECT_EQ(other.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(other.status().message().find("cache_staleness"), std::string::npos) << other.status();
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps
