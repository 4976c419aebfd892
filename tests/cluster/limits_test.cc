// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What one received message may be (issue 13): at most kMaxFrames payload frames (plus
// the routing id, a shared-memory manifest and the header), and at most
// max_message_bytes for the header and the payload frames together, however the parts
// are cut. A message past either bound is consumed, released part by part as it is read,
// refused and counted; the node keeps working. Raw ZeroMQ DEALER sockets play the peer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "local_cluster.h"
#include "transport/message.h"
#include "transport/transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;

std::string HeaderBytes(MsgType type, uint64_t count, uint32_t dim, uint32_t flags) {
  Header h;
  h.type = static_cast<uint16_t>(type);
  h.count = count;
  h.dim = dim;
  h.flags = flags;
  h.table = 0;
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

void SendParts(zmq::socket_t& s, const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    s.send(zmq::buffer(parts[i]),
           i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

// Receives until something other than a timeout comes (at most 10 s).
Status RecvOne(Transport& t, Message* msg) {
  for (int i = 0; i < 100; ++i) {
    Status s = t.Recv(msg, 100);
    if (s.code() != StatusCode::kTimeout) return s;
  }
  return Timeout("nothing arrived in 10 s");
}

class TransportLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions o;
    o.max_message_bytes = 64 << 10;
    o.shared_memory = false;
    transport_ = NewZmqTransport(o);
    auto ep = transport_->Bind("tcp://127.0.0.1:0", "");
    ASSERT_TRUE(ep.ok()) << ep.status();
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.connect(*ep);
  }
  void TearDown() override { transport_->Close(); }

  // A well-formed sparse push of `n` keys of width `dim`: its two frames hold 8n and
  // 4n*dim bytes.
  std::vector<std::string> SparsePush(uint64_t n, uint32_t dim) {
    return {HeaderBytes(MsgType::kPush, n, dim, kFlagSparse), std::string(n * 8, 'k'),
            std::string(n * dim * 4, 'v')};
  }

  zmq::context_t ctx_;
  zmq::socket_t dealer_{ctx_, zmq::socket_type::dealer};
  std::unique_ptr<Transport> transport_;
};

TEST_F(TransportLimitsTest, AMessageWithinTheLimitsArrives) {
  SendParts(dealer_, SparsePush(1000, 4));  // 8 000 + 16 000 + 64 bytes
  Message m;
  ASSERT_TRUE(RecvOne(*transport_, &m).ok());
  ASSERT_EQ(m.frames.size(), 2u);
  EXPECT_EQ(m.frames[1].size(), 16000u);
  EXPECT_TRUE(ValidateDataFrames(m, 1u << 20).ok());
}

// Every part is below the socket's part limit, but together they pass max_message_bytes:
// a well-formed sparse push of 56 000 + 56 000 bytes. Refused, then the next one is fine.
TEST_F(TransportLimitsTest, PartsSummingPastTheLimitAreRefused) {
  SendParts(dealer_, SparsePush(7000, 2));
  SendParts(dealer_, SparsePush(10, 2));
  Message m;
  Status s = RecvOne(*transport_, &m);
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s;
  EXPECT_NE(s.message().find("max_message_bytes"), std::string::npos) << s;
  ASSERT_TRUE(RecvOne(*transport_, &m).ok());
  EXPECT_EQ(m.header.count, 10u);
}

// Exactly at the limit (header included) is accepted; one byte more is not.
TEST_F(TransportLimitsTest, TheLimitCountsTheHeaderAndEveryFrame) {
  const size_t payload = (64 << 10) - sizeof(Header);
  SendParts(dealer_,
            {HeaderBytes(MsgType::kPeerTensor, payload / 4, 0, 0), std::string(payload, 'x')});
  SendParts(dealer_, {HeaderBytes(MsgType::kPeerTensor, payload / 4, 0, 0), std::string(10, 'x'),
                      std::string(payload - 9, 'x')});
  Message m;
  ASSERT_TRUE(RecvOne(*transport_, &m).ok());
  EXPECT_EQ(m.frames[0].size(), payload);
  EXPECT_EQ(RecvOne(*transport_, &m).code(), StatusCode::kProtocolError);
}

// Thousands of tiny parts: refused as one bad message, never kept.
TEST_F(TransportLimitsTest, AMessageOfManyPartsIsRefused) {
  std::vector<std::string> parts(20000, std::string(3, 'p'));
  parts[0] = HeaderBytes(MsgType::kPull, 0, 0, 0);
  SendParts(dealer_, parts);
  SendParts(dealer_, {HeaderBytes(MsgType::kPull, 0, 0, 0)});
  Message m;
  Status s = RecvOne(*transport_, &m);
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s;
  EXPECT_NE(s.message().find("20001 parts"), std::string::npos) << s;
  ASSERT_TRUE(RecvOne(*transport_, &m).ok());
  EXPECT_EQ(m.header.msg_type(), MsgType::kPull);
  EXPECT_TRUE(m.frames.empty());
}

// Payload frames are read in place as arrays of u64 keys and floats: whatever offset
// ZeroMQ received a part at, the frame handed over starts on an 8-byte boundary (the
// sanitizer build reported misaligned key and value loads on the server before).
TEST_F(TransportLimitsTest, PayloadFramesArriveAligned) {
  for (int round = 0; round < 20; ++round) {
    // Parts of 33 bytes or more are carved out of ZeroMQ's receive buffer.
    SendParts(dealer_, {HeaderBytes(MsgType::kPush, 3, 1, kFlagSparse),
                        std::string(41 + round, 'a'), std::string(48, 'k'), std::string(36, 'v')});
  }
  for (int round = 0; round < 20; ++round) {
    Message m;
    ASSERT_TRUE(RecvOne(*transport_, &m).ok());
    ASSERT_EQ(m.frames.size(), 3u);
    for (const Frame& f : m.frames) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % 8, 0u) << "round " << round;
    }
    EXPECT_EQ(m.frames[0].size(), static_cast<size_t>(41 + round));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.frames[1].data()), 48),
              std::string(48, 'k'));
  }
}

