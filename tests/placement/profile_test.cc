// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Profiles: validation, totals, cut points, and the built-in models against the
// published parameter counts and PAPERS.md's layer-profile table.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace {

LayerProfile L(const std::string& name, LayerKind kind, std::vector<std::string> inputs,
               uint64_t params = 0, uint64_t act = 4) {
  LayerProfile l;
  l.name = name;
  l.kind = kind;
  l.inputs = std::move(inputs);
  l.param_bytes = params;
  l.activation_bytes = act;
  return l;
}

ModelProfile Chain(int n) {
  ModelProfile m;
  m.name = "chain";
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> in;
    if (i > 0) in.push_back("l" + std::to_string(i - 1));
    m.layers.push_back(L("l" + std::to_string(i), LayerKind::kConv, in, 8 * (i + 1), 4 * (i + 1)));
  }
  return m;
}

TEST(LayerKindTest, NamesRoundTrip) {
  for (LayerKind k : {LayerKind::kConv, LayerKind::kFc, LayerKind::kPool, LayerKind::kEmbedding,
                      LayerKind::kNorm, LayerKind::kOther}) {
    StatusOr<LayerKind> parsed = ParseLayerKind(LayerKindName(k));
    ASSERT_TRUE(parsed.ok()) << LayerKindName(k);
    EXPECT_EQ(*parsed, k);
  }
  StatusOr<LayerKind> bad = ParseLayerKind("lstm");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lstm"), std::string::npos);
}

TEST(ProfileTest, ValidChainAndTotals) {
  ModelProfile m = Chain(4);
  ASSERT_TRUE(m.Validate().ok()) << m.Validate();
  EXPECT_EQ(m.TotalParamBytes(), 8u + 16 + 24 + 32);
  EXPECT_EQ(m.LayerIndex("l2"), 2);
  EXPECT_EQ(m.LayerIndex("nope"), -1);
}

TEST(ProfileTest, RejectsCycleUnknownInputDuplicateAndBadSizes) {
  {
    ModelProfile m = Chain(3);
    m.layers[1].inputs = {"l2"};  // a later layer: a cycle l1 -> l2 -> l1
    Status s = m.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'l1'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("cycle"), std::string::npos) << s;
  }
  {
    ModelProfile m = Chain(3);
    m.layers[2].inputs = {"ghost"};
    Status s = m.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ghost"), std::string::npos) << s;
  }
  {
    ModelProfile m = Chain(3);
    m.layers[2].name = "l0";
    Status s = m.Validate();
    EXPECT_NE(s.message().find("duplicate"), std::string::npos) << s;
  }
  {
    ModelProfile m = Chain(3);
    m.layers[1].flops_per_sample = std::nan("");
    Status s = m.Validate();
    EXPECT_NE(s.message().find("'l1'"), std::string::npos) << s;
  }
  {
    ModelProfile m = Chain(3);
    m.layers[1].flops_per_sample = -1;
    EXPECT_FALSE(m.Validate().ok());
  }
  {
    ModelProfile m = Chain(3);
    m.layers[0].kind = static_cast<LayerKind>(42);
    Status s = m.Validate();
    EXPECT_NE(s.message().find("unknown kind"), std::string::npos) << s;
  }
  {
    ModelProfile m = Chain(2);
    m.layers[1].name = "";
    EXPECT_FALSE(m.Validate().ok());
    EXPECT_FALSE(ModelProfile().Validate().ok());  // no layers
  }
}

TEST(CutPointTest, ChainHasEveryCut) {
  ModelProfile m = Chain(5);
  std::vector<CutPoint> cuts = FindCutPoints(m);
  ASSERT_EQ(cuts.size(), 4u);
  for (int k = 1; k <= 4; ++k) {
    EXPECT_EQ(cuts[k - 1].index, k);
    EXPECT_EQ(cuts[k - 1].producer, k - 1);
    EXPECT_EQ(cuts[k - 1].activation_bytes, m.layers[k - 1].activation_bytes);
  }
}

