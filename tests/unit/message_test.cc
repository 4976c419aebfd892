// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "layerps.pb.h"

#include "ps/element_types.h"

namespace ps {
namespace {

Message DenseMessage(MsgType t, uint64_t count, size_t frame_bytes) {
  Message m;
  m.header.type = static_cast<uint16_t>(t);
  m.header.count = count;
  std::vector<char> bytes(frame_bytes);
  m.frames.push_back(Frame::Adopt(std::move(bytes)));
  return m;
}

TEST(MessageTest, HeaderRoundTrip) {
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.count = 42;
  Header out;
  ASSERT_TRUE(ParseHeader(&h, sizeof(h), &out).ok());
  EXPECT_EQ(out.count, 42u);
  EXPECT_EQ(out.msg_type(), MsgType::kPush);
}

TEST(MessageTest, HeaderRejectsGarbage) {
  Header h;
  Header out;
  EXPECT_EQ(ParseHeader(&h, 10, &out).code(), StatusCode::kProtocolError);
  h.magic = 1;
  EXPECT_EQ(ParseHeader(&h, sizeof(h), &out).code(), StatusCode::kProtocolError);
  h = Header();
  h.version = kProtocolVersion + 1;
  EXPECT_NE(ParseHeader(&h, sizeof(h), &out).message().find("version"), std::string::npos);
  h = Header();
  h.type = 99;
  EXPECT_FALSE(ParseHeader(&h, sizeof(h), &out).ok());
  // Random bytes never parse as a header with the right magic by accident here.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    char buf[64];
    for (auto& c : buf) c = static_cast<char>(rng());
    Header r;
    EXPECT_FALSE(ParseHeader(buf, sizeof(buf), &r).ok());
  }
}

TEST(MessageTest, ValidateDenseFrames) {
  EXPECT_TRUE(ValidateDataFrames(DenseMessage(MsgType::kPush, 4, 16), 1 << 20).ok());
  EXPECT_FALSE(ValidateDataFrames(DenseMessage(MsgType::kPush, 4, 15), 1 << 20).ok());
  EXPECT_FALSE(ValidateDataFrames(DenseMessage(MsgType::kPush, 4, 16), 3).ok());  // over the limit
  Message pull;
  pull.header.type = static_cast<uint16_t>(MsgType::kPull);
  pull.header.count = 100;
  EXPECT_TRUE(ValidateDataFrames(pull, 1 << 20).ok());
  pull.frames.push_back(Frame::Copy("x", 1));
  EXPECT_FALSE(ValidateDataFrames(pull, 1 << 20).ok());
}

// A peer tensor's dim names its element type (a DataType); its frame holds count of them.
TEST(MessageTest, ValidateTypedPeerTensors) {
  Message f64 = DenseMessage(MsgType::kPeerTensor, 3, 24);
  f64.header.dim = static_cast<uint32_t>(DataType::kFloat64);
  EXPECT_TRUE(ValidateDataFrames(f64, 1 << 20).ok());
  Message u8 = DenseMessage(MsgType::kPeerTensor, 5, 5);
  u8.header.dim = static_cast<uint32_t>(DataType::kUInt8);
  EXPECT_TRUE(ValidateDataFrames(u8, 1 << 20).ok());
  Message wrong_size = f64;
  wrong_size.header.count = 4;
  EXPECT_EQ(ValidateDataFrames(wrong_size, 1 << 20).code(), StatusCode::kProtocolError);
  Message unknown = f64;
  unknown.header.dim = 7;
  EXPECT_EQ(ValidateDataFrames(unknown, 1 << 20).code(), StatusCode::kProtocolError);
  Message flagged = DenseMessage(MsgType::kPeerTensor, 3, 12);
  flagged.header.flags = 1u << kFlagWireShift;  // the type is dim's, not the flags'
  EXPECT_EQ(ValidateDataFrames(flagged, 1 << 20).code(), StatusCode::kProtocolError);
  EXPECT_TRUE(ValidateDataFrames(DenseMessage(MsgType::kPeerTensor, 3, 12), 1 << 20).ok());
}

TEST(MessageTest, ValidateSparseFrames) {
  Message m;
  m.header.type = static_cast<uint16_t>(MsgType::kPush);
  m.header.flags = kFlagSparse;
  m.header.count = 3;
  m.header.dim = 2;
  m.frames.push_back(Frame::Adopt(std::vector<char>(3 * 8)));
  m.frames.push_back(Frame::Adopt(std::vector<char>(3 * 2 * 4)));
  EXPECT_TRUE(ValidateDataFrames(m, 1 << 20).ok());
  m.header.dim = 0;
  EXPECT_FALSE(ValidateDataFrames(m, 1 << 20).ok());
  m.header.dim = 3;
  EXPECT_FALSE(ValidateDataFrames(m, 1 << 20).ok());
  m.header.dim = 2;
  m.header.count = uint64_t{1} << 62;  // overflow attempt
  EXPECT_FALSE(ValidateDataFrames(m, 1 << 20).ok());
}

// Replication: a replicate is checked as the update it carries (its type in `status`), and
// an ack is a header without frames.
TEST(MessageTest, ValidateReplicateAndAck) {
  Message r = DenseMessage(MsgType::kPush, 4, 16);
  r.header.type = static_cast<uint16_t>(MsgType::kReplicate);
  r.header.status = static_cast<int32_t>(MsgType::kPush);
  EXPECT_TRUE(ValidateDataFrames(r, 1 << 20).ok());
  r.header.status = static_cast<int32_t>(MsgType::kPull);  // not an update
  EXPECT_FALSE(ValidateDataFrames(r, 1 << 20).ok());
  r.header.status = static_cast<int32_t>(MsgType::kReplicate);  // no nesting
  EXPECT_FALSE(ValidateDataFrames(r, 1 << 20).ok());
  r.header.status = static_cast<int32_t>(MsgType::kAssign);
  r.frames[0] = Frame::Copy("abc", 3);  // the carried push's frames must fit its header
  EXPECT_FALSE(ValidateDataFrames(r, 1 << 20).ok());
  Message ack;
  ack.header.type = static_cast<uint16_t>(MsgType::kReplicateAck);
  ack.header.count = 4;
  EXPECT_TRUE(ValidateDataFrames(ack, 1 << 20).ok());
  ack.header.flags = kFlagSparse;  // sparse needs a dim
  EXPECT_FALSE(ValidateDataFrames(ack, 1 << 20).ok());
  ack.header.dim = 2;
  EXPECT_TRUE(ValidateDataFrames(ack, 1 << 20).ok());
  ack.frames.push_back(Frame::Copy("x", 1));
  EXPECT_FALSE(ValidateDataFrames(ack, 1 << 20).ok());
}

Message Fused(MsgType t, std::vector<FusedSegment> segs, size_t value_bytes, bool with_values) {
  Message m;
  m.header.type = static_cast<uint16_t>(t);
  m.header.flags = kFlagFused;
  m.header.count = segs.size();
  m.frames.push_back(Frame::Copy(segs.data(), segs.size() * sizeof(FusedSegment)));
  if (with_values) m.frames.push_back(Frame::Adopt(std::vector<char>(value_bytes)));
  return m;
}

TEST(MessageTest, ValidateFusedFrames) {
  std::vector<FusedSegment> segs(3);
  segs[0].count = 5;
  segs[1].count = 0;
  segs[2].count = 7;
  EXPECT_TRUE(ValidateDataFrames(Fused(MsgType::kPush, segs, 48, true), 1 << 20).ok());
  EXPECT_EQ(*FusedElements(Fused(MsgType::kPush, segs, 48, true), 1 << 20), 12u);
  EXPECT_FALSE(
      ValidateDataFrames(Fused(MsgType::kPush, segs, 44, true), 1 << 20).ok());  // short values
  EXPECT_FALSE(
      ValidateDataFrames(Fused(MsgType::kPush, segs, 48, false), 1 << 20).ok());  // no values
  EXPECT_TRUE(ValidateDataFrames(Fused(MsgType::kPull, segs, 0, false), 1 << 20).ok());
  EXPECT_FALSE(
      ValidateDataFrames(Fused(MsgType::kPull, segs, 48, true), 1 << 20).ok());  // extra frame
  EXPECT_FALSE(
      ValidateDataFrames(Fused(MsgType::kPush, segs, 48, true), 11).ok());  // over the limit
  Message wrong_count = Fused(MsgType::kPull, segs, 0, false);
  wrong_count.header.count = 4;  // the segment frame holds 3
  EXPECT_FALSE(ValidateDataFrames(wrong_count, 1 << 20).ok());
  std::vector<FusedSegment> huge(2);
  huge[0].count = ~uint64_t{0};  // overflow attempt
  huge[1].count = 2;
  EXPECT_FALSE(ValidateDataFrames(Fused(MsgType::kPull, huge, 0, false), ~uint64_t{0} / 4).ok());
  Message sparse_fused = Fused(MsgType::kPull, segs, 0, false);
  sparse_fused.header.flags |= kFlagSparse;
  EXPECT_FALSE(ValidateDataFrames(sparse_fused, 1 << 20).ok());
  Message unknown_flag = Fused(MsgType::kPull, segs, 0, false);
  unknown_flag.header.flags |= 1u << 7;
  EXPECT_FALSE(ValidateDataFrames(unknown_flag, 1 << 20).ok());
}

TEST(MessageTest, ControlRoundTrip) {
  layerps::pb::Control c;
  c.mutable_register_()->set_token("t");
  Message m = MakeControl(5, c);
  EXPECT_EQ(m.header.sender, 5u);
  layerps::pb::Control out;
  ASSERT_TRUE(ParseControl(m, &out).ok());
  EXPECT_EQ(out.register_().token(), "t");
  Message junk;
  junk.header.type = static_cast<uint16_t>(MsgType::kControl);
  junk.frames.push_back(Frame::Copy("\xff\xff\xff", 3));
  EXPECT_EQ(ParseControl(junk, &out).code(), StatusCode::kProtocolError);
}

TEST(MessageTest, BorrowedFrameKeepsOwnerAlive) {
  auto owner = std::make_shared<int>(3);
  std::weak_ptr<int> weak = owner;
  {
    Frame f = Frame::Borrow(owner.get(), sizeof(int), owner);
    owner.reset();
    EXPECT_FALSE(weak.expired());
    EXPECT_EQ(*reinterpret_cast<const int*>(f.data()), 3);
  }
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace ps
