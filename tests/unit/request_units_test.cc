// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The units of RequestTracker (worker/request_tracker.h), each alone: the ticket table and
// its waits, the completion thread, and the failover of a dead server's parts.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "worker/completion_thread.h"
#include "worker/request_table.h"
#include "worker/request_tracker.h"
#include "worker/server_failover.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Request> NewRequest(Ticket t, MsgType type) {
  auto req = std::make_shared<Request>();
  req->ticket = t;
  req->type = type;
  return req;
}

void Complete(const std::shared_ptr<Request>& req, const Status& s) {
  MutexLock lock(&req->mu);
  req->status = s;
  req->done = true;
  req->cv.SignalAll();
}

TEST(RequestTableTest, AddFindEraseAndSnapshot) {
  RequestTable table;
  table.Add(NewRequest(1, MsgType::kPush));
  table.Add(NewRequest(2, MsgType::kPeerTensor));
  table.Add(NewRequest(3, MsgType::kPull));
  EXPECT_EQ(table.size(), 3u);
  ASSERT_NE(table.Find(2), nullptr);
  EXPECT_EQ(table.Find(2)->type, MsgType::kPeerTensor);
  EXPECT_EQ(table.Find(7), nullptr);
  EXPECT_EQ(table.Snapshot().size(), 3u);
  EXPECT_EQ(table.Snapshot([](const Request& r) { return r.type == MsgType::kPeerTensor; }).size(), 1u);
  table.Erase(2);
  EXPECT_EQ(table.Find(2), nullptr);
  EXPECT_EQ(table.size(), 2u);
}

TEST(RequestTableTest, WaitGivesTheStatusOnceDoneAndForgetsTheTicket) {
  RequestTable table;
  auto req = NewRequest(5, MsgType::kPull);
  table.Add(req);
  bool in_flight = false;
  Status s = table.Wait(5, milliseconds(1), &in_flight);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_TRUE(in_flight);
  EXPECT_NE(table.Find(5), nullptr);  // still there for a later Wait
  std::thread completer([&] { Complete(req, Unavailable("gone")); });
  s = table.Wait(5, milliseconds(60000), &in_flight);
  completer.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_FALSE(in_flight);  // the request's own failure, not "still in flight"
  EXPECT_EQ(table.Find(5), nullptr);
  EXPECT_EQ(table.Wait(5, milliseconds(1)).code(), StatusCode::kNotFound);
}

TEST(RequestTableTest, FlushWaitsForTableRequestsOnly) {
  RequestTable table;
  auto push = NewRequest(1, MsgType::kPush);
  auto peer = NewRequest(2, MsgType::kPeerTensor);  // never completes: not flushed
  table.Add(push);
  table.Add(peer);
  Status s = table.Flush(milliseconds(1));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_NE(s.message().find("1 of 1 requests"), std::string::npos) << s;
  Complete(push, Status::OK());
  EXPECT_TRUE(table.Flush(milliseconds(1)).ok());
  EXPECT_NE(table.Find(1), nullptr);  // flushed, still there for its Wait
}

TEST(CompletionThreadTest, RunsTasksInOrderOnItsOwnThread) {
  CompletionThread ct;
  EXPECT_FALSE(ct.Post([] {}));  // not started: the caller runs it
  ct.Start();
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(ct.Post([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }));
  }
  ct.Stop();  // runs what is queued first
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : threads) EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_FALSE(ct.Post([] {}));  // stopped
  ct.Start();                     // and started again
  bool ran = false;
  EXPECT_TRUE(ct.Post([&] { ran = true; }));
  ct.Stop();
  EXPECT_TRUE(ran);
}

TEST(ServerFailoverTest, AParkedServerHoldsItsPartsUntilRetargeted) {
  ServerFailover f;
  EXPECT_FALSE(f.retain());
  f.SetRetain(true);
  EXPECT_TRUE(f.retain());
  const auto route = [&f](NodeId s) {
    std::pair<NodeId, bool> r;
    f.Route(s, [&](NodeId to, bool held) { r = {to, held}; });
    return r;
  };
  EXPECT_EQ(route(5), std::make_pair(NodeId{5}, false));
  f.Park(5, 1, kUnassignedId);
  EXPECT_TRUE(f.IsParked(5));
  EXPECT_EQ(f.Parked().at(5).rank, 1u);
  EXPECT_EQ(f.Parked().at(5).successor, kUnassignedId);
  EXPECT_EQ(route(5), std::make_pair(NodeId{5}, true));
  int collected = 0;
  f.Retarget(5, 9, [&] {
    ++collected;
    // Under the lock, the maps already say so.
  });
  EXPECT_EQ(collected, 1);
  EXPECT_FALSE(f.IsParked(5));
  EXPECT_EQ(route(5), std::make_pair(NodeId{9}, false));  // a part built from an older map
  EXPECT_EQ(route(7), std::make_pair(NodeId{7}, false));
}

TEST(ServerFailoverTest, AReplacementThatDiesInTurnIsReplacedForEveryOlderName) {
  ServerFailover f;
  f.Park(5, 0, 6);
  EXPECT_EQ(f.Parked().at(5).successor, 6u);
  f.Retarget(5, 9, nullptr);
  f.Park(9, 0, kUnassignedId);
  f.Retarget(9, 12, nullptr);
  for (NodeId old : {NodeId{5}, NodeId{9}}) {
    NodeId to = 0;
    f.Route(old, [&](NodeId s, bool) { to = s; });
    EXPECT_EQ(to, 12u) << "from node " << old;
  }
  EXPECT_TRUE(f.Parked().empty());
}

// A server is replaced while a request is being submitted: the retarget comes after the
// request is tracked and before Submit has routed its part for the dead server. That
// part goes to the replacement once, with its payload (it was once sent a second time by
// the retarget, with no frames: "missing values frame", then a reply for no part).
TEST(RequestTrackerFailoverTest, ARetargetDuringSubmitSendsThePartOnceWithItsPayload) {
  MemberOptions options;
  std::mutex mu;
  std::vector<std::pair<NodeId, size_t>> sent;  // (to, frames)
  RequestTracker tracker(options, [&](NodeId to, Message&& m) {
    std::lock_guard<std::mutex> lock(mu);
    sent.emplace_back(to, m.frames.size());
    return Status::OK();
  });
  tracker.Start();
  tracker.SetRetain(true);
  auto req = std::make_shared<Request>();
  req->type = MsgType::kPush;
  req->table = 0;
  req->parts.resize(2);
  req->parts[0].server = 2;
  req->parts[1].server = 3;  // dies
  for (Part& p : req->parts) {
    p.table = 0;
    p.count = 4;
  }
  const std::vector<float> values(4, 1.0f);
  const Ticket ticket = tracker.Submit(req, 1, false, [&](size_t i, const std::shared_ptr<const void>&) {
    if (i == 0) {
      tracker.Park(3, 1, 4);
      tracker.Retarget(3, 4, 1);
    }
    return std::vector<Frame>{Frame::Copy(values.data(), values.size() * sizeof(float))};
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0], std::make_pair(NodeId{2}, size_t{1}));
    EXPECT_EQ(sent[1], std::make_pair(NodeId{4}, size_t{1}));
  }
  tracker.Cancel(ticket, Aborted("done"));
  tracker.Stop(Aborted("done"));
}

}  // namespace
}  // namespace ps
