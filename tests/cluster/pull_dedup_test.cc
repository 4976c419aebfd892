// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Sparse pull deduplication (PsRequests::PullDedups, docs/sparse.md "Pulls and repeated
// keys"): a table's first pull, and every 16th after, sends each key once and measures
// how many repeated; when at most 2% did, the 15 pulls between send their keys as they
// are. The rows the worker received (WorkerStats::bytes_received: one row per key sent)
// show which way each pull went; the values are exact either way, over one server (rows
// straight into the caller's buffer) and three (grouped by server, then scattered), with
// shares split into many parts, on a narrowed table, and past the 32 MiB of replies a
// pull keeps (then staged).
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

// Values below 256 in magnitude, integers: exact in bfloat16 too.
float Small(uint64_t id, uint32_t d) { return static_cast<float>(static_cast<int>((id * 8 + d) % 251) - 125); }

PullCase MakeCase(Worker& w, TableId t, uint64_t unique, uint64_t repeats, uint64_t seed,
                  uint32_t dim = kDim, float (*value)(uint64_t, uint32_t) = Value) {
  std::vector<Key> ukeys(unique);
  std::vector<float> urows(unique * dim);
  for (uint64_t u = 0; u < unique; ++u) {
    ukeys[u] = KeyOf(u);
    for (uint32_t d = 0; d < dim; ++d) urows[u * dim + d] = value(u, d);
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

// Pulls the case once, checks every row, and returns how many rows came back (rows of
// `dim` values of `wire_bytes` bytes on the wire).
uint64_t PullRows(Worker& w, TableId t, const PullCase& c, uint32_t dim = kDim,
                  float (*value)(uint64_t, uint32_t) = Value, size_t wire_bytes = 4) {
  std::vector<float> out(c.keys.size() * dim, -1.0f);
  const uint64_t before = w.stats().bytes_received;
  Status s = w.Wait(w.PullSparse(t, c.keys.data(), c.keys.size(), out.data(), out.size()), kWait);
  EXPECT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    for (uint32_t d = 0; d < dim; ++d) {
      if (out[i * dim + d] != value(c.ids[i], d)) {
        ADD_FAILURE() << "position " << i << " column " << d << ": " << out[i * dim + d]
                      << " != " << value(c.ids[i], d);
        return 0;
      }
    }
  }
  return (w.stats().bytes_received - before) / (dim * wire_bytes);
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

// part_bytes at its least (4 KiB): every server's share goes as dozens of parts, so the
// rows are found among more than 16 parts (a binary search), keys sent as they are land
// in split parts, and the table is narrowed to bfloat16 on the wire.
TEST_P(PullDedupTest, ManySplitPartsOnANarrowedTable) {
  Options o = testing::FastOptions();
  o.part_bytes = 4096;
  LocalCluster c(GetParam(), 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  TableSpec spec = TableSpec::Sparse("narrow", kDim);
  spec.wire_dtype = WireDType::kBFloat16;
  auto t = w.DeclareTable(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t unique = 6000, repeats = 60;
  const PullCase pc = MakeCase(w, *t, unique, repeats, 9, kDim, Small);
  const uint64_t parts_before = w.stats().requests_sent;
  ASSERT_EQ(PullRows(w, *t, pc, kDim, Small, 2), unique);
  EXPECT_GT(w.stats().requests_sent - parts_before, 16u);
  for (int i = 1; i < 16; ++i) {
    SCOPED_TRACE("pull " + std::to_string(i));
    ASSERT_EQ(PullRows(w, *t, pc, kDim, Small, 2), unique + repeats);
  }
  c.Finish();
}

// Without parts (part_bytes 0) a share is one message however many repeats a request
// has: every pull is deduplicated.
TEST_P(PullDedupTest, WithoutPartsEveryPullIsDeduplicated) {
  Options o = testing::FastOptions();
  o.part_bytes = 0;
  LocalCluster c(GetParam(), 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Sparse("whole", kDim));
  ASSERT_TRUE(t.ok()) << t.status();
  const PullCase pc = MakeCase(w, *t, 4000, 40, 10);
  for (int i = 0; i < 18; ++i) {
    SCOPED_TRACE("pull " + std::to_string(i));
    ASSERT_EQ(PullRows(w, *t, pc), 4000u);
  }
  c.Finish();
}

// More than 32 MiB of unique rows: the replies are copied into a buffer of unique rows as
// they arrive (not kept), and scattered from it; exact all the same.
TEST_P(PullDedupTest, APullOfMoreThan32MiBOfRowsIsStaged) {
  LocalCluster c(GetParam(), 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  constexpr uint32_t kWide = 32;
  auto t = w.DeclareTable(TableSpec::Sparse("wide", kWide));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t unique = 280000, repeats = 28000;  // 34 MiB of unique rows, 10% repeats
  const PullCase pc = MakeCase(w, *t, unique, repeats, 11, kWide);
  ASSERT_EQ(PullRows(w, *t, pc, kWide), unique);
  c.Finish();
}

INSTANTIATE_TEST_SUITE_P(Servers, PullDedupTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "servers";
                         });

}  // namespace
}  // namespace ps
