// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Faults injected between the nodes of an in-process cluster (transport/fault_transport.h
// over transport/inproc_transport.h): a lost reply, late heartbeats, a duplicated
// request, reordered requests, a server cut off in the middle of a request. Each test
// checks the exact outcome: which status the request ends with, and what the tables hold.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

class FaultTest : public ::testing::Test {
 protected:
  Options Base(int request_timeout_ms = 60000) {
    injector_ = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
    Options o = testing::FastOptions();
    o.heartbeat_interval_ms = 50;
    o.heartbeat_timeout_ms = 1000;
    o.request_timeout_ms = request_timeout_ms;
    o.dense_chunk_elems = 4;  // tiny tables still spread over every server
    SetTransportFactory(&o, injector_);
    return o;
  }

  static bool IsType(const Message& m, MsgType t) { return m.header.msg_type() == t; }

  std::shared_ptr<FaultInjector> injector_;
};

TEST_F(FaultTest, InProcessTransportCarriesAWholeCluster) {
  LocalCluster c(2, 2, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  auto table = c.worker(0).DeclareTable(TableSpec::Dense("w", 10));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(c.worker(1).DeclareTable(TableSpec::Dense("w", 10)).ok());
  std::vector<float> g(10);
  for (int i = 0; i < 10; ++i) g[i] = static_cast<float>(i);
  c.OnEveryWorker([&](int r) {
    EXPECT_TRUE(c.worker(r).Wait(c.worker(r).Push(*table, g.data(), 10), milliseconds(5000)).ok());
  });
  std::vector<float> out(10);
  ASSERT_TRUE(c.worker(0).Wait(c.worker(0).Pull(*table, out.data(), 10), milliseconds(5000)).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], 2.0f * i);
  EXPECT_TRUE(c.Finish().ok());
}

// The server applied the push but its answer was lost: the request ends Unavailable at
// its deadline, and the update stays applied (a retry would apply it again).
TEST_F(FaultTest, DroppedReplyEndsTheRequestUnavailableAtItsDeadline) {
  // 1.5 s: the deadline also bounds the declare, the pull and the Finish around the
  // dropped reply, which a loaded machine may take a while over.
  LocalCluster c(1, 1, "inproc", Base(/*request_timeout_ms=*/1500));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto table = w.DeclareTable(TableSpec::Dense("w", 3));
  ASSERT_TRUE(table.ok());
  const int rule = injector_->AddRule(
      {[](NodeId, const Message& m) { return IsType(m, MsgType::kReply); }, FaultAction::kDrop});
  const std::vector<float> g = {1, 2, 3};
  const auto start = std::chrono::steady_clock::now();
  Status s = w.Wait(w.Push(*table, g.data(), 3), milliseconds(30000));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("no reply"), std::string::npos) << s;
  EXPECT_GE(took, milliseconds(1500));
  EXPECT_EQ(injector_->Applied(rule), 1);
  injector_->RemoveRule(rule);
  std::vector<float> out(3);
  ASSERT_TRUE(w.Wait(w.Pull(*table, out.data(), 3), milliseconds(5000)).ok());
  EXPECT_EQ(out, g);  // applied once, although its requester was told nothing
  EXPECT_TRUE(c.Finish().ok());
}

