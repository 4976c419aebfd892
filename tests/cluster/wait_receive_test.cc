// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// WorkerOptions::wait_receive_us: a thread in Worker::Wait for a small request takes the
// receive side from the receive thread and handles its own replies
// (NodeRuntime::ReceiveWhile). The values are exact with it on and off, over tcp and
// inproc; the counter shows that waiters handled replies (and none with it off); a
// callback of another request never runs on the waiting thread; a cluster map that
// arrives while a waiter receives is installed (a table declared meanwhile by another
// worker is usable); a request larger than the limit is left to the receive thread; and
// Stop returns while another thread waits for a request nobody answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;

// A budget long enough that on a busy machine the waiter still gets the receive side
// before its reply comes (the counters below do not depend on a race).
Options WaitReceiveOptions(int us) {
  Options o = testing::FastOptions();
  o.wait_receive_us = us;
  o.dense_chunk_elems = 256;  // a 1024-float table spreads over both servers
  return o;
}

float G(uint64_t i, int step) { return static_cast<float>(static_cast<int>((i * 7 + step) % 19) - 9); }

// `steps` pushpulls of `n` floats on a 2-server table, each waited for: returns the
// replies the waiting thread handled; checks every pulled value.
uint64_t PushPullSteps(Worker& w, TableId t, uint64_t n, int steps) {
  std::vector<float> sum(n, 0.0f), g(n), out(n);
  const uint64_t before = w.stats().replies_in_wait;
  for (int s = 0; s < steps; ++s) {
    for (uint64_t i = 0; i < n; ++i) {
      g[i] = G(i, s);
      sum[i] += g[i];
    }
    Status st = w.Wait(w.PushPull(t, g.data(), out.data(), n), kWait);
    EXPECT_TRUE(st.ok()) << st;
    for (uint64_t i = 0; i < n; ++i) {
      if (out[i] != sum[i]) {
        ADD_FAILURE() << "step " << s << " element " << i << ": " << out[i] << " != " << sum[i];
        return 0;
      }
    }
  }
  return w.stats().replies_in_wait - before;
}

class WaitReceiveTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WaitReceiveTest, SmallRequestsAreAnsweredOnTheWaitingThreadWithExactValues) {
  LocalCluster c(2, 1, GetParam(), WaitReceiveOptions(1000000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("small", 1024));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t in_wait = PushPullSteps(w, *t, 1024, 100);
  // Two servers: two replies a step. Every reply may be handled in the wait; the
  // receive thread may also have handled some (it had the reply before it stepped
  // aside), but not all of them.
  EXPECT_GT(in_wait, 0u);
  EXPECT_LE(in_wait, 200u);
  RecordProperty("replies_in_wait", std::to_string(in_wait));
  std::printf("replies handled in the wait: %llu of 200\n", static_cast<unsigned long long>(in_wait));

  // Sparse pulls (the scatter of unique rows runs where the reply is handled).
  auto sp = w.DeclareTable(TableSpec::Sparse("rows", 8));
  ASSERT_TRUE(sp.ok()) << sp.status();
  std::vector<Key> keys = {3, 9, 3, 1000003, 77};
  std::vector<float> rows(keys.size() * 8), out(keys.size() * 8, -1.0f);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 8 + 1);
  ASSERT_TRUE(w.Wait(w.PushSparse(*sp, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PullSparse(*sp, keys.data(), keys.size(), out.data(), out.size()), kWait).ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    // Key 3 was pushed twice in one request: its row is the sum.
    const float times = keys[k] == 3 ? 2.0f : 1.0f;
    for (size_t d = 0; d < 8; ++d) ASSERT_EQ(out[k * 8 + d], times * static_cast<float>(d + 1)) << k;
  }
  c.Finish();
}

INSTANTIATE_TEST_SUITE_P(Transports, WaitReceiveTest, ::testing::Values("tcp", "inproc"));

TEST(WaitReceiveOffTest, TheReceiveThreadHandlesEveryReply) {
  LocalCluster c(2, 1, "tcp", WaitReceiveOptions(0));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("small", 1024));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(PushPullSteps(w, *t, 1024, 50), 0u);
  c.Finish();
}

