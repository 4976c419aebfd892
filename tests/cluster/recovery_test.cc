// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Scheduler recovery (docs/recovery.md): the scheduler dies without a word (cut off, then
// stopped: nothing it says reaches anyone), a new one is started on its address, and the
// live nodes rejoin it. Tested at several points: steady pushes (which go on while no
// scheduler runs), a barrier some workers had passed and others not, a declare in flight,
// and registration. Values are checked exactly; the job then ends normally.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "layerps.pb.h"
#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"
#include "transport/message.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;
constexpr uint64_t kSize = 40;

class RecoveryTest : public ::testing::Test {
 protected:
  Options Base() {
    injector_ = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
    Options o = testing::FastOptions();
    o.heartbeat_interval_ms = 50;
    o.heartbeat_timeout_ms = 2000;
    o.dense_chunk_elems = 4;
    o.scheduler_recovery_ms = 30000;
    SetTransportFactory(&o, injector_);
    clock_ = testing::UseManualClock(&o);  // deaths and takeovers only as the test says
    return o;
  }

  // The scheduler dies: cut off first, so its stop says nothing to anyone.
  void KillScheduler(LocalCluster& c) {
    injector_->Isolate(kSchedulerId);
    c.scheduler().Stop();
    injector_->Heal(kSchedulerId);
  }

  // Advances the clock (bounded: 60 s of it) until the restarted scheduler took the
  // cluster over.
  bool AwaitRecovered(Scheduler& s) {
    return testing::AdvanceUntil(*clock_, [&] { return s.stats().recoveries >= 1; });
  }

  // Advances the clock (bounded) until `s` counted at least n dead nodes.
  bool AwaitDead(Scheduler& s, uint64_t n) {
    return testing::AdvanceUntil(*clock_, [&] { return s.stats().dead_nodes >= n; });
  }

  // Advances the clock (bounded) until `pred` holds.
  template <typename Pred>
  bool AwaitTrue(Pred pred) {
    return testing::AdvanceUntil(*clock_, pred);
  }

  // Drops every Rejoin while `hold` is set (a predicate over the parsed control message).
  void HoldRejoins(std::atomic<bool>* hold) {
    FaultRule rule;
    rule.match = [hold](NodeId peer, const Message& m) {
      if (!hold->load() || peer != kSchedulerId || m.header.msg_type() != MsgType::kControl) return false;
      layerps::pb::Control c;
      return ParseControl(m, &c).ok() && c.has_rejoin();
    };
    rule.action = FaultAction::kDrop;
    injector_->AddRule(rule);
  }

  std::shared_ptr<FaultInjector> injector_;
  std::shared_ptr<ManualClock> clock_;
};