// Heartbeats late by less than the timeout change nothing; late by more, the server is
// declared dead and requests for its ranges fail Unavailable.
TEST_F(FaultTest, DelayedHeartbeatsBeyondTheTimeoutMakeAServerDead) {
  LocalCluster c(2, 1, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto table = w.DeclareTable(TableSpec::Dense("w", 8));  // two chunks: one per server
  ASSERT_TRUE(table.ok());
  const NodeId victim = c.server(1).id();
  auto from_victim = [victim](NodeId peer, const Message& m) {
    return peer == kSchedulerId && m.header.sender == victim && IsType(m, MsgType::kControl);
  };
  int rule = injector_->AddRule({from_victim, FaultAction::kDelay, /*delay_ms=*/200});
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 0u);
  const std::vector<float> g(8, 1.0f);
  EXPECT_TRUE(w.Wait(w.Push(*table, g.data(), 8), milliseconds(5000)).ok());
  EXPECT_GT(injector_->Applied(rule), 0);
  injector_->RemoveRule(rule);

  rule = injector_->AddRule({from_victim, FaultAction::kDelay, /*delay_ms=*/5000});
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
  while (c.scheduler().stats().dead_nodes == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  // The worker learns of the death from the scheduler's notice, which may still be on its
  // way (slow machines, sanitizer builds): push once the worker knows.
  auto worker_knows = [&] {
    for (const NodeInfo& n : w.Nodes()) {
      if (n.id == victim) return !n.alive;
    }
    return false;
  };
  const auto known_by = std::chrono::steady_clock::now() + milliseconds(10000);
  while (!worker_knows() && std::chrono::steady_clock::now() < known_by)
    std::this_thread::sleep_for(milliseconds(20));
  Status s = w.Wait(w.Push(*table, g.data(), 8), milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
}

// A pull delivered twice is answered twice: the request completes once with the right
// values, and the second answer is dropped by the worker as a stray.
TEST_F(FaultTest, DuplicatedPullCompletesOnceAndTheExtraReplyIsDropped) {
  LocalCluster c(1, 1, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto table = w.DeclareTable(TableSpec::Dense("w", 4));
  ASSERT_TRUE(table.ok());
  const std::vector<float> g = {1, 2, 3, 4};
  ASSERT_TRUE(w.Wait(w.Assign(*table, g.data(), 4), milliseconds(5000)).ok());
  const uint64_t bad_before = w.stats().bad_messages;
  const int rule =
      injector_->AddRule({[](NodeId, const Message& m) { return IsType(m, MsgType::kPull); },
                          FaultAction::kDuplicate, 0, /*times=*/1});
  std::vector<float> out(4);
  ASSERT_TRUE(w.Wait(w.Pull(*table, out.data(), 4), milliseconds(5000)).ok());
  EXPECT_EQ(out, g);
  EXPECT_EQ(injector_->Applied(rule), 1);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (w.stats().bad_messages == bad_before && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(w.stats().bad_messages, bad_before + 1);
  EXPECT_EQ(c.server(0).stats().pull_requests, 2u);
  EXPECT_TRUE(c.Finish().ok());
}

// Requests overtaking each other still complete, each matched to its own reply.
TEST_F(FaultTest, ReorderedRequestsCompleteWithTheirOwnReplies) {
  LocalCluster c(1, 1, "inproc", Base());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto a = w.DeclareTable(TableSpec::Dense("a", 2));
  auto b = w.DeclareTable(TableSpec::Dense("b", 3));
  ASSERT_TRUE(a.ok() && b.ok());
  const int rule =
      injector_->AddRule({[](NodeId, const Message& m) { return IsType(m, MsgType::kAssign); },
                          FaultAction::kReorder, 0, /*times=*/1});
  const std::vector<float> va = {5, 6}, vb = {7, 8, 9};
  Ticket ta = w.Assign(*a, va.data(), 2);  // held back...
  Ticket tb = w.Assign(*b, vb.data(), 3);  // ...until this one went
  EXPECT_TRUE(w.Wait(tb, milliseconds(5000)).ok());
  EXPECT_TRUE(w.Wait(ta, milliseconds(5000)).ok());
  EXPECT_EQ(injector_->Applied(rule), 1);
  std::vector<float> oa(2), ob(3);
  ASSERT_TRUE(w.Wait(w.Pull(*a, oa.data(), 2), milliseconds(5000)).ok());
  ASSERT_TRUE(w.Wait(w.Pull(*b, ob.data(), 3), milliseconds(5000)).ok());
  EXPECT_EQ(oa, va);
  EXPECT_EQ(ob, vb);
  EXPECT_EQ(w.stats().bad_messages, 0u);
  EXPECT_TRUE(c.Finish().ok());
}

// A server cut off while a request waits for it: the request fails Unavailable once the
// scheduler declares the server dead, well before the request's own deadline.
TEST_F(FaultTest, ServerCutOffMidRequestFailsItWithinTheHeartbeatTimeout) {
  LocalCluster c(2, 1, "inproc", Base(/*request_timeout_ms=*/60000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto table = w.DeclareTable(TableSpec::Dense("w", 8));
  ASSERT_TRUE(table.ok());
  const NodeId victim = c.server(1).id();
  // The pull reaches the victim, which is then cut off before it answers.
  injector_->AddRule({[victim](NodeId, const Message& m) {
                        return m.header.sender == victim && IsType(m, MsgType::kReply);
                      },
                      FaultAction::kDrop});
  std::vector<float> out(8);
  const auto start = std::chrono::steady_clock::now();
  Ticket t = w.Pull(*table, out.data(), 8);
  injector_->Isolate(victim);
  Status s = w.Wait(t, milliseconds(20000));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_LT(took, milliseconds(15000));  // the heartbeat timeout, not the 60 s deadline
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
}

// connect_timeout_ms bounds Start when the scheduler never answers: the Register still
// queued for it is dropped, not lingered on (closing used to add 2 s to the timeout).
TEST(ConnectTimeoutTest, StartWithNoSchedulerEndsAtItsTimeout) {
  Options o = testing::FastOptions();
  o.scheduler_address = "tcp://127.0.0.1:1";  // nothing listens on port 1
  o.connect_timeout_ms = 500;
  Worker w(o);
  const auto start = std::chrono::steady_clock::now();
  Status s = w.Start();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_GE(took, milliseconds(500));
  // The regression added a 2 s linger (took >= 2500 ms); below that, a loaded machine's
  // slack is no failure.
  EXPECT_LT(took, milliseconds(2400)) << "Start overran connect_timeout_ms by "
                                      << (took - milliseconds(500)).count() / 1000000 << " ms";
}

}  // namespace
}  // namespace ps
