// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The same-host shared-memory path of the transport (ipc:// peers).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;
constexpr auto kWait = 60s;

// 48 pushes of 16 MiB in flight from each of 2 workers: more than the 128 MiB ring, so
// frames wrap it, wait for blocks to be released, and fall back to the socket; then a
// pull (16 MiB reply in shared memory) checks every element.
TEST(SharedMemoryTest, ManyLargeFramesWrapTheRingAndFallBack) {
  LocalCluster c(1, 2, "ipc");
  ASSERT_TRUE(c.Start().ok());
  const uint64_t n = 4u << 20;
  const int kPushes = 48;
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto id = w.DeclareTable(TableSpec::Dense("shm-big", n));
    ASSERT_TRUE(id.ok());
    std::vector<float> g(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 11 + 1);
    std::vector<Ticket> t;
    for (int k = 0; k < kPushes; ++k) t.push_back(w.Push(*id, g.data(), n));
    for (Ticket tk : t) ASSERT_TRUE(w.Wait(tk, kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<float> out(n);
    ASSERT_TRUE(w.Wait(w.Pull(*id, out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) {
      if (out[i] != 2.0f * kPushes * g[i]) FAIL() << "element " << i << " = " << out[i];
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}

// Frames on both sides of the size window (64 KiB .. 32 MiB) and odd sizes, over 2 servers;
// sparse rows (a 6.4 MB frame) too.
TEST(SharedMemoryTest, SizesAroundTheWindowAndSparse) {
  LocalCluster c(2, 1, "ipc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  for (uint64_t n : {uint64_t{16383}, uint64_t{16384}, uint64_t{100003}, uint64_t{17u << 20}}) {
    auto id = w.DeclareTable(TableSpec::Dense("shm-" + std::to_string(n), n));
    ASSERT_TRUE(id.ok());
    std::vector<float> g(n), out(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7) - 2.0f;
    ASSERT_TRUE(w.Wait(w.Push(*id, g.data(), n), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * g[i]) << n << " " << i;
  }
  auto sid = w.DeclareTable(TableSpec::Sparse("shm-sparse", 16));
  ASSERT_TRUE(sid.ok());
  std::vector<Key> keys(100000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<float> rows(keys.size() * 16, 1.5f), out(rows.size());
  ASSERT_TRUE(
      w.Wait(w.PushSparse(*sid, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(
      w.Wait(w.PullSparse(*sid, keys.data(), keys.size(), out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, rows);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// With Options::shared_memory off, ipc:// peers use the socket alone; results agree.
TEST(SharedMemoryTest, SwitchedOffUsesTheSocket) {
  Options o = testing::FastOptions();
  o.shared_memory = false;
  LocalCluster c(2, 1, "ipc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = (4u << 20) + 3;
  auto id = w.DeclareTable(TableSpec::Dense("noshm", n));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(n), out(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7);
  ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), std::chrono::seconds(60)).ok());
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], g[i]) << i;
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps
