// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Worker::AllReduce, by the ring and directly: exact sums (integer-valued floats) for W = 2, 3, 4
// over tcp and inproc at sizes around the chunk boundaries and 1M elements, segments
// smaller than a chunk, collectives back to back, subsets of the workers, bad arguments,
// a deadline, and a participant cut off in the middle of a collective.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"
#include "worker/collective_algorithms.h"
#include "worker/collectives.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

constexpr auto kWait = milliseconds(60000);

// Worker r's input: integers below 2^12, so that every sum of up to 4 is exact.
std::vector<float> Input(size_t n, int rank, int round = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((i * 7 + rank * 131 + round * 17) % 1021);
  return v;
}

std::vector<float> Expected(size_t n, const std::vector<int>& ranks, int round = 0) {
  std::vector<float> sum(n, 0.0f);
  for (int r : ranks) {
    const std::vector<float> x = Input(n, r, round);
    for (size_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  return sum;
}

// Index of the first element where a and b differ, or -1.
long FirstDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return -1;
}

class AllReduceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, AllReduceAlgorithm>> {
 protected:
  std::string transport() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  AllReduceAlgorithm algorithm() const { return std::get<2>(GetParam()); }
};

TEST_P(AllReduceTest, ExactSumsAtEverySize) {
  const int w = world();
  LocalCluster c(1, w, transport());
  ASSERT_TRUE(c.Start().ok());
  std::vector<int> all;
  for (int r = 0; r < w; ++r) all.push_back(r);
  const std::vector<size_t> sizes = {0, 1,    size_t(w - 1), size_t(w),      size_t(w + 1),
                                     7, 1001, 65537,         size_t(1) << 20};
  for (size_t n : sizes) {
    // Default segments (1 MiB), and 12-byte segments (3 floats: many per chunk) for the
    // smaller sizes.
    for (size_t seg : {size_t(1) << 20, size_t(12)}) {
      if (seg == 12 && n > 100000) continue;
      AllReduceOptions opt;
      opt.segment_bytes = seg;
      opt.algorithm = algorithm();
      std::vector<std::vector<float>> bufs(w);
      std::vector<Status> st(w);
      for (int r = 0; r < w; ++r) bufs[r] = Input(n, r);
      c.OnEveryWorker([&](int r) { st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), n, opt, kWait); });
      const std::vector<float> want = Expected(n, all);
      for (int r = 0; r < w; ++r) {
        ASSERT_TRUE(st[r].ok()) << "n=" << n << " seg=" << seg << " rank " << r << ": " << st[r];
        EXPECT_EQ(FirstDiff(bufs[r], want), -1) << "n=" << n << " seg=" << seg << " rank " << r;
      }
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

TEST_P(AllReduceTest, BackToBackCollectivesNeverMix) {
  const int w = world();
  LocalCluster c(1, w, transport());
  ASSERT_TRUE(c.Start().ok());
  std::vector<int> all;
  for (int r = 0; r < w; ++r) all.push_back(r);
  constexpr int kRounds = 6;
  const size_t n = 300001;  // not divisible by 2, 3 or 4
  std::vector<std::vector<std::vector<float>>> bufs(w, std::vector<std::vector<float>>(kRounds));
  std::vector<Status> st(w);
  c.OnEveryWorker([&](int r) {
    AllReduceOptions opt;
    opt.segment_bytes = 64 << 10;  // many segments in flight per collective
    opt.algorithm = algorithm();
    for (int k = 0; k < kRounds && st[r].ok(); ++k) {
      bufs[r][k] = Input(n, r, k);
      st[r] = c.worker(r).communicator().AllReduce(bufs[r][k].data(), n, opt, kWait);
    }
  });
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    for (int k = 0; k < kRounds; ++k)
      EXPECT_EQ(FirstDiff(bufs[r][k], Expected(n, all, k)), -1) << "rank " << r << " round " << k;
  }
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, AllReduceTest,
    ::testing::Combine(::testing::Values("tcp", "inproc"), ::testing::Values(2, 3, 4),
                       ::testing::Values(AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDirect)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int, AllReduceAlgorithm>>& i) {
      return std::get<0>(i.param) + "_W" + std::to_string(std::get<1>(i.param)) +
             (std::get<2>(i.param) == AllReduceAlgorithm::kDirect ? "_direct" : "_ring");
    });

TEST(AllReduceGroupTest, OneWorkerIsANoOp) {
  LocalCluster c(1, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::vector<float> x = Input(10, 0);
  ASSERT_TRUE(c.worker(0).communicator().AllReduce(x.data(), x.size(), kWait).ok());
  EXPECT_EQ(x, Input(10, 0));
  EXPECT_TRUE(c.Finish().ok());
}

// Two disjoint groups at once, then an overlapping one: each sums its own members only.
TEST(AllReduceGroupTest, SubsetsOfTheWorkers) {
  LocalCluster c(1, 4, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = 100003;
  std::vector<std::vector<float>> bufs(4);
  std::vector<Status> st(4);
  c.OnEveryWorker([&](int r) {
    AllReduceOptions opt;
    opt.ranks = r % 2 == 0 ? std::vector<uint32_t>{2, 0} : std::vector<uint32_t>{1, 3};
    bufs[r] = Input(n, r);
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), n, opt, kWait);
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    const std::vector<int> group = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    EXPECT_EQ(FirstDiff(bufs[r], Expected(n, group)), -1) << "rank " << r;
  }
  // Ranks 0, 1, 3 (an FC-replica subset); rank 2 stays out.
  c.OnEveryWorker([&](int r) {
    if (r == 2) return;
    AllReduceOptions opt;
    opt.ranks = {3, 1, 0};
    opt.segment_bytes = 4096;
    bufs[r] = Input(n, r, 1);
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), n, opt, kWait);
  });
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(FirstDiff(bufs[r], Expected(n, {0, 1, 3}, 1)), -1) << "rank " << r;
  }
  // The whole cluster again afterwards: the group sequence numbers stayed paired.
  c.OnEveryWorker([&](int r) {
    bufs[r] = Input(n, r, 2);
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), n, kWait);
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(FirstDiff(bufs[r], Expected(n, {0, 1, 2, 3}, 2)), -1) << "rank " << r;
  }
  EXPECT_TRUE(c.Finish().ok());
}

TEST(AllReduceGroupTest, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  LocalCluster c(1, 3, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  std::vector<float> x(16, 1.0f);
  auto with = [](std::vector<uint32_t> ranks, size_t seg = size_t(1) << 20) {
    AllReduceOptions o;
    o.ranks = std::move(ranks);
    o.segment_bytes = seg;
    return o;
  };
  EXPECT_EQ(w.communicator().AllReduce(nullptr, 16, kWait).code(), StatusCode::kInvalidArgument);
  Status s = w.communicator().AllReduce(x.data(), 16, with({1, 2}), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("does not include this worker"), std::string::npos) << s;
  s = w.communicator().AllReduce(x.data(), 16, with({0, 1, 1}), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("twice"), std::string::npos) << s;
  s = w.communicator().AllReduce(x.data(), 16, with({0, 7}), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank 7"), std::string::npos) << s;
  EXPECT_EQ(w.communicator().AllReduce(x.data(), 16, with({}, 0), kWait).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.communicator().AllReduce(x.data(), 16, milliseconds(-1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(x, std::vector<float>(16, 1.0f));  // untouched
  // The reserved tags stay out of the users' reach.
  EXPECT_EQ(w.Wait(w.communicator().SendTo(1, kCollectiveTagBit | 5, x.data(), 16), kWait).code(),
            StatusCode::kInvalidArgument);
  // Nothing was sent: the group's sequence numbers are still paired.
  std::vector<std::vector<float>> bufs(3);
  std::vector<Status> st(3);
  c.OnEveryWorker([&](int r) {
    bufs[r] = Input(1000, r);
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), 1000, kWait);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(FirstDiff(bufs[r], Expected(1000, {0, 1, 2})), -1);
  }
  Worker stopped(c.options());
  EXPECT_EQ(stopped.communicator().AllReduce(x.data(), 16, kWait).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c.Finish().ok());
}

// A participant that never comes: the others fail at their deadline, with kTimeout.
// The collective's messages expire kRequestGraceMs (1 s, worker/collectives.cc) after its
// deadline, with kUnavailable; that can only win when the caller's thread was held up
// past the grace (a loaded machine), so kUnavailable is accepted only from a call that
// took that long. A call returning sooner must say kTimeout: an expiry racing the
// deadline (no grace) would give kUnavailable at ~300 ms.
TEST(AllReduceGroupTest, AMissingParticipantTimesOut) {
  LocalCluster c(1, 3, "inproc");
  ASSERT_TRUE(c.Start().ok());
  constexpr auto kTimeout = milliseconds(300);
  constexpr auto kGrace = milliseconds(1000);  // kRequestGraceMs
  std::vector<std::vector<float>> bufs(3);
  std::vector<Status> st(3);
  std::vector<std::chrono::steady_clock::duration> took(3);
  c.OnEveryWorker([&](int r) {
    if (r == 2) return;
    bufs[r] = Input(5000, r);
    const auto start = std::chrono::steady_clock::now();
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), 5000, kTimeout);
    took[r] = std::chrono::steady_clock::now() - start;
  });
  for (int r = 0; r < 2; ++r) {
    const auto ms = std::chrono::duration_cast<milliseconds>(took[r]).count();
    if (st[r].code() == StatusCode::kUnavailable && took[r] >= kTimeout + kGrace) {
      std::cerr << "rank " << r << ": held up " << ms << " ms, past the grace: " << st[r] << "\n";
      continue;
    }
    EXPECT_EQ(st[r].code(), StatusCode::kTimeout) << "rank " << r << " (" << ms << " ms): " << st[r];
  }
}

// Worker 2 is cut off after its first message of a collective of 4: every other
// participant fails with kUnavailable because it died (not at a deadline), and worker 2
// itself fails too.
// The direct all-reduce sums W-1 contributions into each segment. One that came before
// its receive was posted is delivered on the posting thread while the receive thread
// delivers another: staggered starts make that happen often, and every sum must still be
// exact (adding in place raced there: a lost update).
TEST(AllReduceDirectTest, ContributionsArrivingTogetherAreAllSummed) {
  constexpr int kW = 4, kRounds = 120;
  LocalCluster c(1, kW, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = (size_t{1} << 20) + 3;  // chunks of 1 MiB: adding a segment takes a while
  std::vector<Status> st(kW);
  std::vector<long> wrong(kW, -1);
  c.OnEveryWorker([&](int r) {
    AllReduceOptions opt;
    opt.algorithm = AllReduceAlgorithm::kDirect;
    opt.segment_bytes = 64 << 10;  // 16 segments per chunk, each summed from 3 senders
    for (int k = 0; k < kRounds && st[r].ok() && wrong[r] < 0; ++k) {
      std::vector<float> buf = Input(n, r, k);
      // One worker a round starts late: the others' contributions wait for its receives.
      if (k % kW == r) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      st[r] = c.worker(r).communicator().AllReduce(buf.data(), n, opt, kWait);
      // A lost update loses a whole segment's contribution: every 61st element shows it.
      auto bad = [&](size_t i) {
        float want = 0;
        for (int q = 0; q < kW; ++q) want += static_cast<float>((i * 7 + q * 131 + k * 17) % 1021);
        return buf[i] != want;
      };
      for (size_t i = 0; st[r].ok() && wrong[r] < 0 && i < n; i += 61) {
        if (bad(i)) wrong[r] = k;
      }
      if (st[r].ok() && bad(n - 1)) wrong[r] = k;
    }
  });
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(wrong[r], -1) << "rank " << r << " summed round " << wrong[r] << " wrongly";
  }
  EXPECT_TRUE(c.Finish().ok());
}

// The direct all-reduce adds a chunk's contributions in member order, not in the order
// they arrive: with inputs whose float sum depends on the order (1e8 + 1 rounds back to
// 1e8), every round gives every member the same bits, whichever member starts late.
TEST(AllReduceDirectTest, SumsInOneOrderWhoeverArrivesLast) {
  constexpr int kW = 4, kRounds = 12;
  LocalCluster c(1, kW, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = 4096;
  const float value[kW] = {1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<std::vector<std::vector<float>>> got(kW, std::vector<std::vector<float>>(kRounds));
  std::vector<Status> st(kW);
  c.OnEveryWorker([&](int r) {
    AllReduceOptions opt;
    opt.algorithm = AllReduceAlgorithm::kDirect;
    for (int k = 0; k < kRounds && st[r].ok(); ++k) {
      std::vector<float> buf(n, value[r]);
      // One member a round starts late, so its contribution reaches every chunk last.
      if (k % kW == r) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      st[r] = c.worker(r).communicator().AllReduce(buf.data(), n, opt, kWait);
      got[r][k] = std::move(buf);
    }
  });
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  for (int r = 0; r < kW; ++r) {
    for (int k = 0; k < kRounds; ++k) {
      EXPECT_EQ(FirstDiff(got[r][k], got[0][0]), -1) << "rank " << r << " round " << k;
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

class AllReduceFaultTest : public ::testing::TestWithParam<AllReduceAlgorithm> {};

TEST_P(AllReduceFaultTest, APeerCutOffMidCollectiveFailsEveryone) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  o.request_timeout_ms = 120000;  // far beyond: a failure must come from the death
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 4, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  const NodeId victim = c.worker(2).id();
  FaultRule rule;
  rule.match = [victim](NodeId, const Message& m) {
    return m.header.sender == victim && m.header.msg_type() == MsgType::kPeerTensor &&
           (m.header.offset & kCollectiveTagBit) && (m.header.offset & 0xffffff) >= 1;
  };
  rule.action = FaultAction::kDrop;
  const int id = injector->AddRule(rule);
  const size_t n = 1 << 18;
  std::vector<std::vector<float>> bufs(4);
  std::vector<Status> st(4);
  std::thread cut([&] {
    while (injector->Applied(id) == 0) std::this_thread::sleep_for(milliseconds(5));
    injector->Isolate(victim);
  });
  c.OnEveryWorker([&](int r) {
    AllReduceOptions opt;
    opt.segment_bytes = 16 << 10;
    opt.algorithm = GetParam();
    bufs[r] = Input(n, r);
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), n, opt, milliseconds(120000));
  });
  cut.join();
  // Every survivor says the same, naming the dead member.
  const std::string want =
      "AllReduce #0 failed: member rank 2 (node " + std::to_string(victim) + ") died";
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(st[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r].message(), want) << "rank " << r;
  }
  EXPECT_FALSE(st[2].ok());
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllReduceFaultTest,
                         ::testing::Values(AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDirect),
                         [](const ::testing::TestParamInfo<AllReduceAlgorithm>& i) {
                           return i.param == AllReduceAlgorithm::kDirect ? "direct" : "ring";
                         });

TEST(RingPlanTest, EverySegmentOnceAndIndicesFit) {
  for (size_t w : {2, 3, 4, 7}) {
    for (size_t n : {0, 1, 5, 1000, 1 << 20}) {
      const RingPlan p = RingPlan::Make(n, w, 16, 2 * (w - 1));
      std::vector<int> covered(n, 0);
      for (size_t c = 0; c < w; ++c) {
        for (size_t k = 0; k < p.segs; ++k) {
          size_t b, l;
          p.Segment(c, k, &b, &l);
          for (size_t i = b; i < b + l; ++i) ++covered[i];
        }
      }
      EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<long>(n));
      // What p sends at step t is what p+1 receives at step t; what p receives at t it
      // sends at t+1.
      for (size_t pos = 0; pos < w; ++pos) {
        for (size_t t = 0; t < p.steps(); ++t) {
          EXPECT_EQ(p.SendChunk(pos, t), p.RecvChunk((pos + 1) % w, t));
          if (t + 1 < p.steps()) {
            EXPECT_EQ(p.RecvChunk(pos, t), p.SendChunk(pos, t + 1));
          }
        }
      }
    }
  }
  // A huge buffer with tiny segments: segments grow so that message indices fit 24 bits
  // (the last index is the descriptors').
  const RingPlan big = RingPlan::Make(size_t(1) << 34, 4, 1, 6);
  EXPECT_LT(big.steps() * big.segs, (size_t(1) << 24) - 1);
}

// The ring keeps kRingDepth (4) segments per chunk, down to 256 KiB segments, so that a
// chunk of one segment does not make its 2(W-1) steps run one after the other.
TEST(RingPlanTest, TheRingKeepsFourSegmentsPerChunkDownTo256KiB) {
  using collective::RingSegmentBytes;
  const uint64_t MiB = uint64_t{1} << 20, KiB = 1024;
  EXPECT_EQ(RingSegmentBytes(16 * MiB / 4, 4, 4, MiB), MiB);       // chunks of 4 MiB
  EXPECT_EQ(RingSegmentBytes(64 * MiB / 4, 4, 4, MiB), MiB);       // 16 MiB: 16 segments
  EXPECT_EQ(RingSegmentBytes(4 * MiB / 4, 4, 4, MiB), 256 * KiB);  // chunks of 1 MiB
  EXPECT_EQ(RingSegmentBytes(16 * MiB / 4, 8, 4, MiB), 512 * KiB); // 2 MiB
  EXPECT_EQ(RingSegmentBytes(4 * MiB / 4, 8, 4, MiB), 256 * KiB);  // 512 KiB: the floor
  EXPECT_EQ(RingSegmentBytes(MiB / 4, 8, 4, MiB), 256 * KiB);      // 128 KiB: one segment
  EXPECT_EQ(RingSegmentBytes(8 * MiB / 4, 4, 2, MiB), 256 * KiB);  // 2-byte wire elements
  EXPECT_EQ(RingSegmentBytes(4 * MiB / 4, 4, 4, 12), 12u);         // the caller's smaller one
  EXPECT_EQ(RingSegmentBytes(0, 4, 4, MiB), 256 * KiB);            // nothing to send
}

}  // namespace
}  // namespace ps
