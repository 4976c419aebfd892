// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TableSpec::wire_dtype below the cluster: the spec field (Validate, Difference, the map
// codec), the header's wire bits (ValidateDataFrames), and the server's request check,
// which refuses a message whose wire type is not its table's and widens narrowed pushes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/wire_type.h"
#include "layerps.pb.h"
#include "server/request.h"
#include "server/store.h"
#include "transport/map_codec.h"
#include "transport/message.h"

namespace ps {
namespace {

TEST(WireDTypeSpecTest, ValidateDifferenceAndCodec) {
  TableSpec a = TableSpec::Dense("d", 10);
  TableSpec b = a;
  b.wire_dtype = WireDType::kBFloat16;
  EXPECT_TRUE(b.Validate().ok());
  EXPECT_FALSE(a.SameAs(b));
  EXPECT_EQ(a.Difference(b), "wire_dtype: fp32 declared, bf16 asked");
  EXPECT_EQ(b.WireElementBytes(), 2u);
  EXPECT_EQ(a.WireElementBytes(), 4u);
  layerps::pb::TableSpec pb;
  SpecToProto(b, &pb);
  EXPECT_TRUE(SpecFromProto(pb).SameAs(b));
  b.wire_dtype = static_cast<WireDType>(7);
  Status s = b.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("wire_dtype"), std::string::npos) << s;
  EXPECT_EQ(ParseWireDType("bf16").value(), WireDType::kBFloat16);
  EXPECT_EQ(ParseWireDType("float16").value(), WireDType::kFloat16);
  EXPECT_FALSE(ParseWireDType("fp8").ok());
}

Message DensePush(uint64_t count, uint8_t wire, size_t frame_bytes) {
  Message m;
  m.header.type = static_cast<uint16_t>(MsgType::kPush);
  m.header.table = 0;
  m.header.offset = 0;
  m.header.count = count;
  m.header.flags = WireFlags(wire);
  std::vector<char> bytes(frame_bytes, 0);
  m.frames.push_back(Frame::Copy(bytes.data(), bytes.size()));
  return m;
}

TEST(WireDTypeFramesTest, HeaderWireBitsAreChecked) {
  EXPECT_TRUE(ValidateDataFrames(DensePush(10, 1, 20), 1 << 20).ok());
  EXPECT_TRUE(ValidateDataFrames(DensePush(10, 2, 20), 1 << 20).ok());
  EXPECT_TRUE(ValidateDataFrames(DensePush(10, 0, 40), 1 << 20).ok());
  // A float32-sized frame under a float16 header, and the reverse.
  EXPECT_EQ(ValidateDataFrames(DensePush(10, 1, 40), 1 << 20).code(), StatusCode::kProtocolError);
  EXPECT_EQ(ValidateDataFrames(DensePush(10, 0, 20), 1 << 20).code(), StatusCode::kProtocolError);
  Status s = ValidateDataFrames(DensePush(10, 3, 20), 1 << 20);
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s;
  EXPECT_NE(s.message().find("wire element type"), std::string::npos) << s;
  Message fused = DensePush(1, 1, 0);
  fused.header.flags |= kFlagFused;
  EXPECT_EQ(ValidateDataFrames(fused, 1 << 20).code(), StatusCode::kProtocolError);
}

class WireDTypeServerTest : public ::testing::Test {
 protected:
  void Install(WireDType wire) {
    TableInfo t;
    t.id = 0;
    t.spec = TableSpec::Dense("d", 8);
    t.spec.wire_dtype = wire;
    t.chunk_elems = 256;
    t.ranges = {{0, 1, 1}};
    ASSERT_TRUE(store_.Install(t).ok());
  }
  Store store_{1};
};

// A message whose wire type is not the table's declared one is refused before anything
// is applied, with a message naming both.
TEST_F(WireDTypeServerTest, AMismatchedWireTypeIsRefused) {
  Install(WireDType::kFloat16);
  for (uint8_t wire : {uint8_t{0}, uint8_t{2}}) {
    DataRequest req;
    Status s = CheckRequest(DensePush(8, wire, 8 * (wire == 0 ? 4 : 2)), store_, 1, 1 << 20, &req);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("declares wire dtype fp16"), std::string::npos) << s;
    EXPECT_NE(s.message().find(wire == 0 ? "carries fp32" : "carries bf16"), std::string::npos)
        << s;
  }
  std::vector<float> out(8, -1.0f);
  ASSERT_TRUE(store_.ReadDense(0, 0, 8, out.data()).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST_F(WireDTypeServerTest, AFloat32TableRefusesNarrowedValues) {
  Install(WireDType::kFloat32);
  DataRequest req;
  Status s = CheckRequest(DensePush(8, 1, 16), store_, 1, 1 << 20, &req);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("declares wire dtype fp32"), std::string::npos) << s;
}

// A narrowed push is widened to float32 once, before the policies and the store see it.
TEST_F(WireDTypeServerTest, NarrowedPushesAreWidened) {
  Install(WireDType::kBFloat16);
  const float values[8] = {1.0f, -2.5f, 3.140625f, 0.0f, 65504.0f, -1e-3f, 7.0f, 1e20f};
  uint16_t wire[8];
  pack::ToWire(values, 8, pack::WireType::kBFloat16, wire);
  Message m = DensePush(8, 2, 16);
  m.frames[0] = Frame::Copy(wire, sizeof(wire));
  DataRequest req;
  ASSERT_TRUE(CheckRequest(std::move(m), store_, 1, 1 << 20, &req).ok());
  ASSERT_EQ(req.frames[0].size(), 8 * sizeof(float));
  float got[8];
  std::memcpy(got, req.frames[0].data(), sizeof(got));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], pack::BFloat16ToFloat(wire[i])) << i;
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The array conversions (vectorized where the CPU allows) agree bit for bit with the
// scalar reference: every half, and a sweep of float bit patterns (NaNs, infinities,
// subnormals, the rounding ties and the overflow boundary included).
TEST(WireDTypeArrayTest, ArrayConversionsMatchTheScalarReference) {
  std::vector<uint16_t> halves(65536 + 5);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  for (pack::WireType type : {pack::WireType::kFloat16, pack::WireType::kBFloat16}) {
    std::vector<float> wide(halves.size());
    pack::FromWire(halves.data(), halves.size(), type, wide.data());
    for (size_t i = 0; i < halves.size(); ++i) {
      const float want = type == pack::WireType::kFloat16 ? pack::HalfToFloat(halves[i])
                                                          : pack::BFloat16ToFloat(halves[i]);
      ASSERT_EQ(Bits(wide[i]), Bits(want)) << i;
    }
  }
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) {
    uint32_t b = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &b, 4);
    in.push_back(f);
  }
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 5.9604645e-8f, 2.9802322e-8f,
                  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -0.0f}) {
    in.push_back(f);
  }
  for (pack::WireType type : {pack::WireType::kFloat16, pack::WireType::kBFloat16}) {
    std::vector<uint16_t> out(in.size());
    pack::ToWire(in.data(), in.size(), type, out.data());
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t want = type == pack::WireType::kFloat16 ? pack::FloatToHalf(in[i])
                                                             : pack::FloatToBFloat16(in[i]);
      ASSERT_EQ(out[i], want) << i << " " << Bits(in[i]);
    }
  }
}

}  // namespace
}  // namespace ps
