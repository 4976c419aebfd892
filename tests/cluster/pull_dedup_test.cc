// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Sparse pull deduplication (PsRequests::PullDedups, docs/sparse.md "Pulls and repeated
// keys"): a table's first pull, and every 16th after, sends each key once and measures
// how many repeated; when at most 2% did, the 15 pulls between send their keys as they
// are. The rows the worker received (WorkerStats::bytes_received: one row per key sent)
// show which way each pull went; the values are exact either way, over one server (rows
// straight into the caller's buffer) and three (grouped by server, then scattered).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;
constexpr uint32_t kDim = 4;

float Value(uint64_t id, uint32_t d) { return static_cast<float>(id * 8 + d); }

// `unique` ids, each id's key assigned its row, and a request of `unique + repeats` keys:
// every id once and `repeats` of them again, shuffled.
struct PullCase {
  std::vector<uint64_t> ids;  // the request, as ids
  std::vector<Key> keys;      // the request, as keys
};

Key KeyOf(uint64_t id) { return id * 1000003 + 17; }

PullCase MakeCase(Worker& w, TableId t, uint64_t unique, uint64_t repeats, uint64_t seed) {
  std::vector<Key> ukeys(unique);
  std::vector<float> urows(unique * kDim);
  for (uint64_t u = 0; u < unique; ++u) {
    ukeys[u] = KeyOf(u);
    for (uint32_t d = 0; d < kDim; ++d) urows[u * kDim + d] = Value(u, d);
  }
  EXPECT_TRUE(w.Wait(w.AssignSparse(t, ukeys.data(), unique, urows.data(), urows.size()), kWait)
                  .ok());
  PullCase c;
  for (uint64_t u = 0; u < unique; ++u) c.ids.push_back(u);
  for (uint64_t r = 0; r < repeats; ++r) c.ids.push_back((r * 7) % unique);
  std::shuffle(c.ids.begin(), c.ids.end(), std::mt19937_64(seed));
  for (uint64_t id : c.ids) c.keys.push_back(KeyOf(id));
  return c;
}

// Pulls the case once, checks every row, and returns how many rows came back.
uint64_t PullRows(Worker& w, TableId t, const PullCase& c) {
  std::vector<float> out(c.keys.size() * kDim, -1.0f);
  const uint64_t before = w.stats().bytes_received;
  Status s = w.Wait(w.PullSparse(t, c.keys.data(), c.keys.size(), out.data(), out.size()), kWait);
  EXPECT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    for (uint32_t d = 0; d < kDim; ++d) {
      if (out[i * kDim + d] != Value(c.ids[i], d)) {
        ADD_FAILURE() << "position " << i << " column " << d << ": " << out[i * kDim + d]
                      << " != " << Value(c.ids[i], d);
        return 0;
      }
    }
  }
  return (w.stats().bytes_received - before) / (kDim * sizeof(float));
}

class PullDedupTest : public ::testing::TestWithParam<int> {};

// 1% repeats: pulls 0, 16 and 32 send each key once, the others every key.
TEST_P(PullDedupTest, RareRepeatsSendFifteenPullsInSixteenAsTheyAre) {
  LocalCluster c(GetParam(), 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Sparse("rare", kDim));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t unique = 4000, repeats = 40;
  const PullCase pc = MakeCase(w, *t, unique, repeats, 5);
  for (int i = 0; i <= 32; ++i) {
    SCOPED_TRACE("pull " + std::to_string(i));
    ASSERT_EQ(PullRows(w, *t, pc), i % 16 == 0 ? unique : unique + repeats);
  }
  c.Finish();
}

// 10% repeats: every pull sends each key once.
TEST_P(PullDedupTest, FrequentRepeatsAreAlwaysDeduplicated) {
  LocalCluster c(GetParam(), 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Sparse("frequent", kDim));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t unique = 4000, repeats = 400;
  const PullCase pc = MakeCase(w, *t, unique, repeats, 6);
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE("pull " + std::to_string(i));
    ASSERT_EQ(PullRows(w, *t, pc), unique);
  }
  c.Finish();
}

// A bounded table counts its rows' reads (eviction): each key is read once per pull.
// And a request below 256 keys is always deduplicated.
TEST_P(PullDedupTest, BoundedTablesAndSmallRequestsAreAlwaysDeduplicated) {
  LocalCluster c(GetParam(), 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  TableSpec bounded = TableSpec::Sparse("bounded", kDim);
  bounded.capacity = 100000;
  bounded.eviction = Eviction::kLru;
  auto b = w.DeclareTable(bounded);
  ASSERT_TRUE(b.ok()) << b.status();
  const PullCase pb = MakeCase(w, *b, 4000, 40, 7);
  auto s = w.DeclareTable(TableSpec::Sparse("small", kDim));
  ASSERT_TRUE(s.ok()) << s.status();
  const PullCase ps = MakeCase(w, *s, 200, 2, 8);
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE("pull " + std::to_string(i));
    ASSERT_EQ(PullRows(w, *b, pb), 4000u);
    ASSERT_EQ(PullRows(w, *s, ps), 200u);
  }
  c.Finish();
}

INSTANTIATE_TEST_SUITE_P(Servers, PullDedupTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "servers";
                         });

}  // namespace
}  // namespace ps
