// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The hybrid's row exchanges (ps/sparse_exchange.h) for W = 2, 3, 4 against references
// computed here: coalescing, all-gathered rows, rows to their owners, rows to a root
// (in two process sets at once), lookups through a root (one pull of the union), a
// failing pull failing every member, and bad input refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "local_cluster.h"
#include "ps/sparse_exchange.h"

namespace ps {
namespace {

using testing::LocalCluster;

constexpr size_t kDim = 3;

// Rank r's rows: some ids repeated, negative ones, and rank 1 with none (W > 2).
void RowsOf(int r, int W, std::vector<int64_t>* ids, std::vector<float>* values) {
  ids->clear();
  values->clear();
  const int n = (W > 2 && r == 1) ? 0 : 5 + 3 * r;
  for (int i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>((i * 7 + r * 3) % 13) - (i % 4 == 3 ? 20 : 0);
    ids->push_back(id);
    for (size_t j = 0; j < kDim; ++j) values->push_back(static_cast<float>(r + 1 + i + j));
  }
}

// The coalesced sum of the given ranks' rows, by id.
std::map<int64_t, std::vector<float>> Reference(const std::vector<int>& ranks, int W) {
  std::map<int64_t, std::vector<float>> sum;
  for (int r : ranks) {
    std::vector<int64_t> ids;
    std::vector<float> values;
    RowsOf(r, W, &ids, &values);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto& row = sum[ids[i]];
      row.resize(kDim, 0.0f);
      for (size_t j = 0; j < kDim; ++j) row[j] += values[i * kDim + j];
    }
  }
  return sum;
}

void ExpectRows(const SparseRows& got, const std::map<int64_t, std::vector<float>>& want) {
  ASSERT_EQ(got.dim, kDim);
  ASSERT_EQ(got.ids.size(), want.size());
  ASSERT_EQ(got.values.size(), want.size() * kDim);
  size_t i = 0;
  for (const auto& kv : want) {
    EXPECT_EQ(got.ids[i], kv.first) << i;
    for (size_t j = 0; j < kDim; ++j) EXPECT_EQ(got.values[i * kDim + j], kv.second[j]) << kv.first;
    ++i;
  }
}

std::vector<int> AllRanks(int W) {
  std::vector<int> r;
  for (int i = 0; i < W; ++i) r.push_back(i);
  return r;
}

uint64_t Abs(int64_t id) { return id < 0 ? 0 - static_cast<uint64_t>(id) : static_cast<uint64_t>(id); }

TEST(SparseExchangeTest, CoalesceSortsAndSumsEqualIds) {
  const std::vector<int64_t> ids = {5, 2, 5, -1, 2};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  SparseRows r = CoalesceRows(ids.data(), values.data(), ids.size(), 2);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{-1, 2, 5}));
  EXPECT_EQ(r.values, (std::vector<float>{7, 8, 3 + 9, 4 + 10, 1 + 5, 2 + 6}));
  EXPECT_EQ(CoalesceRows(nullptr, nullptr, 0, 4).size(), 0u);
}

TEST(SparseExchangeTest, AllGatherOwnersAndRootAgreeWithTheReference) {
  for (int W : {2, 3, 4}) {
    SCOPED_TRACE(W);
    LocalCluster c(1, W, "inproc");
    ASSERT_TRUE(c.Start().ok());
    c.OnEveryWorker([&](int r) {
      Worker& w = c.worker(r);
      std::vector<int64_t> ids;
      std::vector<float> values;
      RowsOf(r, W, &ids, &values);
      SparseRows all;
      ASSERT_TRUE(AllGatherRows(w.communicator(), ids.data(), values.data(), ids.size(), kDim, {}, &all).ok());
      ExpectRows(all, Reference(AllRanks(W), W));
      SparseRows owned;
      ASSERT_TRUE(RowsToOwners(w.communicator(), ids.data(), values.data(), ids.size(), kDim, {}, &owned).ok());
      auto want = Reference(AllRanks(W), W);
      for (auto it = want.begin(); it != want.end();) {
        it = Abs(it->first) % W == static_cast<uint64_t>(r) ? std::next(it) : want.erase(it);
      }
      ExpectRows(owned, want);
      const uint32_t root = static_cast<uint32_t>(W - 1);
      SparseRows at_root;
      ASSERT_TRUE(
          RowsToRoot(w.communicator(), ids.data(), values.data(), ids.size(), kDim, root, {}, &at_root).ok());
      if (static_cast<uint32_t>(r) == root) {
        ExpectRows(at_root, Reference(AllRanks(W), W));
      } else {
        EXPECT_EQ(at_root.size(), 0u);
      }
    });
    EXPECT_TRUE(c.Finish().ok());
  }
}

