// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TableSpec::wire_dtype end to end (2 servers, 1 worker, tcp): values travel as fp16 or
// bf16 and the servers keep and accumulate float32. Every pulled value is compared
// exactly with a reference computed here (the worker narrows each push, the server adds
// the widened values in float32, the pull is narrowed), and within the wire type's
// rounding of the same run on a float32 table; the table's payload bytes on the wire are
// half (dense) of the float32 table's.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "common/wire_type.h"
#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;

float Round(float v, WireDType w) {
  if (w == WireDType::kFloat16) return pack::HalfToFloat(pack::FloatToHalf(v));
  if (w == WireDType::kBFloat16) return pack::BFloat16ToFloat(pack::FloatToBFloat16(v));
  return v;
}
// Relative rounding of one narrowing (half an ulp).
float Eps(WireDType w) { return w == WireDType::kFloat16 ? 1.0f / 2048 : 1.0f / 256; }

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

class WireDTypeTest : public ::testing::TestWithParam<WireDType> {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>(2, 1);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override { cluster_->Finish(); }
  Worker& w() { return cluster_->worker(0); }
  TableId Declare(TableSpec spec, WireDType wire) {
    spec.wire_dtype = wire;
    auto id = w().DeclareTable(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : kInvalidTable;
  }
  std::unique_ptr<LocalCluster> cluster_;
};

// Dense push, pull and pushpull over both servers (3 chunks of 65536), rules sum and sgd.
TEST_P(WireDTypeTest, DenseValuesAreRoundedAndBytesHalved) {
  const WireDType wire = GetParam();
  const size_t n = 150000;
  for (UpdateRule rule : {UpdateRule::kSum, UpdateRule::kSgd}) {
    TableSpec spec = TableSpec::Dense(std::string("dense_") + UpdateRuleName(rule), n, rule);
    spec.learning_rate = 0.5f;  // exact products: the reference needs no FMA assumptions
    const TableId ref = Declare(spec, WireDType::kFloat32);
    spec.name += "_narrow";
    const TableId nar = Declare(spec, wire);
    const auto g1 = Random(n, 1), g2 = Random(n, 2), g3 = Random(n, 3);
    std::vector<float> pref(n), pnar(n), ppref(n), ppnar(n);
    for (TableId t : {ref, nar}) {
      ASSERT_TRUE(w().Wait(w().Push(t, g1.data(), n), kWait).ok());
      ASSERT_TRUE(w().Wait(w().Push(t, g2.data(), n), kWait).ok());
    }
    ASSERT_TRUE(w().Wait(w().Pull(ref, pref.data(), n), kWait).ok());
    ASSERT_TRUE(w().Wait(w().Pull(nar, pnar.data(), n), kWait).ok());
    ASSERT_TRUE(w().Wait(w().PushPull(ref, g3.data(), ppref.data(), n), kWait).ok());
    ASSERT_TRUE(w().Wait(w().PushPull(nar, g3.data(), ppnar.data(), n), kWait).ok());
    const float sign = rule == UpdateRule::kSum ? 1.0f : -0.5f;
    size_t bad = 0;
    for (size_t i = 0; i < n && bad < 10; ++i) {
      // The server's float32 state after each push of a narrowed gradient.
      float x = 0.0f;
      x += sign * Round(g1[i], wire);
      x += sign * Round(g2[i], wire);
      const float after2 = x;
      x += sign * Round(g3[i], wire);
      if (pnar[i] != Round(after2, wire) || ppnar[i] != Round(x, wire)) ++bad;
      // Within the wire type's rounding of the float32 run.
      const float tol2 = 2 * Eps(wire) * (std::fabs(g1[i]) + std::fabs(g2[i]) + std::fabs(after2));
      const float tol3 = tol2 + 2 * Eps(wire) * (std::fabs(g3[i]) + std::fabs(x));
      if (std::fabs(pnar[i] - pref[i]) > tol2 || std::fabs(ppnar[i] - ppref[i]) > tol3) ++bad;
      EXPECT_EQ(pnar[i], Round(after2, wire)) << i;
      EXPECT_NEAR(pnar[i], pref[i], tol2) << i;
      EXPECT_EQ(ppnar[i], Round(x, wire)) << i;
    }
    EXPECT_EQ(bad, 0u);
    // 3 pushes out, 2 pulls back: payload bytes exactly half of the float32 table's.
    TrafficStats tr = w().traffic();
    EXPECT_EQ(tr.tables[ref].bytes_sent, 3 * n * 4);
    EXPECT_EQ(tr.tables[nar].bytes_sent, 3 * n * 2);
    EXPECT_EQ(tr.tables[ref].bytes_received, 2 * n * 4);
    EXPECT_EQ(tr.tables[nar].bytes_received, 2 * n * 2);
  }
}

// The server accumulates in float32: small pushes that a narrowed accumulator would lose
// (each one half an ulp of the wire type at 1.0) add up and the sum is pulled exactly.
TEST_P(WireDTypeTest, TheServerAccumulatesInFloat32) {
  const WireDType wire = GetParam();
  const float half_ulp = wire == WireDType::kFloat16 ? 1.0f / 2048 : 1.0f / 256;
  for (UpdateRule rule : {UpdateRule::kSum, UpdateRule::kSgd}) {
    TableSpec spec = TableSpec::Dense(std::string("acc_") + UpdateRuleName(rule), 4, rule);
    spec.learning_rate = 1.0f;
    const TableId t = Declare(spec, wire);
    const float s = rule == UpdateRule::kSum ? 1.0f : -1.0f;
    std::vector<float> one(4, s), small(4, s * half_ulp), out(4);
    ASSERT_TRUE(w().Wait(w().Push(t, one.data(), 4), kWait).ok());
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(w().Wait(w().Push(t, small.data(), 4), kWait).ok());
    ASSERT_TRUE(w().Wait(w().Pull(t, out.data(), 4), kWait).ok());
    for (float v : out) EXPECT_EQ(v, 1.0f + 4 * half_ulp) << UpdateRuleName(rule);
  }
}

TEST_P(WireDTypeTest, SparseValuesAreRoundedAndRowBytesHalved) {
  const WireDType wire = GetParam();
  const uint32_t dim = 8;
  const size_t nk = 3000;
  std::vector<Key> keys(nk);
  for (size_t i = 0; i < nk; ++i) keys[i] = i * 7919 + 3;  // unique, over both servers
  TableSpec spec = TableSpec::Sparse("emb", dim);
  const TableId ref = Declare(spec, WireDType::kFloat32);
  spec.name = "emb_narrow";
  const TableId nar = Declare(spec, wire);
  const auto g1 = Random(nk * dim, 4), g2 = Random(nk * dim, 5);
  for (TableId t : {ref, nar}) {
    ASSERT_TRUE(w().Wait(w().PushSparse(t, keys.data(), nk, g1.data(), g1.size()), kWait).ok());
    ASSERT_TRUE(w().Wait(w().PushSparse(t, keys.data(), nk, g2.data(), g2.size()), kWait).ok());
  }
  std::vector<float> pref(nk * dim), pnar(nk * dim);
  ASSERT_TRUE(w().Wait(w().PullSparse(ref, keys.data(), nk, pref.data(), pref.size()), kWait).ok());
  ASSERT_TRUE(w().Wait(w().PullSparse(nar, keys.data(), nk, pnar.data(), pnar.size()), kWait).ok());
  size_t bad = 0;
  for (size_t i = 0; i < nk * dim; ++i) {
    const float x = Round(g1[i], wire) + Round(g2[i], wire);
    const float tol = 2 * Eps(wire) * (std::fabs(g1[i]) + std::fabs(g2[i]) + std::fabs(x));
    if (pnar[i] != Round(x, wire) || std::fabs(pnar[i] - pref[i]) > tol) {
      if (++bad < 10) ADD_FAILURE() << i << ": " << pnar[i] << " vs " << Round(x, wire);
    }
  }
  EXPECT_EQ(bad, 0u);
  TrafficStats tr = w().traffic();
  // Keys stay 8 bytes; the rows of 2 pushes and 1 pull travel at 2 bytes per value.
  EXPECT_EQ(tr.tables[ref].bytes_sent - tr.tables[nar].bytes_sent, 2 * nk * dim * 2);
  EXPECT_EQ(tr.tables[ref].bytes_received, nk * dim * 4);
  EXPECT_EQ(tr.tables[nar].bytes_received, nk * dim * 2);
}

// A multi-tensor request mixing a narrowed table with small float32 ones (which are
// fused): every tensor arrives with its own wire type.
TEST_P(WireDTypeTest, ManyMixesWireTypes) {
  const WireDType wire = GetParam();
  const TableId a = Declare(TableSpec::Dense("a", 1000), WireDType::kFloat32);
  const TableId b = Declare(TableSpec::Dense("b", 1000), wire);
  const TableId c = Declare(TableSpec::Dense("c", 200000), wire);
  const auto ga = Random(1000, 6), gb = Random(1000, 7), gc = Random(200000, 8);
  ASSERT_TRUE(
      w().Wait(w().PushMany({{a, ga.data(), 1000}, {b, gb.data(), 1000}, {c, gc.data(), 200000}}),
               kWait)
          .ok());
  std::vector<float> oa(1000), ob(1000), oc(200000);
  ASSERT_TRUE(
      w().Wait(w().PullMany({{a, oa.data(), 1000}, {b, ob.data(), 1000}, {c, oc.data(), 200000}}),
               kWait)
          .ok());
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(oa[i], ga[i]) << i;
    ASSERT_EQ(ob[i], Round(Round(gb[i], wire), wire)) << i;
  }
  for (size_t i = 0; i < oc.size(); ++i) ASSERT_EQ(oc[i], Round(gc[i], wire)) << i;
}

// Declaring an existing table with another wire type is refused, naming the field.
TEST_P(WireDTypeTest, RedeclaringWithAnotherWireTypeIsRefused) {
  Declare(TableSpec::Dense("t", 10), WireDType::kFloat32);
  TableSpec spec = TableSpec::Dense("t", 10);
  spec.wire_dtype = GetParam();
  auto id = w().DeclareTable(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("wire_dtype"), std::string::npos) << id.status();
}

INSTANTIATE_TEST_SUITE_P(Wire, WireDTypeTest,
                         ::testing::Values(WireDType::kFloat16, WireDType::kBFloat16),
                         [](const ::testing::TestParamInfo<WireDType>& i) {
                           return std::string(WireDTypeName(i.param));
                         });

}  // namespace
}  // namespace ps