// A manifest part (before the header) bigger than any manifest can be is refused too.
TEST_F(TransportLimitsTest, AnOversizedManifestPartIsRefused) {
  SendParts(dealer_, {std::string(4000, 'm'), HeaderBytes(MsgType::kPull, 0, 0, 0)});
  Message m;
  EXPECT_EQ(RecvOne(*transport_, &m).code(), StatusCode::kProtocolError);
}

// The same from outside a running cluster: a stranger's DEALER sends a server and the
// scheduler messages of too many parts and of parts summing past their limits. Each is
// one bad message; the nodes stay up and the cluster keeps working.
TEST(StrangerLimitsTest, ServerAndSchedulerCountOversizedMessagesAndKeepWorking) {
  Options o = testing::FastOptions();
  o.max_message_bytes = 256 << 10;
  o.scheduler_max_message_bytes = 16 << 10;
  testing::LocalCluster c(1, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto d = w.DeclareTable(TableSpec::Dense("d", 1000));
  ASSERT_TRUE(d.ok()) << d.status();

  zmq::context_t ctx;
  zmq::socket_t to_server(ctx, zmq::socket_type::dealer);
  to_server.set(zmq::sockopt::linger, 0);
  to_server.connect(c.server(0).endpoint());
  zmq::socket_t to_scheduler(ctx, zmq::socket_type::dealer);
  to_scheduler.set(zmq::sockopt::linger, 0);
  to_scheduler.connect(c.scheduler().address());

  const uint64_t server_before = c.server(0).stats().bad_messages;
  const uint64_t scheduler_before = c.scheduler().stats().bad_messages;
  // To the server: 5 000 parts; then 4 parts of 200 KiB (each below the 256 KiB limit).
  std::vector<std::string> many(5000, "x");
  many[0] = HeaderBytes(MsgType::kPush, 1, 0, 0);
  SendParts(to_server, many);
  std::vector<std::string> big(4, std::string(200 << 10, 'b'));
  big[0] = HeaderBytes(MsgType::kPush, 1, 0, 0);
  SendParts(to_server, big);
  // To the scheduler: 5 000 parts; then 3 parts of 12 KiB (each below its 16 KiB limit).
  many[0] = HeaderBytes(MsgType::kControl, 0, 0, 0);
  SendParts(to_scheduler, many);
  std::vector<std::string> ctl(3, std::string(12 << 10, 'c'));
  ctl[0] = HeaderBytes(MsgType::kControl, 0, 0, 0);
  SendParts(to_scheduler, ctl);

  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline &&
         (c.server(0).stats().bad_messages < server_before + 2 ||
          c.scheduler().stats().bad_messages < scheduler_before + 2)) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(c.server(0).stats().bad_messages, server_before + 2);
  EXPECT_EQ(c.scheduler().stats().bad_messages, scheduler_before + 2);

  std::vector<float> g(1000, 0.5f), out(1000);
  ASSERT_TRUE(w.Wait(w.Push(*d, g.data(), g.size()), 30s).ok());
  ASSERT_TRUE(w.Wait(w.Pull(*d, out.data(), out.size()), 30s).ok());
  for (float v : out) ASSERT_EQ(v, 0.5f);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps
