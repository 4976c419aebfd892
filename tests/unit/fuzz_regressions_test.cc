// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Regression tests for what the libFuzzer harnesses of tests/fuzz found (their inputs are
// kept in tests/fuzz/corpus/<harness>/regression-*).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status_wire.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"
#include "worker/ps_requests.h"
#include "worker/request_tracker.h"

namespace ps {
namespace {

TEST(StatusWireTest, APeerCannotReportTimeout) {
  EXPECT_EQ(StatusFromWire(static_cast<int>(StatusCode::kTimeout), "x").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromWire(static_cast<int>(StatusCode::kNotFound), "x").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(StatusFromWire(-3, "x").code(), StatusCode::kInternal);
  EXPECT_EQ(StatusFromWire(99, "x").code(), StatusCode::kInternal);
  EXPECT_TRUE(StatusFromWire(0, "x").ok());
}

// reply_fuzz: a server's error reply carrying the code kTimeout completed the request,
// and Wait then returned Timeout, which means "still in flight: wait again" (a second
// Wait found no such ticket).
TEST(ReplyPathTest, AnErrorReplySayingTimeoutDoesNotLookInFlight) {
  MemberOptions options;
  std::mutex mu;
  std::vector<std::pair<NodeId, Header>> sent;
  RequestTracker tracker(options, [&](NodeId to, Message&& m) {
    std::lock_guard<std::mutex> lock(mu);
    sent.emplace_back(to, m.header);
    return Status::OK();
  });
  tracker.Start();
  auto map = std::make_shared<ClusterMap>();
  NodeInfo server;
  server.id = 1;
  server.role = Role::kServer;
  server.alive = true;
  map->nodes.push_back(server);
  TableInfo t;
  t.id = 0;
  t.spec = TableSpec::Dense("d", 10);
  t.chunk_elems = 16;
  t.ranges = {{0, 1, 1}};
  map->tables[0] = t;
  PsRequests ps(&tracker, [&] { return std::shared_ptr<const ClusterMap>(map); });
  std::vector<float> out(10);
  const Ticket ticket = ps.Dense(MsgType::kPull, 0, nullptr, out.data(), out.size(), nullptr);
  std::pair<NodeId, Header> part;
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(sent.size(), 1u);
    part = sent[0];
  }
  Message reply;
  reply.header = part.second;
  reply.header.type = static_cast<uint16_t>(MsgType::kReply);
  reply.header.sender = part.first;
  reply.header.status = static_cast<int32_t>(StatusCode::kTimeout);
  tracker.OnReply(std::move(reply));
  Status s = tracker.Wait(ticket, std::chrono::milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s;
  tracker.Stop(Aborted("done"));
}

// request_fuzz: an assign of 0 elements with an empty values frame reached
// memcpy(dst, nullptr, 0) in Store::ApplyDense (undefined behaviour; UBSan stops on it).
TEST(RequestPathTest, AnEmptyDenseUpdateAppliesNothing) {
  Store store(1);
  TableInfo t;
  t.id = 0;
  t.spec = TableSpec::Dense("d", 100);
  t.chunk_elems = 256;
  t.ranges = {{0, 1, 1}};
  ASSERT_TRUE(store.Install(t).ok());
  for (MsgType type : {MsgType::kAssign, MsgType::kPush, MsgType::kPushPull}) {
    Message msg;
    msg.header.type = static_cast<uint16_t>(type);
    msg.header.table = 0;
    msg.header.offset = 5;
    msg.header.count = 0;
    msg.frames.push_back(Frame::Copy(nullptr, 0));
    DataRequest req;
    ASSERT_TRUE(CheckRequest(std::move(msg), store, 1, 1 << 20, &req).ok());
    Status replied;
    NewApplyOnArrival()->Handle(
        std::move(req), store,
        [&](const Header&, const Status& s, std::vector<Frame>) { replied = s; });
    EXPECT_TRUE(replied.ok()) << replied;
  }
  EXPECT_TRUE(store.ApplyDense(0, 100, 0, nullptr, ApplyOp::kAssign).ok());
  std::vector<float> out(100, -1.0f);
  ASSERT_TRUE(store.ReadDense(0, 0, 100, out.data()).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// request_fuzz: a replicate ack (wire type 9, no frames) with the fused flag and a huge
// count passed the frame checks and made the request check allocate 3 GiB of segments.
// Only the four request types are requests.
TEST(RequestPathTest, OnlyRequestTypesAreRequests) {
  Store store(1);
  for (MsgType type : {MsgType::kReplicateAck, MsgType::kReplicate, MsgType::kReply,
                       MsgType::kPeerTensor, MsgType::kControl}) {
    Message msg;
    msg.header.type = static_cast<uint16_t>(type);
    msg.header.flags = kFlagFused;
    msg.header.count = uint64_t{1} << 27;
    DataRequest req;
    Status s = CheckRequest(std::move(msg), store, 1, 1 << 20, &req);
    EXPECT_EQ(s.code(), StatusCode::kProtocolError) << MsgTypeName(type);
    EXPECT_NE(s.message().find("is not a request"), std::string::npos) << s;
    EXPECT_TRUE(req.segments.empty());
  }
}

}  // namespace
}  // namespace ps
