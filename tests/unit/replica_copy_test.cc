// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The copy of a store to a new backup (server/replica_copy.h): what arrives is bit for bit
// what was sent (values and the rules' state, dense and sparse, across message
// boundaries), and a copy message that does not fit the copy is an error, never a crash.
#include "server/replica_copy.h"

#include <gtest/gtest.h>

#include "common/hash.h"

#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

namespace ps {
namespace {

// Servers 1 and 2 share a dense Adam table of 3M elements (chunks of 1000) and a sparse
// Adagrad table split at 2^63.
ClusterMap TwoServers() {
  ClusterMap map;
  map.epoch = 7;
  for (NodeId id : {NodeId{1}, NodeId{2}}) {
    NodeInfo n;
    n.id = id;
    n.role = Role::kServer;
    n.rank = id - 1;
    n.endpoint = "inproc://s" + std::to_string(id);
    map.nodes.push_back(n);
  }
  TableInfo dense;
  dense.id = 0;
  dense.spec = TableSpec::Dense("w", 3000000, UpdateRule::kAdam);
  dense.chunk_elems = 1000;
  dense.ranges = {KeyRange{0, 1000, 1}, KeyRange{1000, 2000, 2}, KeyRange{2000, 3000, 1}};
  map.tables[0] = dense;
  TableInfo sparse;
  sparse.id = 1;
  sparse.spec = TableSpec::Sparse("emb", 5, UpdateRule::kAdagrad);
  sparse.ranges = {KeyRange{0, Key{1} << 63, 1}, KeyRange{Key{1} << 63, 0, 2}};
  map.tables[1] = sparse;
  return map;
}

class ReplicaCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    map_ = TwoServers();
    for (const auto& kv : map_.tables) ASSERT_TRUE(primary_.Install(kv.second).ok());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    // Two steps of each rule, so the state is not its initial value.
    for (int step = 0; step < 2; ++step) {
      for (const Store::DenseView& v : primary_.DenseRanges(0)) {
        std::vector<float> g(v.size);
        for (auto& x : g) x = u(rng);
        ASSERT_TRUE(primary_.ApplyDense(0, v.first, v.size, g.data(), ApplyOp::kRule).ok());
      }
      keys_.clear();
      for (int i = 0; i < 30000; ++i) {
        const Key k = rng();
        if (MixKey(k) < (Key{1} << 63)) keys_.push_back(k);  // server 1's half (of the mixed keys)
      }
      std::vector<float> rows(keys_.size() * 5);
      for (auto& x : rows) x = u(rng);
      Status applied = primary_.ApplySparse(1, keys_.data(), keys_.size(), 5, rows.data(), ApplyOp::kRule);
      ASSERT_TRUE(applied.ok()) << applied;
    }
  }

  std::vector<Message> Copy(const std::vector<UpdateRecord>& held = {}) {
    std::vector<Message> out;
    StatusOr<uint64_t> bytes = SendStoreCopy(primary_, map_, 42, held, [&](Message&& m) {
      m.header.sender = 1;
      out.push_back(std::move(m));
      return Status::OK();
    });
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return out;
  }

  ClusterMap map_;
  Store primary_{1};
  std::vector<Key> keys_;
};

TEST_F(ReplicaCopyTest, TheCopyHoldsWhatThePrimaryHolds) {
  const std::vector<UpdateRecord> held = {{9, 2, 77}, {10, 0, 78}};
  std::vector<Message> msgs = Copy(held);
  // Begin, more than one dense message (2M elements x 3 floats > 4 MiB), sparse, end.
  ASSERT_GT(msgs.size(), 4u);
  EXPECT_EQ(msgs.front().header.part, static_cast<uint32_t>(CopyPhase::kBegin));
  EXPECT_EQ(msgs.back().header.part, static_cast<uint32_t>(CopyPhase::kEnd));
  StatusOr<ReplicaStart> start = BeginReplica(1, msgs.front());
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->map->epoch, 7u);
  for (size_t i = 1; i + 1 < msgs.size(); ++i) {
    ASSERT_TRUE(ApplyCopyChunk(start->store.get(), msgs[i]).ok()) << i;
  }
  StatusOr<std::vector<UpdateRecord>> got_held = CopyHeldUpdates(msgs.back());
  ASSERT_TRUE(got_held.ok());
  ASSERT_EQ(got_held->size(), 2u);
  EXPECT_EQ((*got_held)[1].request_id, 78u);
  EXPECT_EQ((*got_held)[1].worker, 10u);

  Store& copy = *start->store;
  std::vector<Store::DenseView> a = primary_.DenseRanges(0), b = copy.DenseRanges(0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].first, b[r].first);
    ASSERT_EQ(a[r].size, b[r].size);
    ASSERT_EQ(std::memcmp(a[r].values, b[r].values, a[r].size * sizeof(float)), 0);
    ASSERT_EQ(std::memcmp(a[r].state, b[r].state, a[r].size * 2 * sizeof(float)), 0);
  }
  EXPECT_EQ(copy.sparse_rows(), primary_.sparse_rows());
  std::unordered_map<Key, std::vector<float>> copied;
  ASSERT_TRUE(copy.VisitRows(1, [&](Key id, const float* row) -> Status {
    copied[id].assign(row, row + 10);  // 5 values, then Adagrad's 5 sums
    return Status::OK();
  }).ok());
  size_t rows = 0;
  ASSERT_TRUE(primary_.VisitRows(1, [&](Key id, const float* row) -> Status {
    ++rows;
    auto it = copied.find(id);
    if (it == copied.end()) return NotFound("row " + std::to_string(id) + " not copied");
    EXPECT_EQ(std::memcmp(row, it->second.data(), 10 * sizeof(float)), 0) << id;
    return Status::OK();
  }).ok());
  EXPECT_GT(rows, 10000u);
}

TEST_F(ReplicaCopyTest, AMessageThatDoesNotFitIsAnError) {
  std::vector<Message> msgs = Copy();
  StatusOr<ReplicaStart> start = BeginReplica(1, msgs.front());
  ASSERT_TRUE(start.ok());
  Store* copy = start->store.get();
  const Message dense = msgs[1];
  ASSERT_EQ(dense.header.part, static_cast<uint32_t>(CopyPhase::kDense));

  Message m = dense;
  m.header.offset = 1000000;  // server 2's range: not in the copy
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = dense;
  m.header.offset = ~uint64_t{0} - 3;  // wraps
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = dense;
  m.header.count += 1;  // frames too short for it
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = dense;
  m.frames.pop_back();
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = dense;
  m.header.table = 9;
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = dense;
  m.header.table = 1;  // a dense message for the sparse table
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);

  const Message& sparse = msgs[msgs.size() - 2];
  ASSERT_EQ(sparse.header.part, static_cast<uint32_t>(CopyPhase::kSparse));
  m = sparse;
  m.header.dim = 4;
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = sparse;
  m.header.count = (uint64_t{1} << 62);
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);
  m = sparse;
  std::vector<char> keys(m.frames[0].data(), m.frames[0].data() + m.frames[0].size());
  Key far = 1;
  while (MixKey(far) < (Key{1} << 63)) ++far;  // routes to server 2's half
  std::memcpy(keys.data(), &far, sizeof(far));
  m.frames[0] = Frame::Adopt(std::move(keys));
  EXPECT_EQ(ApplyCopyChunk(copy, m).code(), StatusCode::kProtocolError);

  Message begin = msgs.front();
  begin.frames[0] = Frame::Copy("junk", 4);
  EXPECT_FALSE(BeginReplica(1, begin).ok());
  begin.frames.clear();
  EXPECT_FALSE(BeginReplica(1, begin).ok());
  Message end = msgs.back();
  end.header.count = 3;
  EXPECT_FALSE(CopyHeldUpdates(end).ok());
}

// A rule whose state is per row (rowwise_adagrad: one float after the row's dim values):
// the copy's rows are that wide, and carry the accumulator.
TEST(ReplicaCopyRowStateTest, APerRowStateTravelsWithItsRow) {
  ClusterMap map = TwoServers();
  map.tables.erase(0);
  TableInfo& t = map.tables[1];
  t.spec.rule = UpdateRule::kRowwiseAdagrad;
  t.spec.learning_rate = 0.25f;
  Store primary(1);
  ASSERT_TRUE(primary.Install(t).ok());
  ASSERT_EQ(primary.RowWidth(1), 6u);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Key> keys;
  for (int i = 0; keys.size() < 300; ++i) {
    const Key k = rng();
    if (MixKey(k) < (Key{1} << 63)) keys.push_back(k);
  }
  for (int step = 0; step < 2; ++step) {
    std::vector<float> rows(keys.size() * 5);
    for (auto& x : rows) x = u(rng);
    ASSERT_TRUE(primary.ApplySparse(1, keys.data(), keys.size(), 5, rows.data(), ApplyOp::kRule).ok());
  }
  std::vector<Message> msgs;
  ASSERT_TRUE(SendStoreCopy(primary, map, 1, {}, [&](Message&& m) {
                msgs.push_back(std::move(m));
                return Status::OK();
              }).ok());
  StatusOr<ReplicaStart> start = BeginReplica(1, msgs.front());
  ASSERT_TRUE(start.ok()) << start.status();
  for (size_t i = 1; i + 1 < msgs.size(); ++i) {
    ASSERT_EQ(msgs[i].frames[1].size(), msgs[i].header.count * 6 * sizeof(float));
    ASSERT_TRUE(ApplyCopyChunk(start->store.get(), msgs[i]).ok()) << i;
  }
  std::unordered_map<Key, std::vector<float>> copied;
  ASSERT_TRUE(start->store->VisitRows(1, [&](Key id, const float* row) -> Status {
    copied[id].assign(row, row + 6);
    return Status::OK();
  }).ok());
  ASSERT_EQ(copied.size(), keys.size());
  ASSERT_TRUE(primary.VisitRows(1, [&](Key id, const float* row) -> Status {
    auto it = copied.find(id);
    if (it == copied.end()) return NotFound("row " + std::to_string(id) + " not copied");
    EXPECT_EQ(std::memcmp(row, it->second.data(), 6 * sizeof(float)), 0) << id;
    EXPECT_GT(row[5], 0.0f) << id;  // the accumulator
    return Status::OK();
  }).ok());
}

TEST(RangeSetTest, ChangedOnlyWhereATableOfBothDiffers) {
  ClusterMap map = TwoServers();
  RangeSet one = RangesOf(map, 1);
  ASSERT_EQ(one[0].size(), 2u);
  ClusterMap taken = map;
  for (KeyRange& r : taken.tables[0].ranges) r.server = 1;
  EXPECT_TRUE(RangesChanged(one, RangesOf(taken, 1)));
  ClusterMap more = map;
  TableInfo extra = map.tables[1];
  extra.id = 5;
  more.tables[5] = extra;
  EXPECT_FALSE(RangesChanged(one, RangesOf(more, 1)));  // a new table is not a change
}

}  // namespace
}  // namespace ps
