// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Placement applied by the scheduler: a layer's tables pinned to chosen servers, given at
// start or installed by a worker at run time (a new map epoch every node sees), and the
// placements that must be refused.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

constexpr auto kWait = milliseconds(10000);

Options SmallChunks() {
  Options o = testing::FastOptions();
  o.dense_chunk_elems = 4;  // a 16-element table has 4 chunks: enough for 3 servers
  return o;
}

TableSpec Layered(const std::string& name, const std::string& layer, uint64_t size) {
  TableSpec s = TableSpec::Dense(name, size);
  s.layer = layer;
  return s;
}

TEST(PlacementClusterTest, PlacementGivenAtStartPinsALayersTables) {
  LocalCluster c(3, 1, "tcp", SmallChunks());
  ASSERT_TRUE(c.scheduler().InstallPlacement({{"fc", {2}}}).ok());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto fc = w.DeclareTable(Layered("fc.weight", "fc", 16));
  auto conv = w.DeclareTable(Layered("conv.weight", "conv", 16));
  ASSERT_TRUE(fc.ok() && conv.ok());
  EXPECT_EQ(w.TableServers(*fc), std::vector<uint32_t>({2}));
  EXPECT_EQ(w.TableServers(*conv).size(), 3u);  // not in the placement: every server
  ASSERT_EQ(w.Placement().size(), 1u);
  EXPECT_EQ(w.Placement()[0].layer, "fc");
  // The bytes go where the plan says: only server rank 2 sees the fc table.
  const std::vector<float> g(16, 1.0f);
  ASSERT_TRUE(w.Wait(w.Push(*fc, g.data(), 16), kWait).ok());
  for (int s = 0; s < 3; ++s) {
    const TrafficStats t = c.server(s).traffic();
    const bool has = t.tables.count(*fc) != 0;
    EXPECT_EQ(has, c.server(s).rank() == 2) << "server rank " << c.server(s).rank();
  }
  std::vector<float> out(16);
  ASSERT_TRUE(w.Wait(w.Pull(*fc, out.data(), 16), kWait).ok());
  EXPECT_EQ(out, g);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(PlacementClusterTest, AWorkerInstallsAPlacementThatEveryNodeSees) {
  LocalCluster c(3, 2, "tcp", SmallChunks());
  ASSERT_TRUE(c.Start().ok());
  const uint64_t epoch = c.scheduler().stats().map_epoch;
  ASSERT_TRUE(c.worker(0).InstallPlacement({{"conv", {0, 1}}, {"fc", {2}}}, kWait).ok());
  EXPECT_GT(c.scheduler().stats().map_epoch, epoch);
  // The other worker reads the plan in force from its own map.
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (c.worker(1).Placement().size() != 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  const auto p = c.worker(1).Placement();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].layer, "conv");
  EXPECT_EQ(p[0].servers, std::vector<uint32_t>({0, 1}));
  auto conv = c.worker(1).DeclareTable(Layered("conv.weight", "conv", 16));
  ASSERT_TRUE(conv.ok());
  std::vector<uint32_t> servers = c.worker(1).TableServers(*conv);
  ASSERT_EQ(servers.size(), 2u);
  for (uint32_t r : servers) EXPECT_LT(r, 2u);
  // A declared table never moves: a placement that would move it is refused, and the
  // one in force stays.
  Status moved = c.worker(0).InstallPlacement({{"conv", {2}}}, kWait);
  EXPECT_EQ(moved.code(), StatusCode::kFailedPrecondition) << moved;
  EXPECT_NE(moved.message().find("conv.weight"), std::string::npos) << moved;
  EXPECT_EQ(c.worker(0).Placement().size(), 2u);
  // Bad lists.
  EXPECT_EQ(c.worker(0).InstallPlacement({{"fc", {7}}}, kWait).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.worker(0).InstallPlacement({{"fc", {1, 1}}}, kWait).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.worker(0).InstallPlacement({{"fc", {}}}, kWait).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.scheduler().InstallPlacement({{"fc", {0}}}).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(PlacementClusterTest, SchedulerRefusesAPlacementNamingAMissingServer) {
  LocalCluster c(2, 1, "tcp", SmallChunks());
  Status s = c.scheduler().InstallPlacement({{"fc", {2}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("server rank 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