TEST(CutPointTest, BranchesAndSkipsHaveNoCutInside) {
  // a -> {b, c} -> d(b, c) -> e ; and e -> f, e -> g(f, e) (a skip connection).
  ModelProfile m;
  m.name = "dag";
  m.layers = {L("a", LayerKind::kConv, {}),          L("b", LayerKind::kConv, {"a"}),
              L("c", LayerKind::kConv, {"a"}),       L("d", LayerKind::kOther, {"b", "c"}),
              L("e", LayerKind::kConv, {"d"}),       L("f", LayerKind::kConv, {"e"}),
              L("g", LayerKind::kOther, {"f", "e"}), L("h", LayerKind::kFc, {"g"})};
  ASSERT_TRUE(m.Validate().ok());
  std::vector<CutPoint> cuts = FindCutPoints(m);
  std::vector<int> idx;
  for (const CutPoint& c : cuts) idx.push_back(c.index);
  // Before b: only a is live. Before c: a and b live. Before d: b, c. Before e: d.
  // Before f: e. Before g: f and e. Before h: g.
  EXPECT_EQ(idx, (std::vector<int>{1, 4, 5, 7}));
  EXPECT_EQ(cuts[0].producer, 0);  // a feeds both b and c
  StatusOr<CutPoint> fc = FcBoundaryCut(m);
  ASSERT_TRUE(fc.ok());
  EXPECT_EQ(fc->index, 7);
}

TEST(CutPointTest, SuffixReadingTheModelInputIsNoCut) {
  ModelProfile m;
  m.name = "two_inputs";
  m.layers = {L("a", LayerKind::kConv, {}), L("b", LayerKind::kConv, {"a"}),
              L("c", LayerKind::kConv, {}), L("d", LayerKind::kOther, {"b", "c"})};
  std::vector<CutPoint> cuts = FindCutPoints(m);
  std::vector<int> idx;
  for (const CutPoint& c : cuts) idx.push_back(c.index);
  EXPECT_EQ(idx, (std::vector<int>{}));  // c reads the input, d reads b and c
}

TEST(CutPointTest, FcBoundaryNeedsAnFcLayer) {
  EXPECT_EQ(FcBoundaryCut(Chain(3)).status().code(), StatusCode::kNotFound);
}

// The published totals (torchvision's parameter counts) and PAPERS.md's table.
struct Reference {
  const char* name;
  uint64_t params;
  double fc_share;      // of the parameters
  double fc_share_tol;  // absolute
  uint64_t fc_input;    // floats entering the first fc layer
  double fc_flops_max;  // the fc share of the FLOPs is at most this
};

class BuiltinTest : public ::testing::TestWithParam<Reference> {};

