// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ServerOptions::apply_threads (server/apply_lanes.h): the dense requests of async tables
// are applied by several threads, per 64 KiB span, and still in arrival order wherever
// they share elements. A mix of assigns, pushes and pulls that do not commute, all in
// flight at once, must give exactly what applying them one after the other gives, with
// the lanes and without; the counters show which path ran.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;
// Not a multiple of the span (16384 elements), and parts of 200 KiB (51200 elements)
// that straddle span boundaries: a part becomes several span tasks on several lanes.
constexpr uint64_t kElems = 150001;
constexpr int64_t kPartBytes = 200 << 10;

struct Totals {
  uint64_t lane_requests = 0, lane_tasks = 0;
};

// Issues `ops` random operations on one table without waiting (an assign of the op's
// number, a push of ones onto the sum rule, or a pull), then checks every pull against
// the value the sequence gives at that point, and the final value.
Totals RunMix(int servers, Options o, int ops, uint32_t seed, int64_t part_bytes = kPartBytes) {
  o.part_bytes = part_bytes;
  LocalCluster c(servers, 1, "tcp", o);
  EXPECT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("lanes", kElems));
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  const std::vector<float> ones(kElems, 1.0f);
  std::vector<std::vector<float>> assigned;  // kept alive until answered
  std::vector<std::vector<float>> pulled;
  std::vector<float> expected_at_pull;
  std::vector<Ticket> tickets;
  std::mt19937 rng(seed);
  float model = 0.0f;  // every element holds the same value: ops cover the whole table
  assigned.reserve(ops);
  pulled.reserve(ops);
  for (int k = 0; k < ops; ++k) {
    switch (rng() % 3) {
      case 0:
        assigned.emplace_back(kElems, static_cast<float>(k));
        model = static_cast<float>(k);
        tickets.push_back(w.Assign(*t, assigned.back().data(), kElems));
        break;
      case 1:
        model += 1.0f;
        tickets.push_back(w.Push(*t, ones.data(), kElems));
        break;
      default:
        pulled.emplace_back(kElems, -1.0f);
        expected_at_pull.push_back(model);
        tickets.push_back(w.Pull(*t, pulled.back().data(), kElems));
    }
  }
  for (Ticket tk : tickets) EXPECT_TRUE(w.Wait(tk, kWait).ok());
  for (size_t p = 0; p < pulled.size(); ++p) {
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < kElems; ++i) {
      if (pulled[p][i] != expected_at_pull[p] && wrong++ == 0) first = i;
    }
    EXPECT_EQ(wrong, 0u) << "pull " << p << ": " << wrong << " elements differ from "
                         << expected_at_pull[p] << ", the first at " << first << " ("
                         << pulled[p][first] << ")";
  }
  std::vector<float> final_values(kElems, -1.0f);
  EXPECT_TRUE(w.Wait(w.Pull(*t, final_values.data(), kElems), kWait).ok());
  EXPECT_EQ(final_values, std::vector<float>(kElems, model));
  Totals totals;
  for (int s = 0; s < servers; ++s) {
    totals.lane_requests += c.server(s).stats().lane_requests;
    totals.lane_tasks += c.server(s).stats().lane_tasks;
  }
  return totals;
}

TEST(ApplyLanesTest, RequestsSharingElementsApplyInArrivalOrder) {
  Options o = testing::FastOptions();
  o.apply_threads = 4;
  const Totals on = RunMix(1, o, 240, 7);
  // The lanes ran, and the parts were cut into spans.
  EXPECT_GT(on.lane_requests, 0u);
  EXPECT_GT(on.lane_tasks, on.lane_requests);
}

// Requests not split: each server's share is one message, and a pull of it (on the
// receive thread while the lanes are idle) lends the whole range to its reply; a push
// that finds it lent is applied on the receive thread (copy on write) after the lanes
// drained.
TEST(ApplyLanesTest, TwoServersWholeRangesAndOneLane) {
  Options o = testing::FastOptions();
  o.apply_threads = 1;
  const Totals on = RunMix(2, o, 160, 11, /*part_bytes=*/0);
  EXPECT_GT(on.lane_requests, 0u);
}

TEST(ApplyLanesTest, ZeroThreadsApplyEverythingOnTheReceiveThread) {
  Options o = testing::FastOptions();
  o.apply_threads = 0;
  const Totals off = RunMix(1, o, 120, 7);
  EXPECT_EQ(off.lane_requests, 0u);
  EXPECT_EQ(off.lane_tasks, 0u);
}

// A server that forwards its updates to a backup applies them on its receive thread (a
// backup must apply them in the order the primary did).
TEST(ApplyLanesTest, ReplicatedServersApplyOnTheReceiveThread) {
  Options o = testing::FastOptions();
  o.apply_threads = 4;
  o.replication = true;
  const Totals replicated = RunMix(2, o, 120, 13);
  EXPECT_EQ(replicated.lane_requests, 0u);
}

}  // namespace
}  // namespace ps
