// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Elastic jobs (max_workers above num_workers; docs/recovery.md, "Elastic jobs"): a job
// started with two workers takes a third while fewer than max_workers are live, refuses
// one more with the reason, gives a dead worker's rank to the next one, and the servers'
// sums equal the acknowledged pushes exactly across the growth and a death; a death that
// leaves fewer than min_workers live ends the job with an error naming min_workers. A
// death is a worker cut off by the fault injector (the scheduler declares it dead at the
// heartbeat timeout, on a manual clock the test advances).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
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
constexpr uint64_t kSize = 40;  // 10 chunks of 4: both servers hold some

class ElasticTest : public ::testing::Test {
 protected:
  Options Base(int num_workers, int max_workers, int min_workers) {
    injector_ = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
    Options o = testing::FastOptions();
    o.heartbeat_interval_ms = 50;
    o.heartbeat_timeout_ms = 1000;
    o.request_timeout_ms = 60000;  // far beyond: failures must come from the deaths
    o.dense_chunk_elems = 4;
    o.num_workers = num_workers;
    o.max_workers = max_workers;
    o.min_workers = min_workers;
    SetTransportFactory(&o, injector_);
    clock_ = testing::UseManualClock(&o);  // deaths only as the test advances the time
    return o;
  }

  // Advances the clock (bounded) until the scheduler counted `n` dead nodes.
  bool AwaitDead(Scheduler& s, uint64_t n) {
    return testing::AdvanceUntil(*clock_, [&] { return s.stats().dead_nodes >= n; });
  }

  // Pushes `value` to every element `times` times, each push waited for; returns how
  // many were acknowledged.
  static int PushMany(Worker& w, TableId table, float value, int times) {
    const std::vector<float> v(kSize, value);
    int acked = 0;
    for (int i = 0; i < times; ++i) {
      if (w.Wait(w.Push(table, v.data(), kSize), kWait).ok()) ++acked;
    }
    return acked;
  }

  static std::vector<float> PullAll(Worker& w, TableId table) {
    std::vector<float> got(kSize, -1.0f);
    Status s = w.Wait(w.Pull(table, got.data(), kSize), kWait);
    EXPECT_TRUE(s.ok()) << s;
    return got;
  }

  std::shared_ptr<FaultInjector> injector_;
  std::shared_ptr<ManualClock> clock_;
};

// bsp: a worker that joins the running job steps with the others from where they are (its
// clock starts at the slowest live worker's on the servers, not at 0, or the others'
// pulls would wait for it to count up). Each step every worker pushes its rank + 1 and
// pulls: the values are the sums of the steps, exact.
TEST_F(ElasticTest, AWorkerJoiningABspJobStepsWithTheOthersFromWhereTheyAre) {
  Options base = Base(/*num_workers=*/2, /*max_workers=*/3, /*min_workers=*/0);
  base.request_timeout_ms = 10000;  // a pull waiting for a clock that never comes fails
  LocalCluster c(2, 2, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  TableSpec spec = TableSpec::Dense("w", kSize);
  spec.sync = SyncMode::kBsp;
  auto table = c.worker(0).DeclareTable(spec);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(c.worker(1).DeclareTable(spec).ok());
  const auto steps = [&](Worker& w, float value, int n, std::vector<float>* last) {
    const std::vector<float> v(kSize, value);
    for (int i = 0; i < n; ++i) {
      Status pushed = w.Wait(w.Push(*table, v.data(), kSize), kWait);
      ASSERT_TRUE(pushed.ok()) << pushed;
      last->assign(kSize, -1.0f);
      Status pulled = w.Wait(w.Pull(*table, last->data(), kSize), kWait);
      ASSERT_TRUE(pulled.ok()) << pulled;
    }
  };
  std::vector<float> l0, l1, l2;
  {
    std::thread t([&] { steps(c.worker(1), 2.0f, 3, &l1); });
    steps(c.worker(0), 1.0f, 3, &l0);
    t.join();
  }
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(l0, std::vector<float>(kSize, 9.0f));  // 3 steps of 1 + 2

  Options o = c.options();
  o.connect_timeout_ms = 10000;
  Worker third(o);
  ASSERT_TRUE(third.Start().ok());
  ASSERT_TRUE(third.DeclareTable(spec).ok());
  std::vector<float> now(kSize, -1.0f);
  Status first = third.Wait(third.Pull(*table, now.data(), kSize), kWait);
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(now, std::vector<float>(kSize, 9.0f));  // the values as they are
  {
    std::thread t1([&] { steps(c.worker(1), 2.0f, 2, &l1); });
    std::thread t2([&] { steps(third, 3.0f, 2, &l2); });
    steps(c.worker(0), 1.0f, 2, &l0);
    t1.join();
    t2.join();
  }
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<float> want(kSize, 9.0f + 2 * 6.0f);  // then 2 steps of 1 + 2 + 3
  EXPECT_EQ(l0, want);
  EXPECT_EQ(l1, want);
  EXPECT_EQ(l2, want);
  third.Stop();
}

TEST_F(ElasticTest, GrowsToMaxWorkersRefusesOneMoreAndKeepsEveryAcknowledgedPush) {
  LocalCluster c(2, 2, "inproc", Base(/*num_workers=*/2, /*max_workers=*/3, /*min_workers=*/2));
  ASSERT_TRUE(c.Start().ok());
  auto table = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(c.worker(1).DeclareTable(TableSpec::Dense("w", kSize)).ok());
  // Worker rank r pushes r + 1 (small integers: float sums are exact).
  double want = 1.0 * PushMany(c.worker(0), *table, 1.0f, 5) + 2.0 * PushMany(c.worker(1), *table, 2.0f, 5);
  EXPECT_EQ(want, 15.0);

  // A third worker joins the running job: rank 2, the table as it is.
  Options o = c.options();
  o.connect_timeout_ms = 10000;
  Worker third(o);
  ASSERT_TRUE(third.Start().ok());
  EXPECT_EQ(third.rank(), 2u);
  auto again = third.DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *table);
  EXPECT_EQ(PullAll(third, *table), std::vector<float>(kSize, static_cast<float>(want)));
  want += 3.0 * PushMany(third, *table, 3.0f, 4);

  // A fourth is refused while three are live: max_workers.
  Worker fourth(o);
  Status refused = fourth.Start();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("max_workers=3"), std::string::npos) << refused;

  // Rank 1 dies (after its pushes were acknowledged); the others train on.
  injector_->Isolate(c.worker(1).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  want += 1.0 * PushMany(c.worker(0), *table, 1.0f, 3);
  want += 3.0 * PushMany(third, *table, 3.0f, 3);

  // The next worker takes the dead worker's rank.
  Worker replacement(o);
  ASSERT_TRUE(replacement.Start().ok());
  EXPECT_EQ(replacement.rank(), 1u);
  ASSERT_TRUE(replacement.DeclareTable(TableSpec::Dense("w", kSize)).ok());
  want += 2.0 * PushMany(replacement, *table, 2.0f, 2);

  // 5*1 + 5*2 + 4*3 + 3*1 + 3*3 + 2*2: every acknowledged push, once.
  EXPECT_EQ(want, 43.0);
  EXPECT_EQ(PullAll(c.worker(0), *table), std::vector<float>(kSize, static_cast<float>(want)));
  EXPECT_EQ(PullAll(third, *table), std::vector<float>(kSize, static_cast<float>(want)));

  // Every live node saw each change of membership: a barrier of the workers counts three.
  std::vector<Status> b(3);
  std::vector<int> n(3, -1);
  std::thread t1([&] { b[1] = third.Barrier(Group::kWorkers, kWait, &n[1]); });
  std::thread t2([&] { b[2] = replacement.Barrier(Group::kWorkers, kWait, &n[2]); });
  b[0] = c.worker(0).Barrier(Group::kWorkers, kWait, &n[0]);
  t1.join();
  t2.join();
  for (const Status& s : b) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(n, std::vector<int>({3, 3, 3}));
  third.Stop();
  replacement.Stop();
  EXPECT_TRUE(c.Finish().ok());
}