TEST_F(RecoveryTest, PushesGoOnAndARestartedSchedulerTakesTheClusterOver) {
  LocalCluster c(2, 2, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  auto dense = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  auto sparse = c.worker(1).DeclareTable(TableSpec::Sparse("emb", 2));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<Key> ids;
  for (Key k = 1; k <= 32; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);
  const std::vector<float> ones(kSize, 1.0f), rows(ids.size() * 2, 1.0f);
  int pushes = 0;
  const auto push_all = [&] {
    c.OnEveryWorker([&](int r) {
      Worker& w = c.worker(r);
      ASSERT_TRUE(w.Wait(w.Push(*dense, ones.data(), kSize), kWait).ok());
      ASSERT_TRUE(w.Wait(w.PushSparse(*sparse, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
    });
    ++pushes;
  };
  for (int i = 0; i < 3; ++i) push_all();
  const uint64_t epoch = c.scheduler().stats().map_epoch;

  KillScheduler(c);
  // No scheduler: the data plane goes on (well past heartbeat_timeout_ms).
  for (int i = 0; i < 25; ++i) {
    push_all();
    clock_->Advance(100);
  }
  ASSERT_FALSE(HasFatalFailure());

  ASSERT_TRUE(c.RestartScheduler().ok());
  ASSERT_TRUE(AwaitRecovered(c.scheduler()));
  EXPECT_GT(c.scheduler().stats().map_epoch, epoch);
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 0u);
  for (int i = 0; i < 3; ++i) push_all();

  // The restarted scheduler serves calls: a barrier, a declare (a new id), an old name.
  c.OnEveryWorker([&](int r) { EXPECT_TRUE(c.worker(r).Barrier(Group::kWorkers, kWait).ok()); });
  auto again = c.worker(1).DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *dense);
  auto fresh = c.worker(0).DeclareTable(TableSpec::Dense("after", 8));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(*fresh, *dense);
  EXPECT_NE(*fresh, *sparse);

  std::vector<float> got(kSize), pulled(rows.size());
  Worker& w = c.worker(0);
  ASSERT_TRUE(w.Wait(w.Pull(*dense, got.data(), kSize), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PullSparse(*sparse, ids.data(), ids.size(), pulled.data(), pulled.size()), kWait).ok());
  for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(got[i], 2.0f * pushes) << "element " << i;
  for (size_t i = 0; i < pulled.size(); ++i) ASSERT_EQ(pulled[i], 2.0f * pushes) << "row value " << i;
  Status job = c.Finish();
  EXPECT_TRUE(job.ok()) << job;
}

// The old scheduler released a barrier to worker 0, but its answer to worker 1 was lost
// with it: the restarted scheduler answers worker 1's barrier (sent again) at once, from
// worker 0's count of barriers passed. A barrier in progress (nobody released) waits for
// everyone as before.
TEST_F(RecoveryTest, ABarrierReleasedBeforeTheDeathIsAnsweredAfterIt) {
  LocalCluster c(1, 2, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  const NodeId w1 = c.worker(1).id();
  // From here on nothing the scheduler says reaches worker 1.
  FaultRule mute;
  mute.match = [w1](NodeId peer, const Message& m) {
    return peer == w1 && m.header.msg_type() == MsgType::kControl && m.header.sender == kSchedulerId;
  };
  mute.action = FaultAction::kDrop;
  injector_->AddRule(mute);
  std::future<Status> b1 = std::async(std::launch::async, [&] { return c.worker(1).Barrier(Group::kWorkers, kWait); });
  ASSERT_TRUE(c.worker(0).Barrier(Group::kWorkers, kWait).ok());
  EXPECT_EQ(b1.wait_for(300ms), std::future_status::timeout);  // released, answer lost
  KillScheduler(c);
  injector_->ClearRules();
  // Worker 0 is in the next barrier when the new scheduler comes.
  std::future<Status> b0 = std::async(std::launch::async, [&] { return c.worker(0).Barrier(Group::kWorkers, kWait); });
  ASSERT_TRUE(c.RestartScheduler().ok());
  ASSERT_TRUE(AwaitRecovered(c.scheduler()));
  Status first = b1.get();
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_EQ(b0.wait_for(300ms), std::future_status::timeout);  // barrier 2 waits for worker 1
  EXPECT_TRUE(c.worker(1).Barrier(Group::kWorkers, kWait).ok());
  Status second = b0.get();
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_TRUE(c.Finish().ok());
}

// A declare in flight when the scheduler dies completes against the restarted one (sent
// again), and both workers agree on the table.
TEST_F(RecoveryTest, ADeclareInFlightCompletesAfterTheTakeover) {
  LocalCluster c(2, 2, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  ASSERT_TRUE(c.worker(0).DeclareTable(TableSpec::Dense("first", kSize)).ok());
  // The scheduler never hears the declare: it dies with it unanswered.
  FaultRule lose;
  lose.match = [](NodeId peer, const Message& m) {
    return peer == kSchedulerId && m.header.msg_type() == MsgType::kControl;
  };
  lose.action = FaultAction::kDrop;
  injector_->AddRule(lose);
  std::future<StatusOr<TableId>> declared = std::async(std::launch::async, [&] {
    return c.worker(1).DeclareTable(TableSpec::Dense("second", kSize));
  });
  std::this_thread::sleep_for(200ms);
  KillScheduler(c);
  injector_->ClearRules();
  ASSERT_TRUE(c.RestartScheduler().ok());
  ASSERT_TRUE(AwaitRecovered(c.scheduler()));
  StatusOr<TableId> id = declared.get();
  ASSERT_TRUE(id.ok()) << id.status();
  auto same = c.worker(0).DeclareTable(TableSpec::Dense("second", kSize));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, *id);
  const std::vector<float> twos(kSize, 2.0f);
  ASSERT_TRUE(c.worker(0).Wait(c.worker(0).Push(*id, twos.data(), kSize), kWait).ok());
  std::vector<float> got(kSize);
  ASSERT_TRUE(c.worker(1).Wait(c.worker(1).Pull(*id, got.data(), kSize), kWait).ok());
  for (float v : got) ASSERT_EQ(v, 2.0f);
  EXPECT_TRUE(c.Finish().ok());
}

// The scheduler dies while the cluster registers: the nodes that registered send their
// registration again, a restarted scheduler takes them and the rest, and the cluster
// starts.
TEST_F(RecoveryTest, ASchedulerThatDiesDuringRegistrationIsReplaced) {
  Options base = Base();
  base.num_servers = 1;
  base.num_workers = 2;
  base.scheduler_address = "inproc://recovery-registration";
  auto first = std::make_unique<Scheduler>(base);
  ASSERT_TRUE(first->Start().ok());
  Server server(base);
  Worker w0(base), w1(base);
  std::future<Status> s = std::async(std::launch::async, [&] { return server.Start(); });
  std::future<Status> a = std::async(std::launch::async, [&] { return w0.Start(); });
  const auto until = std::chrono::steady_clock::now() + 10s;
  const std::string two = "1 of 1 servers and 1 of 2 workers registered";
  while (first->MissingNodes().find(two) == std::string::npos && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_NE(first->MissingNodes().find(two), std::string::npos) << first->MissingNodes();
  injector_->Isolate(kSchedulerId);
  first->Stop();
  injector_->Heal(kSchedulerId);
  Scheduler second(base);
  ASSERT_TRUE(second.Start().ok());
  std::future<Status> b = std::async(std::launch::async, [&] { return w1.Start(); });
  ASSERT_TRUE(s.get().ok());
  ASSERT_TRUE(a.get().ok());
  ASSERT_TRUE(b.get().ok());
  auto t = w0.DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(t.ok());
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(w1.Wait(w1.Push(*t, ones.data(), kSize), kWait).ok());
  std::vector<float> got(kSize);
  ASSERT_TRUE(w0.Wait(w0.Pull(*t, got.data(), kSize), kWait).ok());
  EXPECT_EQ(got[0], 1.0f);
  w0.Stop();
  w1.Stop();
  EXPECT_TRUE(second.Join(20s).ok());
  server.Stop();
}

// Without scheduler_recovery_ms a lost scheduler still ends every node at once; with it,
// a node gives up once scheduler_recovery_ms passed with no scheduler.
TEST_F(RecoveryTest, NoSchedulerWithinTheWindowEndsTheNodes) {
  Options base = Base();
  base.scheduler_recovery_ms = 3000;
  LocalCluster c(1, 1, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  KillScheduler(c);
  // The server gives up once heartbeat_timeout_ms and then scheduler_recovery_ms of the
  // clock passed without a scheduler.
  std::future<Status> join = std::async(std::launch::async, [&] { return c.server(0).Join(60s); });
  ASSERT_TRUE(AwaitTrue([&] { return join.wait_for(0ms) == std::future_status::ready; }));
  Status ended = join.get();
  EXPECT_EQ(ended.code(), StatusCode::kUnavailable) << ended;
  EXPECT_NE(ended.message().find("scheduler_recovery_ms=3000"), std::string::npos) << ended;
}

// A node dies while no scheduler runs (docs/recovery.md, "A node that dies during the
// outage"): with replication, server rank 1 is cut off after the scheduler; the restarted
// scheduler waits the rejoin window for it, declares it dead (its backup takes its
// ranges over) and nobody else: the nodes that rejoined kept sending Rejoins, not
// heartbeats, until the new map, and are not "silent". Every push then lands exactly.
TEST_F(RecoveryTest, AServerThatDiesDuringTheOutageIsTakenOverAndNobodyElseIsDeclaredDead) {
  Options base = Base();
  base.replication = true;
  LocalCluster c(3, 2, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  auto dense = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  auto sparse = c.worker(1).DeclareTable(TableSpec::Sparse("emb", 2));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<Key> ids;
  for (Key k = 1; k <= 32; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);
  const std::vector<float> ones(kSize, 1.0f), rows(ids.size() * 2, 1.0f);
  int pushes = 0;
  const auto push_all = [&] {
    c.OnEveryWorker([&](int r) {
      Worker& w = c.worker(r);
      Status d = w.Wait(w.Push(*dense, ones.data(), kSize), kWait);
      Status sp = w.Wait(w.PushSparse(*sparse, ids.data(), ids.size(), rows.data(), rows.size()), kWait);
      ASSERT_TRUE(d.ok()) << d;
      ASSERT_TRUE(sp.ok()) << sp;
    });
    ++pushes;
  };
  for (int i = 0; i < 3; ++i) push_all();
  ASSERT_FALSE(HasFatalFailure());
  int victim = -1;
  for (int i = 0; i < c.num_servers(); ++i) {
    if (c.server(i).rank() == 1) victim = i;
  }
  ASSERT_GE(victim, 0);

  KillScheduler(c);
  clock_->Advance(300);
  injector_->Isolate(c.server(victim).id());  // dies while no scheduler runs
  // Past heartbeat_timeout_ms: every live node noticed and sends Rejoins.
  clock_->Advance(2500);
  ASSERT_TRUE(c.RestartScheduler().ok());
  ASSERT_TRUE(AwaitRecovered(c.scheduler()));
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  // The live nodes heartbeat the new scheduler from its map on: none of them dies.
  for (int i = 0; i < 3; ++i) push_all();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  std::vector<float> got(kSize), pulled(rows.size());
  Worker& w = c.worker(0);
  ASSERT_TRUE(w.Wait(w.Pull(*dense, got.data(), kSize), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PullSparse(*sparse, ids.data(), ids.size(), pulled.data(), pulled.size()), kWait).ok());
  for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(got[i], 2.0f * pushes) << "element " << i;
  for (size_t i = 0; i < pulled.size(); ++i) ASSERT_EQ(pulled[i], 2.0f * pushes) << "row value " << i;
  Status job = c.Finish();
  EXPECT_TRUE(job.ok()) << job;
}

// The same for a worker under tolerate_worker_loss: worker rank 2 dies during the outage;
// the restarted scheduler declares it (and only it) dead, the two others go on training
// and the job ends OK.
TEST_F(RecoveryTest, AWorkerThatDiesDuringTheOutageIsToleratedAndNobodyElseIsDeclaredDead) {
  Options base = Base();
  base.tolerate_worker_loss = true;
  LocalCluster c(2, 3, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  auto dense = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(dense.ok());
  const std::vector<float> ones(kSize, 1.0f);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(c.worker(r).Wait(c.worker(r).Push(*dense, ones.data(), kSize), kWait).ok());
  }
  KillScheduler(c);
  clock_->Advance(300);
  injector_->Isolate(c.worker(2).id());
  clock_->Advance(2500);
  ASSERT_TRUE(c.RestartScheduler().ok());
  ASSERT_TRUE(AwaitRecovered(c.scheduler()));
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      Worker& w = c.worker(r);
      Status pushed = w.Wait(w.Push(*dense, ones.data(), kSize), kWait);
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
  }
  std::vector<float> got(kSize);
  Status pulled = c.worker(1).Wait(c.worker(1).Pull(*dense, got.data(), kSize), kWait);
  ASSERT_TRUE(pulled.ok()) << pulled;
  for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(got[i], 3.0f + 6.0f) << "element " << i;
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  Status job = c.Finish();
  EXPECT_TRUE(job.ok()) << job;
}

// A scheduler started without scheduler_recovery_ms forms a new cluster: rejoins of a
// running job's nodes (still waiting for a takeover on the same address) are refused and
// counted, never adopted, and the new job's own nodes register and run.
TEST_F(RecoveryTest, ASchedulerNotStartedForRecoveryRefusesRejoinsAndFormsItsOwnJob) {
  Options base = Base();
  base.scheduler_recovery_ms = 20000;
  LocalCluster c(1, 1, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  KillScheduler(c);
  clock_->Advance(2500);  // the old nodes send Rejoins
  Options fresh = c.options();
  fresh.scheduler_recovery_ms = 0;
  Scheduler second(fresh);
  ASSERT_TRUE(second.Start().ok());
  ASSERT_TRUE(AwaitTrue([&] { return second.stats().rejected_rejoins >= 2; }));
  Server server(fresh);
  Worker worker(fresh);
  std::future<Status> s = std::async(std::launch::async, [&] { return server.Start(); });
  Status started = worker.Start();
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(s.get().ok());
  EXPECT_EQ(second.stats().recoveries, 0u);
  auto t = worker.DeclareTable(TableSpec::Dense("mine", kSize));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(worker.Wait(worker.Push(*t, ones.data(), kSize), kWait).ok());
  worker.Stop();
  EXPECT_TRUE(second.Join(20s).ok());
  server.Stop();
}

// A scheduler started for recovery that already registers nodes of a new job refuses
// the rejoins of another job's nodes instead of taking that job over.
TEST_F(RecoveryTest, ASchedulerFormingAJobRefusesRejoinsOfAnother) {
  Options base = Base();
  base.scheduler_recovery_ms = 20000;
  std::atomic<bool> hold{true};  // outlives the cluster, whose nodes' sends read it
  LocalCluster c(1, 1, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  HoldRejoins(&hold);
  KillScheduler(c);
  clock_->Advance(2500);
  Options fresh = c.options();
  Scheduler second(fresh);
  ASSERT_TRUE(second.Start().ok());
  Server server(fresh);
  Worker worker(fresh);
  std::future<Status> s = std::async(std::launch::async, [&] { return server.Start(); });
  ASSERT_TRUE(AwaitTrue([&] {
    return second.MissingNodes().find("1 of 1 servers and 0 of 1 workers") != std::string::npos;
  })) << second.MissingNodes();
  hold = false;  // the old job's rejoins reach a scheduler forming its own job
  ASSERT_TRUE(AwaitTrue([&] { return second.stats().rejected_rejoins >= 2; }));
  Status started = worker.Start();
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(s.get().ok());
  EXPECT_EQ(second.stats().recoveries, 0u);
  worker.Stop();
  EXPECT_TRUE(second.Join(20s).ok());
  server.Stop();
}

}  // namespace
}  // namespace ps