// Two hosts of two workers each aggregate at once, each to its own leader.
TEST(SparseExchangeTest, RowsToRootInTwoProcessSetsAtOnce) {
  LocalCluster c(1, 4, "inproc");
  ASSERT_TRUE(c.Start().ok());
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    std::vector<int64_t> ids;
    std::vector<float> values;
    RowsOf(r, 4, &ids, &values);
    CollectiveOptions o;
    o.ranks = r % 2 == 0 ? std::vector<uint32_t>{0, 2} : std::vector<uint32_t>{1, 3};
    const uint32_t leader = o.ranks[0];
    SparseRows got;
    ASSERT_TRUE(RowsToRoot(w.communicator(), ids.data(), values.data(), ids.size(), kDim, leader, o, &got).ok());
    if (static_cast<uint32_t>(r) == leader) {
      ExpectRows(got, Reference({static_cast<int>(o.ranks[0]), static_cast<int>(o.ranks[1])}, 4));
    } else {
      EXPECT_EQ(got.size(), 0u);
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}

TEST(SparseExchangeTest, LookupsThroughARootPullTheUnionOnce) {
  for (int W : {2, 3, 4}) {
    SCOPED_TRACE(W);
    LocalCluster c(1, W, "inproc");
    ASSERT_TRUE(c.Start().ok());
    std::atomic<int> calls{0};
    std::vector<int64_t> pulled;
    c.OnEveryWorker([&](int r) {
      Worker& w = c.worker(r);
      std::vector<int64_t> ids;
      std::vector<float> unused;
      RowsOf(r, W, &ids, &unused);
      RowSource source = [&](const std::vector<int64_t>& want, float* rows) {
        ++calls;
        pulled = want;
        for (size_t i = 0; i < want.size(); ++i) {
          for (size_t j = 0; j < kDim; ++j) rows[i * kDim + j] = static_cast<float>(want[i] * 10 + j);
        }
        return Status::OK();
      };
      std::vector<float> out(ids.size() * kDim, -1.0f);
      ASSERT_TRUE(PullRowsThroughRoot(w.communicator(), ids.data(), ids.size(), kDim, 0, r == 0 ? source : RowSource(),
                                      out.data(), {})
                      .ok());
      for (size_t i = 0; i < ids.size(); ++i) {
        for (size_t j = 0; j < kDim; ++j) ASSERT_EQ(out[i * kDim + j], ids[i] * 10 + j) << i;
      }
    });
    EXPECT_EQ(calls.load(), 1);
    std::vector<int64_t> union_ids;
    for (const auto& kv : Reference(AllRanks(W), W)) union_ids.push_back(kv.first);
    EXPECT_EQ(pulled, union_ids);
    EXPECT_TRUE(c.Finish().ok());
  }
}

TEST(SparseExchangeTest, AFailedPullFailsEveryMember) {
  LocalCluster c(1, 3, "inproc");
  ASSERT_TRUE(c.Start().ok());
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    const std::vector<int64_t> ids = {1, 2, static_cast<int64_t>(r)};
    std::vector<float> out(ids.size() * kDim);
    RowSource broken = [](const std::vector<int64_t>&, float*) { return Unavailable("servers gone"); };
    Status s = PullRowsThroughRoot(w.communicator(), ids.data(), ids.size(), kDim, 1, broken, out.data(), {});
    if (r == 1) {
      EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
      EXPECT_NE(s.message().find("root 1"), std::string::npos) << s;
    }
    // The members still agree on what comes next.
    SparseRows all;
    EXPECT_TRUE(AllGatherRows(w.communicator(), ids.data(), out.data(), ids.size(), kDim, {}, &all).ok());
  });
  EXPECT_TRUE(c.Finish().ok());
}

TEST(SparseExchangeTest, BadInputIsRefusedBeforeAnythingIsSent) {
  LocalCluster c(1, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  SparseRows out;
  const float values[3] = {1, 2, 3};
  const int64_t id = 1;
  EXPECT_EQ(AllGatherRows(w.communicator(), nullptr, values, 1, 3, {}, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RowsToOwners(w.communicator(), &id, nullptr, 1, 3, {}, &out).code(), StatusCode::kInvalidArgument);
  Status s = RowsToRoot(w.communicator(), &id, values, 1, 3, 7, {}, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("root 7"), std::string::npos) << s;
  std::vector<float> rows(3);
  EXPECT_EQ(PullRowsThroughRoot(w.communicator(), &id, 1, 3, 0, RowSource(), rows.data(), {}).code(),
            StatusCode::kInvalidArgument)
      << "the root needs a row source";
  // Nothing was sent: both workers still run the same collectives in order.
  c.OnEveryWorker([&](int r) {
    SparseRows all;
    const int64_t mine = r;
    EXPECT_TRUE(AllGatherRows(c.worker(r).communicator(), &mine, values, 1, 3, {}, &all).ok());
    EXPECT_EQ(all.ids, (std::vector<int64_t>{0, 1}));
  });
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps
