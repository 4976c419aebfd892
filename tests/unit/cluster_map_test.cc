// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/cluster_map.h"

#include <gtest/gtest.h>

#include "layerps.pb.h"
#include "placement/ranges.h"
#include "transport/map_codec.h"

namespace ps {
namespace {

TEST(AssignRangesTest, DenseCoversAndBalances) {
  std::map<NodeId, uint64_t> load;
  const std::vector<NodeId> servers = {1, 2, 3};
  TableSpec spec = TableSpec::Dense("w", 1000003);
  auto ranges = placement::AssignRanges(spec, 1000, servers, &load);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges.front().begin, 0u);
  EXPECT_EQ(ranges.back().end, 1001u);  // ceil(1000003 / 1000)
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].begin, ranges[i - 1].end);
  uint64_t total = 0;
  for (auto& kv : load) total += kv.second;
  EXPECT_EQ(total, 1000003u * 4);
  // A second, small table goes to the server that was least loaded before it.
  std::map<NodeId, uint64_t> before = load;
  auto small = placement::AssignRanges(TableSpec::Dense("b", 10), 1000, servers, &load);
  ASSERT_EQ(small.size(), 1u);
  for (NodeId s : servers) EXPECT_LE(before[small[0].server], before[s]);
  EXPECT_EQ(load[small[0].server], before[small[0].server] + 40);
}

TEST(AssignRangesTest, FewerChunksThanServers) {
  std::map<NodeId, uint64_t> load;
  auto ranges = placement::AssignRanges(TableSpec::Dense("w", 1), 65536, {1, 2, 3}, &load);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].end, 1u);
}

TEST(AssignRangesTest, SparseSplitsHashSpace) {
  std::map<NodeId, uint64_t> load;
  auto ranges = placement::AssignRanges(TableSpec::Sparse("e", 8), 0, {4, 5, 6}, &load);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].begin, 0u);
  EXPECT_EQ(ranges[2].end, 0u);  // 2^64
  EXPECT_EQ(ranges[1].begin, ranges[0].end);
}

ClusterMap TwoServerMap() {
  ClusterMap m;
  m.epoch = 3;
  m.nodes = {{0, Role::kScheduler, 0, "tcp://a:1", "a", true},
             {1, Role::kServer, 0, "tcp://a:2", "a", true},
             {2, Role::kServer, 1, "tcp://a:3", "a", true},
             {3, Role::kWorker, 0, "tcp://a:4", "a", true}};
  std::map<NodeId, uint64_t> load;
  TableInfo t;
  t.id = 0;
  t.spec = TableSpec::Dense("w", 100);
  t.chunk_elems = 10;
  t.ranges = placement::AssignRanges(t.spec, 10, {1, 2}, &load);
  m.tables[0] = t;
  TableInfo e;
  e.id = 1;
  e.spec = TableSpec::Sparse("e", 4);
  e.spec.sync = SyncMode::kSsp;
  e.spec.staleness = 3;
  e.spec.capacity = 1000;
  e.spec.eviction = Eviction::kLfu;
  e.spec.expiry_steps = 50;
  e.spec.admit_after = 3;
  e.spec.admit_probability = 0.75f;
  e.ranges = placement::AssignRanges(e.spec, 0, {1, 2}, &load);
  m.tables[1] = e;
  return m;
}

TEST(ClusterMapTest, ProtoRoundTrip) {
  ClusterMap m = TwoServerMap();
  layerps::pb::ClusterMap pb;
  MapToProto(m, &pb);
  auto back = MapFromProto(pb);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->epoch, 3u);
  EXPECT_EQ((*back)->ServerIds(), (std::vector<NodeId>{1, 2}));
  ASSERT_NE((*back)->FindTable(1), nullptr);
  EXPECT_EQ((*back)->FindTable(1)->spec.dim, 4u);
  EXPECT_TRUE((*back)->FindTable(1)->spec.SameAs(m.tables[1].spec));  // sync, staleness too
  const TableSpec& e = (*back)->FindTable(1)->spec;  // the bounded-table fields too
  EXPECT_EQ(e.capacity, 1000u);
  EXPECT_EQ(e.eviction, Eviction::kLfu);
  EXPECT_EQ(e.expiry_steps, 50u);
  EXPECT_EQ(e.admit_after, 3u);
  EXPECT_EQ(e.admit_probability, 0.75f);
  // A spec from a peer that predates them decodes as unbounded (admit_probability 1).
  layerps::pb::TableSpec old;
  old.set_name("old");
  old.set_kind(1);
  old.set_dim(4);
  const TableSpec o = SpecFromProto(old);
  EXPECT_FALSE(o.bounded());
  EXPECT_EQ(o.admit_probability, 1.0f);
  EXPECT_EQ((*back)->FindTableByName("w")->id, 0u);
}

TEST(ClusterMapTest, RejectsMalformedMaps) {
  ClusterMap m = TwoServerMap();
  layerps::pb::ClusterMap pb;
  MapToProto(m, &pb);
  {
    auto bad = pb;
    bad.mutable_tables(0)->mutable_ranges(1)->set_begin(7);  // gap
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
  {
    auto bad = pb;
    bad.mutable_tables(0)->mutable_ranges(0)->set_server(3);  // a worker
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
  {
    auto bad = pb;
    bad.mutable_tables(0)->mutable_spec()->set_size(1000);  // ranges no longer cover it
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
  {
    auto bad = pb;
    bad.mutable_tables(1)->mutable_spec()->set_dim(0);
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
  {
    auto bad = pb;
    bad.add_nodes()->CopyFrom(pb.nodes(1));  // duplicate id
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
  {
    auto bad = pb;  // bounded-table fields out of range: refused, not trusted
    bad.mutable_tables(1)->mutable_spec()->set_eviction(0xFFFFFFFFu);
    EXPECT_FALSE(MapFromProto(bad).ok());
    bad = pb;
    bad.mutable_tables(1)->mutable_spec()->set_admit_probability(0.0f);
    EXPECT_FALSE(MapFromProto(bad).ok());
    bad = pb;
    bad.mutable_tables(0)->mutable_spec()->set_capacity(5);  // on a dense table
    EXPECT_FALSE(MapFromProto(bad).ok());
  }
}

TEST(TableInfoTest, DenseRangeElements) {
  ClusterMap m = TwoServerMap();
  const TableInfo* t = m.FindTable(0);
  EXPECT_EQ(t->num_chunks(), 10u);
  EXPECT_EQ(t->RangeFirstElem(t->ranges[1]), 50u);
  EXPECT_EQ(t->RangeEndElem(t->ranges[1]), 100u);
}

}  // namespace
}  // namespace ps