// A request over the limit (64 KiB of values) is not received in the wait.
TEST(WaitReceiveLimitTest, LargeRequestsStayWithTheReceiveThread) {
  LocalCluster c(1, 1, "tcp", WaitReceiveOptions(1000000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 16385;  // one float over the limit (RequestTracker::kWaitReceiveFloats)
  auto t = w.DeclareTable(TableSpec::Dense("large", n));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(PushPullSteps(w, *t, n, 5), 0u);
  c.Finish();
}

// Replies to callback requests reach the waiter's socket too: they are handed back to the
// receive thread, and their callbacks never run on the thread that waits.
TEST(WaitReceiveCallbackTest, OtherRequestsCallbacksNeverRunOnTheWaitingThread) {
  LocalCluster c(1, 1, "tcp", WaitReceiveOptions(1000000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("t", 256));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> callbacks{0}, on_waiter{0};
  std::vector<float> g(256, 1.0f), out(256);
  for (int round = 0; round < 50; ++round) {
    for (int k = 0; k < 4; ++k) {
      w.Push(*t, g.data(), g.size(), [&](const Status& s) {
        EXPECT_TRUE(s.ok()) << s;
        if (std::this_thread::get_id() == me) ++on_waiter;
        ++callbacks;
      });
    }
    ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), out.size()), kWait).ok());
  }
  ASSERT_TRUE(w.Flush(kWait).ok());
  EXPECT_EQ(callbacks.load(), 200);
  EXPECT_EQ(on_waiter.load(), 0);
  // Same-lane order: the last pull follows every push.
  ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out[0], 200.0f);
  c.Finish();
}

// While worker 0 keeps a waiter on its receive socket, worker 1 declares tables: the maps
// (control messages) that reach worker 0 meanwhile are handed back and installed, and
// worker 0 uses every new table.
TEST(WaitReceiveControlTest, MapsArrivingDuringAWaitAreInstalled) {
  LocalCluster c(2, 2, "tcp", WaitReceiveOptions(1000000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  auto t = w0.DeclareTable(TableSpec::Dense("busy", 512));
  ASSERT_TRUE(t.ok()) << t.status();
  std::atomic<bool> declaring{true};
  auto busy = std::async(std::launch::async, [&] {
    std::vector<float> g(512, 1.0f), out(512);
    int steps = 0;
    while (declaring.load() || steps < 20) {
      Status s = w0.Wait(w0.PushPull(*t, g.data(), out.data(), g.size()), kWait);
      if (!s.ok()) return s;
      ++steps;
    }
    return Status::OK();
  });
  for (int k = 0; k < 6; ++k) {
    auto d = w1.DeclareTable(TableSpec::Dense("late" + std::to_string(k), 64));
    ASSERT_TRUE(d.ok()) << d.status();
  }
  declaring = false;
  ASSERT_TRUE(busy.get().ok());
  for (int k = 0; k < 6; ++k) {
    // DeclareTable by name returns the existing table once this worker's map has it.
    auto d = w0.DeclareTable(TableSpec::Dense("late" + std::to_string(k), 64));
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<float> g(64, static_cast<float>(k)), out(64);
    ASSERT_TRUE(w0.Wait(w0.PushPull(*d, g.data(), out.data(), 64), kWait).ok());
    EXPECT_EQ(out[63], static_cast<float>(k));
  }
  c.Finish();
}

// A server that never answers: one thread waits in its wait-receive for the reply while
// the worker stops; Stop returns and the wait ends with an error.
TEST(WaitReceiveStopTest, StopEndsAWaiterWhoseReplyNeverComes) {
  Options o = WaitReceiveOptions(1000000);
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("t", 64));
  ASSERT_TRUE(t.ok()) << t.status();
  const int rule = injector->AddRule(
      {[](NodeId, const Message& m) { return m.header.msg_type() == MsgType::kPull; },
       FaultAction::kDrop, 0, /*times=*/-1});
  std::vector<float> out(64);
  auto waiter = std::async(std::launch::async, [&] {
    return w.Wait(w.Pull(*t, out.data(), out.size()), kWait);
  });
  // The pull is in flight (its ticket is waited for) once the injector dropped it.
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (injector->Applied(rule) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(injector->Applied(rule), 0);
  w.Stop();
  const Status s = waiter.get();
  EXPECT_FALSE(s.ok());
  c.Finish();
}

}  // namespace
}  // namespace ps