TEST_F(ElasticTest, ADeathBelowMinWorkersEndsTheJobNamingMinWorkers) {
  LocalCluster c(1, 3, "inproc", Base(/*num_workers=*/3, /*max_workers=*/4, /*min_workers=*/2));
  ASSERT_TRUE(c.Start().ok());
  auto table = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(table.ok()) << table.status();
  for (int r = 1; r < 3; ++r) ASSERT_TRUE(c.worker(r).DeclareTable(TableSpec::Dense("w", kSize)).ok());
  double want = 0;
  for (int r = 0; r < 3; ++r) want += PushMany(c.worker(r), *table, 1.0f, 2);
  // Rank 2 dies: two live, as many as min_workers: the job goes on.
  injector_->Isolate(c.worker(2).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  want += PushMany(c.worker(0), *table, 1.0f, 2);
  EXPECT_EQ(want, 8.0);
  EXPECT_EQ(PullAll(c.worker(1), *table), std::vector<float>(kSize, static_cast<float>(want)));
  // Rank 1 dies: one live, fewer than min_workers: the job ends, the error names the
  // dead rank, min_workers and the count.
  injector_->Isolate(c.worker(1).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 2));
  Status ended = c.scheduler().Join(20s);
  EXPECT_EQ(ended.code(), StatusCode::kUnavailable) << ended;
  EXPECT_NE(ended.message().find("worker rank 1"), std::string::npos) << ended;
  EXPECT_NE(ended.message().find("1 live worker(s) left, fewer than min_workers=2"),
            std::string::npos)
      << ended;
  // The survivor's next call fails with that reason (the scheduler told it, bounded).
  Status after;
  const auto until = std::chrono::steady_clock::now() + 20s;
  do {
    const std::vector<float> v(kSize, 1.0f);
    after = c.worker(0).Wait(c.worker(0).Push(*table, v.data(), kSize), 5s);
  } while (after.ok() && std::chrono::steady_clock::now() < until &&
           (std::this_thread::sleep_for(20ms), true));
  EXPECT_FALSE(after.ok());
  EXPECT_NE(after.message().find("min_workers=2"), std::string::npos) << after;
}

TEST(ElasticOptionsTest, BadBoundsNameTheOption) {
  Options o;
  o.num_workers = 3;
  o.max_workers = 2;
  Status s = o.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("max_workers=2"), std::string::npos) << s;
  o.max_workers = 5;
  o.min_workers = 4;
  s = o.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("min_workers=4"), std::string::npos) << s;
  o.min_workers = 2;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.MaxWorkers(), 5);
  o.max_workers = 0;
  EXPECT_FALSE(o.elastic());
  EXPECT_EQ(o.MaxWorkers(), 3);
}

}  // namespace
}  // namespace ps
