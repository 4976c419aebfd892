// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The clocks failure detection runs on (common/clock.h): a ManualClock's time moves only
// by Advance, which returns once every ticker ran what the time made due.
#include "common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ps {
namespace {

TEST(ManualClockTest, AdvanceRunsEveryTickerOncePerIntervalItCovers) {
  auto clock = std::make_shared<ManualClock>();
  Mutex mu;
  CondVar cv;
  std::atomic<bool> stop{false};
  std::atomic<int> beats{0};
  std::atomic<bool> registered{false};
  std::thread loop([&] {
    Ticker ticker(clock.get());
    registered = true;
    while (!stop) {
      MutexLock lock(&mu);
      ticker.WaitFor(&mu, &cv, 50, [&] { return stop.load(); });
      if (!stop) ++beats;  // what a heartbeat loop would send
    }
  });
  while (!registered) std::this_thread::yield();
  const int64_t start = clock->NowMs();
  clock->Advance(500);
  EXPECT_EQ(clock->NowMs(), start + 500);
  // Exactly: the loop waited 50 ms of the clock ten times, and nothing else moves it.
  EXPECT_EQ(beats.load(), 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // real time changes nothing
  EXPECT_EQ(beats.load(), 10);
  clock->Advance(120);
  EXPECT_EQ(beats.load(), 12);
  stop = true;
  {
    MutexLock lock(&mu);
    cv.SignalAll();
  }
  loop.join();
  clock->Advance(100);  // no ticker left: nothing to wait for
}

TEST(ClockTest, NodesRunOnTheSteadyClockUnlessATestSetsOne) {
  Options o;
  EXPECT_EQ(ClockOf(o), RealClock());
  EXPECT_FALSE(ClockOf(o)->manual());
  auto manual = std::make_shared<ManualClock>();
  SetClock(&o, manual);
  EXPECT_EQ(ClockOf(o).get(), manual.get());
  Options copy = o;  // copies of the options share it (every node of a test's cluster)
  EXPECT_EQ(ClockOf(copy).get(), manual.get());
  // The steady clock's wait ends on its predicate or its deadline.
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  Clock& real = *RealClock();
  EXPECT_TRUE(real.WaitUntil(&mu, &cv, real.NowMs() + 60000, [] { return true; }));
  EXPECT_FALSE(real.WaitUntil(&mu, &cv, real.NowMs() + 5, [] { return false; }));
}

}  // namespace
}  // namespace ps
