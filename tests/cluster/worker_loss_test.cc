// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Issue 13, defect 4: the death of a worker ends a synchronous job at once (every node's
// pending and later requests and barriers fail with kUnavailable naming the worker and
// the option), unless the job tolerates worker loss (asynchronous training), when the
// others train on and the job succeeds. The death is a worker cut off by the fault
// injector: the scheduler declares it dead at the heartbeat timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

// The nodes' heartbeats run on `clock` (a test advances it to have a death declared).
Options LossOptions(const std::shared_ptr<FaultInjector>& injector, bool tolerate,
                    std::shared_ptr<ManualClock>* clock) {
  Options o = testing::FastOptions();
  *clock = testing::UseManualClock(&o);
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  o.request_timeout_ms = 60000;  // far beyond: failures must come from the death
  o.tolerate_worker_loss = tolerate;
  SetTransportFactory(&o, injector);
  return o;
}

void ExpectWorkerLoss(const Status& s, const char* what) {
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << what << ": " << s;
  EXPECT_NE(s.message().find("died"), std::string::npos) << what << ": " << s;
  EXPECT_NE(s.message().find("tolerate_worker_loss"), std::string::npos) << what << ": " << s;
}

TEST(WorkerLossTest, ADeadWorkerEndsASynchronousJob) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  std::shared_ptr<ManualClock> clock;
  LocalCluster c(1, 3, "inproc", LossOptions(injector, /*tolerate=*/false, &clock));
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  auto d = w0.DeclareTable(TableSpec::Dense("d", 100));
  ASSERT_TRUE(d.ok()) << d.status();
  // A pull of worker 0 stays pending: its replies are held back.
  const NodeId w0_id = w0.id();
  injector->AddRule({[w0_id](NodeId peer, const Message& m) {
                       return peer == w0_id && m.header.msg_type() == MsgType::kReply;
                     },
                     FaultAction::kDrop});
  std::vector<float> out(100);
  Ticket pending = w0.Pull(*d, out.data(), out.size());
  // Worker 1 waits in a barrier of the workers.
  Status barrier;
  std::thread waiter([&] { barrier = w1.Barrier(Group::kWorkers, milliseconds(30000)); });
  injector->Isolate(c.worker(2).id());
  // The heartbeat timeout passes: the scheduler declares worker 2 dead (the requests'
  // own deadline, 60 s, is far off).
  ASSERT_TRUE(testing::AdvanceUntil(*clock, [&] { return c.scheduler().stats().dead_nodes >= 1; }));

  ExpectWorkerLoss(w0.Wait(pending, milliseconds(20000)), "the pending pull");
  waiter.join();
  EXPECT_EQ(barrier.code(), StatusCode::kUnavailable) << barrier;
  // Later requests, barriers and declares fail the same way (and need no more time).
  std::vector<float> g(100, 1.0f);
  ExpectWorkerLoss(w1.Wait(w1.Push(*d, g.data(), g.size()), milliseconds(20000)), "a later push");
  ExpectWorkerLoss(w1.Barrier(Group::kWorkers, milliseconds(20000)), "a later barrier");
  ExpectWorkerLoss(w1.DeclareTable(TableSpec::Dense("e", 10)).status(), "a later declare");
  // The job failed: the scheduler and the server say so.
  ExpectWorkerLoss(c.scheduler().Join(milliseconds(5000)), "the scheduler");
  EXPECT_FALSE(c.server(0).Join(milliseconds(5000)).ok());
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
}

TEST(WorkerLossTest, ATolerantJobTrainsOnAndSucceeds) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  std::shared_ptr<ManualClock> clock;
  LocalCluster c(1, 3, "inproc", LossOptions(injector, /*tolerate=*/true, &clock));
  ASSERT_TRUE(c.Start().ok());
  auto d = c.worker(0).DeclareTable(TableSpec::Dense("d", 100));
  ASSERT_TRUE(d.ok()) << d.status();
  injector->Isolate(c.worker(2).id());
  ASSERT_TRUE(testing::AdvanceUntil(*clock, [&] { return c.scheduler().stats().dead_nodes >= 1; }));
  ASSERT_EQ(c.scheduler().stats().dead_nodes, 1u);
  std::vector<float> g(100, 1.0f), out(100);
  std::vector<Status> barrier(2);
  c.OnEveryWorker([&](int r) {
    if (r == 2) return;
    Worker& w = c.worker(r);
    ASSERT_TRUE(w.Wait(w.Push(*d, g.data(), g.size()), milliseconds(20000)).ok());
    barrier[r] = w.Barrier(Group::kWorkers, milliseconds(20000));
  });
  EXPECT_TRUE(barrier[0].ok()) << barrier[0];
  EXPECT_TRUE(barrier[1].ok()) << barrier[1];
  ASSERT_TRUE(
      c.worker(0).Wait(c.worker(0).Pull(*d, out.data(), out.size()), milliseconds(20000)).ok());
  for (float v : out) ASSERT_EQ(v, 2.0f);
  // Receives from the dead worker still fail.
  std::vector<float> got(4);
  Status recv =
      c.worker(0).Wait(c.worker(0).communicator().RecvFrom(2, 1, got.data(), got.size()), milliseconds(20000));
  EXPECT_EQ(recv.code(), StatusCode::kUnavailable) << recv;
  // Workers 0 and 1 finish: the job succeeds.
  c.worker(0).Stop();
  c.worker(1).Stop();
  Status done = c.scheduler().Join(milliseconds(20000));
  EXPECT_TRUE(done.ok()) << done;
}

}  // namespace
}  // namespace ps