TEST_P(BuiltinTest, MatchesPublishedCountsAndTable) {
  const Reference& ref = GetParam();
  StatusOr<ModelProfile> m = BuiltinProfile(ref.name);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->Validate().ok()) << m->Validate();
  EXPECT_EQ(m->name, ref.name);
  EXPECT_EQ(m->TotalParamBytes(), ref.params * 4);
  const double fc_share =
      static_cast<double>(m->ParamBytesOfKind(LayerKind::kFc)) / m->TotalParamBytes();
  EXPECT_NEAR(fc_share, ref.fc_share, ref.fc_share_tol);
  EXPECT_LE(m->FlopsOfKind(LayerKind::kFc) / m->TotalFlopsPerSample(), ref.fc_flops_max);
  StatusOr<CutPoint> cut = FcBoundaryCut(*m);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->activation_bytes, ref.fc_input * 4);
  // Every layer's tables are named after it, and names are unique.
  std::set<std::string> tables;
  for (const LayerProfile& l : m->layers) {
    EXPECT_EQ(l.tables.empty(), l.param_bytes == 0) << l.name;
    for (const std::string& t : l.tables) EXPECT_TRUE(tables.insert(t).second) << t;
    if (l.kind == LayerKind::kConv || l.kind == LayerKind::kPool || l.kind == LayerKind::kFc) {
      EXPECT_GT(l.shape.out_channels, 0u) << l.name;
      EXPECT_GT(l.shape.in_channels, 0u) << l.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, BuiltinTest,
    ::testing::Values(Reference{"alexnet", 61100840, 0.96, 0.005, 9216, 0.09},
                      Reference{"vgg16", 138357544, 0.89, 0.005, 25088, 0.01},
                      Reference{"resnet50", 25557032, 0.08, 0.005, 2048, 0.001},
                      Reference{"inception_v3", 23834568, 0.086, 0.0015, 2048, 0.001},
                      Reference{"bigfc", 5308874, 0.99, 0.005, 4096, 0.5}),
    [](const ::testing::TestParamInfo<Reference>& info) { return std::string(info.param.name); });

TEST(BuiltinTest, AlexNetFcFlopShareIsAboutEightPercent) {
  ModelProfile m = *BuiltinProfile("alexnet");
  EXPECT_NEAR(m.FlopsOfKind(LayerKind::kFc) / m.TotalFlopsPerSample(), 0.08, 0.01);
}

TEST(BuiltinTest, Shapes) {
  ModelProfile alex = *BuiltinProfile("alexnet");
  const LayerProfile& c1 = alex.layers[alex.LayerIndex("conv1")];
  EXPECT_EQ(c1.shape.out_height, 55u);
  EXPECT_EQ(c1.shape.kernel_h, 11u);
  EXPECT_EQ(c1.shape.stride, 4u);
  EXPECT_EQ(c1.flops_per_sample, 2.0 * 64 * 55 * 55 * 3 * 11 * 11);
  const LayerProfile& fc6 = alex.layers[alex.LayerIndex("fc6")];
  EXPECT_EQ(fc6.shape.in_channels, 9216u);
  EXPECT_EQ(fc6.shape.out_channels, 4096u);
  EXPECT_EQ(fc6.param_bytes, (9216ull * 4096 + 4096) * 4);

  ModelProfile inc = *BuiltinProfile("inception_v3");
  const LayerProfile& b7 = inc.layers[inc.LayerIndex("Mixed_6b.branch7x7_2")];
  EXPECT_EQ(b7.shape.kernel_h, 1u);
  EXPECT_EQ(b7.shape.kernel_w, 7u);
  EXPECT_EQ(b7.shape.padding, 0u);
  EXPECT_EQ(b7.shape.PaddingW(), 3u);
  EXPECT_EQ(b7.shape.out_height, 17u);
  EXPECT_EQ(b7.shape.out_width, 17u);
  const LayerProfile& mixed7c = inc.layers[inc.LayerIndex("Mixed_7c")];
  EXPECT_EQ(mixed7c.activation_bytes, 2048u * 8 * 8 * 4);
}

TEST(BuiltinTest, CutPointsOfBranchingModels) {
  // ResNet-50: inside a bottleneck the block input stays live (the shortcut), so the
  // cuts are exactly: after conv1, after the max pool, after each of the 16 blocks' add,
  // and after the average pool (before fc).
  ModelProfile r = *BuiltinProfile("resnet50");
  std::vector<CutPoint> cuts = FindCutPoints(r);
  int adds = 0;
  for (const CutPoint& c : cuts) {
    const std::string& p = r.layers[c.producer].name;
    EXPECT_EQ(c.producer, c.index - 1);
    if (p.size() > 4 && p.substr(p.size() - 4) == ".add") ++adds;
  }
  EXPECT_EQ(adds, 16);
  EXPECT_EQ(cuts.size(), 2u + 16 + 1);  // conv1, maxpool, 16 adds, avgpool

  // Inception-v3: ~100 layers; cuts between the stem's layers and after each Mixed block.
  ModelProfile inc = *BuiltinProfile("inception_v3");
  EXPECT_GE(inc.layers.size(), 100u);
  EXPECT_LE(inc.layers.size(), 130u);
  std::set<std::string> producers;
  for (const CutPoint& c : FindCutPoints(inc)) producers.insert(inc.layers[c.producer].name);
  std::set<std::string> expected = {"Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1",
                                    "Conv2d_3b_1x1", "Conv2d_4a_3x3", "maxpool2",      "Mixed_5b",
                                    "Mixed_5c",      "Mixed_5d",      "Mixed_6a",      "Mixed_6b",
                                    "Mixed_6c",      "Mixed_6d",      "Mixed_6e",      "Mixed_7a",
                                    "Mixed_7b",      "Mixed_7c",      "avgpool"};
  EXPECT_EQ(producers, expected);
}

TEST(BuiltinTest, UnknownNameIsNotFound) {
  StatusOr<ModelProfile> m = BuiltinProfile("lenet");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("vgg16"), std::string::npos);
}

TEST(BuiltinTest, BigFcLayers) {
  ModelProfile m = BigFcProfile(1);
  EXPECT_EQ(m.TotalParamBytes(), (5308874ull - 2 * 25 * 32) * 4);  // 1 input channel
  EXPECT_EQ(m.input_bytes_per_sample, 32u * 32 * 4);
  EXPECT_EQ(m.layers.size(), 7u);
}

}  // namespace
}  // namespace placement
}  // namespace ps
