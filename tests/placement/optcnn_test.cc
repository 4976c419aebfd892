// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN: the elimination search against brute-force enumeration on random DAGs, the
// eliminations themselves (residual sizes), the errors; the configurations and cost
// tables of models; the VGG-16 pattern of the paper's Table 5.
#include "ps/optcnn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace {

// ---------------------------------------------------------------------------------------
// Random cost graphs
// ---------------------------------------------------------------------------------------

enum class Shape { kChain, kDiamond, kInception, kRandom, kParallelEdges };

const char* ShapeName(Shape s) {
  switch (s) {
    case Shape::kChain:
      return "chain";
    case Shape::kDiamond:
      return "diamond";
    case Shape::kInception:
      return "inception";
    case Shape::kRandom:
      return "random";
    case Shape::kParallelEdges:
      return "parallel-edges";
  }
  return "?";
}

// Costs are small integers held in doubles, so every sum is exact whatever its order and
// "equal" can mean bit-for-bit equal.
class GraphMaker {
 public:
  explicit GraphMaker(uint32_t seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double Cost() { return static_cast<double>(Uniform(0, 100)); }

  int Node(CostGraph* g, int max_configs) {
    std::vector<double> c(Uniform(1, max_configs));
    for (double& x : c) x = Cost();
    return g->AddNode(std::move(c));
  }
  void Edge(CostGraph* g, int a, int b) {
    std::vector<double> c(static_cast<size_t>(g->NumConfigs(a)) * g->NumConfigs(b));
    for (double& x : c) x = Cost();
    g->AddEdge(a, b, std::move(c));
  }

  // At most 8 nodes, at most max_configs configurations each.
  CostGraph Make(Shape shape, int max_configs) {
    CostGraph g;
    switch (shape) {
      case Shape::kChain: {
        const int n = Uniform(1, 8);
        for (int i = 0; i < n; ++i) Node(&g, max_configs);
        for (int i = 0; i + 1 < n; ++i) Edge(&g, i, i + 1);
        break;
      }
      case Shape::kDiamond: {
        // head -> k branches (1 or 2 nodes each) -> tail, within 8 nodes.
        const int head = Node(&g, max_configs);
        std::vector<int> ends;
        int budget = 6;
        const int k = Uniform(2, 3);
        for (int b = 0; b < k && budget > 0; ++b) {
          const int len = std::min(budget, Uniform(1, 2));
          budget -= len;
          int prev = head;
          for (int i = 0; i < len; ++i) {
            const int v = Node(&g, max_configs);
            Edge(&g, prev, v);
            prev = v;
          }
          ends.push_back(prev);
        }
        const int tail = Node(&g, max_configs);
        for (int e : ends) Edge(&g, e, tail);
        break;
      }
      case Shape::kInception: {
        // stem -> module (1x1 | 1x1->3x3 | 1x1->5x5 | pool->1x1 style fan-out) -> concat
        // -> head; branch lengths random, 8 nodes at most.
        const int stem = Node(&g, max_configs);
        const int branches = Uniform(2, 4);
        std::vector<int> ends;
        int budget = 5;
        for (int b = 0; b < branches && budget > 0; ++b) {
          const int len = std::min(budget, Uniform(1, 2));
          budget -= len;
          int prev = stem;
          for (int i = 0; i < len; ++i) {
            const int v = Node(&g, max_configs);
            Edge(&g, prev, v);
            prev = v;
          }
          ends.push_back(prev);
        }
        const int concat = Node(&g, max_configs);
        for (int e : ends) Edge(&g, e, concat);
        if (g.num_nodes() < 8) {
          const int head = Node(&g, max_configs);
          Edge(&g, concat, head);
        }
        break;
      }
      case Shape::kRandom: {
        const int n = Uniform(1, 8);
        const double p = std::uniform_real_distribution<double>(0.15, 0.7)(rng_);
        for (int i = 0; i < n; ++i) Node(&g, max_configs);
        for (int j = 1; j < n; ++j) {
          for (int i = 0; i < j; ++i) {
            if (std::bernoulli_distribution(p)(rng_)) Edge(&g, i, j);
          }
        }
        break;
      }
      case Shape::kParallelEdges: {
        // A random DAG whose edges are sometimes doubled (Eq. 3 has work to do).
        const int n = Uniform(2, 8);
        for (int i = 0; i < n; ++i) Node(&g, max_configs);
        for (int j = 1; j < n; ++j) {
          const int i = Uniform(0, j - 1);
          Edge(&g, i, j);
          if (Uniform(0, 2) == 0) Edge(&g, i, j);
          if (j >= 2 && Uniform(0, 2) == 0) Edge(&g, Uniform(0, j - 1), j);
        }
        break;
      }
    }
    return g;
  }

 private:
  std::mt19937 rng_;
};

// The search equals brute force on >= 1,000 random DAGs of <= 8 nodes with <= 6
// configurations each, in both elimination modes and with the branch and bound forced.
TEST(OptcnnSearch, EqualsBruteForceOnRandomDags) {
  const Shape shapes[] = {Shape::kChain, Shape::kDiamond, Shape::kInception, Shape::kRandom,
                          Shape::kParallelEdges};
  int graphs = 0;
  int with_eliminations = 0;
  for (Shape shape : shapes) {
    for (uint32_t seed = 0; seed < 240; ++seed) {
      GraphMaker maker(seed * 7919 + static_cast<uint32_t>(shape));
      const CostGraph g = maker.Make(shape, 6);
      ASSERT_LE(g.num_nodes(), 8);
      ASSERT_TRUE(g.Validate().ok()) << g.Validate();
      auto brute = BruteForce(g);
      ASSERT_TRUE(brute.ok()) << brute.status();
      ++graphs;

      SearchOptions paper;
      paper.elimination = Elimination::kPaper;
      SearchOptions extended;  // the default
      SearchOptions bnb;
      bnb.max_enumeration = 1;  // every residual graph goes to the branch and bound
      for (const SearchOptions& opt : {paper, extended, bnb}) {
        auto found = Search(g, opt);
        ASSERT_TRUE(found.ok()) << found.status();
        SCOPED_TRACE(std::string(ShapeName(shape)) + " seed " + std::to_string(seed) + " mode " +
                     std::to_string(static_cast<int>(opt.elimination)));
        EXPECT_EQ(found->cost, brute->cost);
        auto recomputed = g.Evaluate(found->assignment);
        ASSERT_TRUE(recomputed.ok()) << recomputed.status();
        EXPECT_EQ(*recomputed, brute->cost);
        if (found->eliminated_nodes > 0) ++with_eliminations;
      }
    }
  }
  EXPECT_GE(graphs, 1000);
  // The eliminations did the work on most graphs (not just the enumeration).
  EXPECT_GT(with_eliminations, graphs);
}

// Real-valued costs: the same optimum up to rounding.
TEST(OptcnnSearch, EqualsBruteForceWithRealCosts) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    GraphMaker maker(1000 + trial);
    CostGraph g = maker.Make(trial % 2 ? Shape::kRandom : Shape::kInception, 6);
    for (auto& nc : g.node_cost) {
      for (double& x : nc) x = u(rng);
    }
    for (auto& e : g.edges) {
      for (double& x : e.cost) x = u(rng);
    }
    auto brute = BruteForce(g);
    auto found = Search(g);
    ASSERT_TRUE(brute.ok() && found.ok());
    EXPECT_NEAR(found->cost, brute->cost, 1e-9) << "trial " << trial;
    EXPECT_NEAR(*g.Evaluate(found->assignment), brute->cost, 1e-9) << "trial " << trial;
  }
}

// Node elimination folds a chain to its two ends (the paper's rule) or to nothing
// (extended); an Inception-like module likewise; the choice undone is still optimal.
TEST(OptcnnSearch, EliminationLeavesTwoNodesOnChainsAndModules) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    GraphMaker maker(seed);
    CostGraph chain;
    const int n = 3 + seed % 6;
    for (int i = 0; i < n; ++i) maker.Node(&chain, 6);
    for (int i = 0; i + 1 < n; ++i) maker.Edge(&chain, i, i + 1);
    SearchOptions paper;
    paper.elimination = Elimination::kPaper;
    auto r = Search(chain, paper);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->residual_nodes, 2);
    EXPECT_EQ(r->residual_edges, 1);
    EXPECT_EQ(r->eliminated_nodes, n - 2);
    auto x = Search(chain);
    ASSERT_TRUE(x.ok());
    EXPECT_EQ(x->residual_nodes, 0);
    EXPECT_EQ(x->cost, BruteForce(chain)->cost);

    // stem -> {a, b->c, d->e} -> concat -> head: branches fold (Eq. 2), the parallel
    // stem-concat edges merge (Eq. 3), then the concat folds: stem and head remain.
    CostGraph m;
    for (int i = 0; i < 8; ++i) maker.Node(&m, 4);
    maker.Edge(&m, 0, 1);
    maker.Edge(&m, 0, 2);
    maker.Edge(&m, 2, 3);
    maker.Edge(&m, 0, 4);
    maker.Edge(&m, 4, 5);
    maker.Edge(&m, 1, 6);
    maker.Edge(&m, 3, 6);
    maker.Edge(&m, 5, 6);
    maker.Edge(&m, 6, 7);
    auto mr = Search(m, paper);
    ASSERT_TRUE(mr.ok());
    EXPECT_EQ(mr->residual_nodes, 2);
    EXPECT_EQ(mr->eliminated_edges, 2);
    EXPECT_EQ(mr->cost, BruteForce(m)->cost);
  }
}

// Same input, same answer; ties go to the lowest configuration index.
TEST(OptcnnSearch, DeterministicWithLowestIndexTies) {
  CostGraph g;
  for (int i = 0; i < 5; ++i) g.AddNode({1, 1, 1});
  for (int i = 0; i + 1 < 5; ++i) g.AddEdge(i, i + 1, std::vector<double>(9, 0.0));
  for (auto mode : {Elimination::kPaper, Elimination::kExtended}) {
    SearchOptions o;
    o.elimination = mode;
    auto r = Search(g, o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->assignment, std::vector<int>(5, 0));
  }
  GraphMaker maker(77);
  const CostGraph h = maker.Make(Shape::kRandom, 6);
  auto a = Search(h);
  auto b = Search(h);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->assignment, b->assignment);
}

// A residual graph too large to enumerate goes to the branch and bound, which finds the
// same optimum as exhaustive enumeration; a tiny state budget is a clear error.
TEST(OptcnnSearch, BranchAndBoundMatchesEnumeration) {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    GraphMaker maker(500 + seed);
    CostGraph g;
    const int n = 9;
    for (int i = 0; i < n; ++i) maker.Node(&g, 5);
    for (int j = 1; j < n; ++j) {
      for (int i = 0; i < j; ++i) {
        if ((i + j + seed) % 3 != 0) maker.Edge(&g, i, j);  // dense: nothing folds
      }
    }
    SearchOptions full;
    full.max_enumeration = uint64_t{1} << 40;
    SearchOptions bnb;
    bnb.max_enumeration = 16;
    auto e = Search(g, full);
    auto b = Search(g, bnb);
    ASSERT_TRUE(e.ok() && b.ok());
    EXPECT_FALSE(e->branch_and_bound);
    EXPECT_TRUE(b->branch_and_bound);
    EXPECT_EQ(b->cost, e->cost);
    EXPECT_EQ(*g.Evaluate(b->assignment), e->cost);
    EXPECT_LT(b->states_visited, e->states_visited);

    SearchOptions tiny = bnb;
    tiny.max_search_states = 3;
    auto t = Search(g, tiny);
    EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted) << t.status();
  }
}

TEST(OptcnnSearch, BadGraphsAreInvalidArgument) {
  CostGraph cycle;
  cycle.AddNode({1, 2});
  cycle.AddNode({3});
  cycle.AddNode({4, 5});
  cycle.AddEdge(0, 1, {0, 0});
  cycle.AddEdge(1, 2, {0, 0});
  cycle.AddEdge(2, 0, {0, 0, 0, 0});
  auto r = Search(cycle);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos) << r.status();

  CostGraph size;
  size.AddNode({1, 2});
  size.AddNode({1, 2});
  size.AddEdge(0, 1, {0, 0, 0});
  EXPECT_EQ(Search(size).status().code(), StatusCode::kInvalidArgument);

  CostGraph empty_node;
  empty_node.AddNode({});
  EXPECT_EQ(Search(empty_node).status().code(), StatusCode::kInvalidArgument);

  CostGraph self;
  self.AddNode({1});
  self.AddEdge(0, 0, {0});
  EXPECT_EQ(Search(self).status().code(), StatusCode::kInvalidArgument);

  CostGraph nan;
  nan.AddNode({std::nan("")});
  EXPECT_EQ(Search(nan).status().code(), StatusCode::kInvalidArgument);

  CostGraph ok;
  ok.AddNode({1, 2});
  EXPECT_EQ(ok.Evaluate({2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ok.Evaluate({}).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------
// Configurations and cost tables of models
// ---------------------------------------------------------------------------------------

LayerProfile Conv(const std::string& name, const std::string& input, uint32_t in_c, uint32_t out_c,
                  uint32_t hw, uint32_t k) {
  LayerProfile l;
  l.name = name;
  l.kind = LayerKind::kConv;
  if (!input.empty()) l.inputs = {input};
  l.shape.in_channels = in_c;
  l.shape.in_height = l.shape.in_width = hw;
  l.shape.out_channels = out_c;
  l.shape.out_height = l.shape.out_width = hw;  // stride 1, "same" padding
  l.shape.kernel_h = l.shape.kernel_w = k;
  l.shape.padding = k / 2;
  l.param_bytes = (uint64_t{in_c} * out_c * k * k + out_c) * 4;
  l.flops_per_sample = 2.0 * in_c * out_c * k * k * hw * hw;
  l.activation_bytes = uint64_t{out_c} * hw * hw * 4;
  return l;
}

LayerProfile Fc(const std::string& name, const std::string& input, uint32_t in, uint32_t out) {
  LayerProfile l;
  l.name = name;
  l.kind = LayerKind::kFc;
  l.inputs = {input};
  l.shape.in_channels = in;
  l.shape.in_height = l.shape.in_width = 1;
  l.shape.out_channels = out;
  l.shape.out_height = l.shape.out_width = 1;
  l.param_bytes = (uint64_t{in} * out + out) * 4;
  l.flops_per_sample = 2.0 * in * out;
  l.activation_bytes = uint64_t{out} * 4;
  return l;
}

ClusterSpec Devices(int n) {
  ClusterSpec c;
  c.workers = n;
  return c;
}

int IndexOf(const CostTables& t, int layer, const Degrees& d) {
  const auto& cs = t.configs[layer];
  const auto it = std::find(cs.begin(), cs.end(), d);
  return it == cs.end() ? -1 : static_cast<int>(it - cs.begin());
}

// Bytes on edge e between configuration a of its source and b of its destination.
double EdgeBytes(const CostTables& t, int e, int a, int b) {
  const int nb = t.graph.NumConfigs(t.graph.edges[e].dst);
  return t.edge_bytes[e][static_cast<size_t>(a) * nb + b];
}

// Every degree tuple whose product divides the device count and whose degrees divide the
// dimensions, each once; the FC layer splits sample and channel only.
TEST(OptcnnTables, ConfigurationsAreEveryDividingDegreeTuple) {
  ModelProfile m;
  m.name = "tiny";
  m.layers = {Conv("conv", "", 3, 64, 56, 3), Fc("fc", "conv", 64 * 56 * 56, 16)};
  Options o;
  o.batch_size = 128;
  auto t = BuildCostTables(m, Devices(4), o);
  ASSERT_TRUE(t.ok()) << t.status();
  // Ordered 4-tuples of powers of two with product 1, 2 or 4: 1 + 4 + 10.
  EXPECT_EQ(t->configs[0].size(), 15u);
  // (n, c) with product 1, 2 or 4: 1 + 2 + 3.
  EXPECT_EQ(t->configs[1].size(), 6u);
  for (const auto& cs : t->configs) {
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_EQ(4 % cs[i].Product(), 0);
      for (size_t j = 0; j < i; ++j) EXPECT_FALSE(cs[i] == cs[j]);
    }
  }
  for (const Degrees& d : t->configs[1]) EXPECT_EQ(d.h * d.w, 1);

  // A user list of products: only 4-way configurations.
  o.allowed_products = {4};
  t = BuildCostTables(m, Devices(4), o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->configs[0].size(), 10u);
  EXPECT_EQ(t->configs[1].size(), 3u);

  // Odd dimensions: 5 channels of 7x7 and a batch of 6 split only the sample, by 1 or 2.
  ModelProfile odd;
  odd.name = "odd";
  odd.layers = {Conv("conv", "", 3, 5, 7, 3)};
  Options oo;
  oo.batch_size = 6;
  auto ot = BuildCostTables(odd, Devices(4), oo);
  ASSERT_TRUE(ot.ok()) << ot.status();
  ASSERT_EQ(ot->configs[0].size(), 2u);
  EXPECT_EQ(ot->configs[0][0], (Degrees{1, 1, 1, 1}));
  EXPECT_EQ(ot->configs[0][1], (Degrees{2, 1, 1, 1}));
}

// t_x from tile overlaps, worked by hand: halos of k x k kernels, the reshape before an
// FC layer, forward and backward.
TEST(OptcnnTables, TransferBytesFromTileOverlaps) {
  for (uint32_t k : {3u, 5u}) {
    ModelProfile m;
    m.name = "two-convs";
    m.layers = {Conv("a", "", 3, 8, 16, 3), Conv("b", "a", 8, 8, 16, k)};
    Options o;
    o.batch_size = 4;
    auto t = BuildCostTables(m, Devices(2), o);
    ASSERT_TRUE(t.ok()) << t.status();
    const int h2a = IndexOf(*t, 0, {1, 1, 2, 1}), h2b = IndexOf(*t, 1, {1, 1, 2, 1});
    const int n2a = IndexOf(*t, 0, {2, 1, 1, 1}), n2b = IndexOf(*t, 1, {2, 1, 1, 1});
    const int one = IndexOf(*t, 1, {1, 1, 1, 1});
    ASSERT_GE(h2a, 0);
    ASSERT_GE(h2b, 0);
    ASSERT_GE(n2a, 0);
    ASSERT_GE(n2b, 0);
    // Height split on both: each tile needs k/2 halo rows of the other (4 samples x 8
    // channels x 16 columns per row), forward and backward, 4 bytes each.
    const double halo = 2.0 * (2 * 4 * 8 * 16 * (k / 2)) * 4;
    EXPECT_EQ(EdgeBytes(*t, 0, h2a, h2b), halo);
    // Data parallel on both: nothing crosses.
    EXPECT_EQ(EdgeBytes(*t, 0, n2a, n2b), 0.0);
    // Samples split -> rows split: tile 0 needs rows [0, 8 + k/2) of the 2 samples on the
    // other device, and so does tile 1 (rows [8 - k/2, 16)).
    EXPECT_EQ(EdgeBytes(*t, 0, n2a, h2b), 2.0 * (2 * 2 * 8 * (8 + k / 2) * 16) * 4);
    // Everything onto device 0: half the samples move.
    EXPECT_EQ(EdgeBytes(*t, 0, n2a, one), 2.0 * (2 * 8 * 16 * 16) * 4);
    // Time: the busiest device's inbound bytes forward plus backward over the link, plus
    // one latency each way.
    const ClusterSpec cl = Devices(2);
    const int nb = t->graph.NumConfigs(1);
    const double per_device = 4 * 8 * 16 * (k / 2) * 4;  // halo rows into each device
    EXPECT_DOUBLE_EQ(t->graph.edges[0].cost[static_cast<size_t>(h2a) * nb + h2b],
                     2 * per_device * 8 / cl.worker_bandwidth_bps + 2 * cl.latency_s);
    EXPECT_EQ(t->graph.edges[0].cost[static_cast<size_t>(n2a) * nb + n2b], 0.0);
    // Channels split on both: every tile of b needs all 8 input channels, so each device
    // receives the other's 4 channels forward and sends its gradient of them backward.
    const int c2a = IndexOf(*t, 0, {1, 2, 1, 1}), c2b = IndexOf(*t, 1, {1, 2, 1, 1});
    ASSERT_GE(c2a, 0);
    ASSERT_GE(c2b, 0);
    const double half = 4 * 4 * 16 * 16 * 4;
    EXPECT_EQ(EdgeBytes(*t, 0, c2a, c2b), 2.0 * 2 * half);
    EXPECT_DOUBLE_EQ(t->graph.edges[0].cost[static_cast<size_t>(c2a) * nb + c2b],
                     2 * half * 8 / cl.worker_bandwidth_bps + 2 * cl.latency_s);
  }

  // conv -> fc: every FC tile needs the whole (C, H, W) slice of its samples.
  ModelProfile m;
  m.name = "reshape";
  m.layers = {Conv("conv", "", 3, 8, 4, 3), Fc("fc", "conv", 8 * 4 * 4, 6)};
  Options o;
  o.batch_size = 4;
  auto t = BuildCostTables(m, Devices(2), o);
  ASSERT_TRUE(t.ok()) << t.status();
  const int conv_n2 = IndexOf(*t, 0, {2, 1, 1, 1}), conv_h2 = IndexOf(*t, 0, {1, 1, 2, 1});
  const int fc_c2 = IndexOf(*t, 1, {1, 2, 1, 1}), fc_n2 = IndexOf(*t, 1, {2, 1, 1, 1});
  ASSERT_GE(conv_h2, 0);
  // Each FC tile (all 4 samples) gets the other device's 2 samples x 128 features.
  EXPECT_EQ(EdgeBytes(*t, 0, conv_n2, fc_c2), 2.0 * (2 * 2 * 128) * 4);
  EXPECT_EQ(EdgeBytes(*t, 0, conv_n2, fc_n2), 0.0);
  // Rows split -> samples split: each FC tile needs the other half of the rows of its 2
  // samples.
  EXPECT_EQ(EdgeBytes(*t, 0, conv_h2, fc_n2), 2.0 * (2 * 2 * 8 * 2 * 4) * 4);
}

// t_c = backward_factor x FLOPs of the tile / rate; t_s = 0 unless parameters are
// replicated, else 2 (r - 1) x the layer's parameter bytes move.
TEST(OptcnnTables, ComputeAndSyncCosts) {
  ModelProfile m;
  m.name = "cs";
  m.layers = {Conv("conv", "", 3, 8, 16, 3), Fc("fc", "conv", 8 * 16 * 16, 8)};
  ClusterSpec cl = Devices(4);
  Options o;
  o.batch_size = 8;
  auto t = BuildCostTables(m, cl, o);
  ASSERT_TRUE(t.ok()) << t.status();
  const LayerProfile& conv = m.layers[0];
  const LayerProfile& fc = m.layers[1];
  for (size_t c = 0; c < t->configs[0].size(); ++c) {
    const Degrees d = t->configs[0][c];
    EXPECT_DOUBLE_EQ(t->compute_s[0][c],
                     3.0 * conv.flops_per_sample * 8 / d.Product() / cl.worker_flops);
    const int replicas = d.Product() / d.c;
    EXPECT_EQ(t->sync_bytes[0][c], 2.0 * (replicas - 1) * conv.param_bytes) << d.ToString();
    EXPECT_EQ(t->sync_s[0][c] == 0, replicas == 1) << d.ToString();
  }
  const int n2c2 = IndexOf(*t, 1, {2, 2, 1, 1});
  ASSERT_GE(n2c2, 0);
  EXPECT_EQ(t->sync_bytes[1][n2c2], 2.0 * fc.param_bytes);
  EXPECT_EQ(t->sync_bytes[1][IndexOf(*t, 1, {1, 4, 1, 1})], 0.0);

  // A measured time replaces the analytic one for that configuration only.
  o.measured = {MeasuredCompute{"fc", Degrees{1, 4, 1, 1}, 0.125}};
  auto mt = BuildCostTables(m, cl, o);
  ASSERT_TRUE(mt.ok()) << mt.status();
  const int c4 = IndexOf(*mt, 1, {1, 4, 1, 1});
  EXPECT_EQ(mt->compute_s[1][c4], 0.125);
  EXPECT_EQ(mt->graph.node_cost[1][c4], 0.125);
  EXPECT_EQ(mt->compute_s[1][n2c2], t->compute_s[1][n2c2]);
}

// The tile_to_device hook: every tile on device 0 moves nothing and computes everything
// there; a device out of range is an error.
TEST(OptcnnTables, TileToDeviceHook) {
  ModelProfile m;
  m.name = "hook";
  m.layers = {Conv("a", "", 3, 8, 16, 3), Conv("b", "a", 8, 8, 16, 3)};
  Options o;
  o.batch_size = 4;
  o.tile_to_device = [](const Degrees&, int, int) { return 0; };
  auto t = BuildCostTables(m, Devices(4), o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (double b : t->edge_bytes[0]) EXPECT_EQ(b, 0.0);
  for (size_t c = 1; c < t->configs[0].size(); ++c) {
    EXPECT_DOUBLE_EQ(t->compute_s[0][c], t->compute_s[0][0]);
  }
  o.tile_to_device = [](const Degrees&, int tile, int devices) { return tile + devices; };
  auto bad = BuildCostTables(m, Devices(4), o);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The search on real profiles: optimal against the baselines, the same optimum in both
// elimination modes and with the branch and bound; the paper's rule leaves <= 2 nodes.
TEST(OptcnnModels, SearchOnBuiltinProfiles) {
  for (const std::string name : {"alexnet", "vgg16", "inception_v3", "resnet50", "bigfc"}) {
    auto model = BuiltinProfile(name);
    ASSERT_TRUE(model.ok()) << model.status();
    for (int devices : {4, 16}) {
      SCOPED_TRACE(name + " on " + std::to_string(devices));
      auto t = BuildCostTables(*model, Devices(devices));
      ASSERT_TRUE(t.ok()) << t.status();
      auto ext = Search(t->graph);
      ASSERT_TRUE(ext.ok()) << ext.status();
      SearchOptions paper;
      paper.elimination = Elimination::kPaper;
      auto pap = Search(t->graph, paper);
      ASSERT_TRUE(pap.ok()) << pap.status();
      EXPECT_LE(pap->residual_nodes, 2);
      EXPECT_NEAR(pap->cost, ext->cost, 1e-9 * ext->cost);
      EXPECT_NEAR(*t->graph.Evaluate(ext->assignment), ext->cost, 1e-9 * ext->cost);
      for (auto make : {&DataParallel, &ModelParallel, &OneWeirdTrick}) {
        auto x = make(*t);
        ASSERT_TRUE(x.ok()) << x.status();
        EXPECT_LE(ext->cost, *t->graph.Evaluate(*x) * (1 + 1e-12));
      }
    }
  }
}

// Inception's concatenations (shapeless "other" layers) get their geometry from their
// inputs: they may split channels; a shapeless layer whose size is unexplained splits
// only samples.
TEST(OptcnnModels, ShapelessLayersFollowTheirInputs) {
  auto model = BuiltinProfile("inception_v3");
  ASSERT_TRUE(model.ok());
  auto t = BuildCostTables(*model, Devices(4));
  ASSERT_TRUE(t.ok()) << t.status();
  const int mixed = model->LayerIndex("Mixed_5b");
  ASSERT_GE(mixed, 0);
  bool channel_split = false;
  for (const Degrees& d : t->configs[mixed]) channel_split |= d.c > 1;
  EXPECT_TRUE(channel_split);

  ModelProfile m;
  m.name = "opaque";
  m.layers = {Conv("conv", "", 3, 8, 16, 3)};
  LayerProfile other;
  other.name = "loss";
  other.kind = LayerKind::kOther;
  other.inputs = {"conv"};
  other.activation_bytes = 4;  // a scalar: not the input's geometry
  m.layers.push_back(other);
  auto ot = BuildCostTables(m, Devices(4));
  ASSERT_TRUE(ot.ok()) << ot.status();
  for (const Degrees& d : ot->configs[1]) EXPECT_EQ(d.c * d.h * d.w, 1) << d.ToString();
  EXPECT_EQ(ot->configs[1].size(), 3u);  // n1, n2, n4
}

int FcDegreeSum(const Report& r) {
  int sum = 0;
  for (const LayerChoice& c : r.optcnn.layers) {
    if (c.kind == LayerKind::kFc) sum += c.degrees.Product();
  }
  return sum;
}

// The paper's Table 5 pattern for VGG-16 on 4 devices: the early conv layers data
// parallel, the FC layers channel-parallel or on fewer devices; as bandwidth falls, the
// FC layers use no more devices.
TEST(OptcnnModels, Vgg16OnFourDevicesFollowsThePaper) {
  auto model = BuiltinProfile("vgg16");
  ASSERT_TRUE(model.ok());
  auto rep = Optimize(*model, Devices(4));
  ASSERT_TRUE(rep.ok()) << rep.status();
  for (const LayerChoice& c : rep->optcnn.layers) {
    if (c.layer.rfind("conv1_", 0) == 0 || c.layer.rfind("conv2_", 0) == 0 ||
        c.layer.rfind("conv3_", 0) == 0) {
      EXPECT_EQ(c.degrees, (Degrees{4, 1, 1, 1})) << c.layer << " " << c.degrees.ToString();
    }
    if (c.kind == LayerKind::kFc) {
      EXPECT_TRUE(c.degrees.c > 1 || c.degrees.Product() < 4)
          << c.layer << " " << c.degrees.ToString();
      EXPECT_LT(c.degrees.n, 4) << c.layer;
    }
  }
  ASSERT_EQ(rep->baselines.size(), 3u);
  EXPECT_EQ(rep->baselines[0].name, "data");
  EXPECT_LT(rep->optcnn.step_time_s, rep->baselines[0].step_time_s);
  EXPECT_LT(rep->optcnn.bytes_per_step, rep->baselines[0].bytes_per_step);

  int previous = 1 << 30;
  for (double gbps : {100.0, 40.0, 10.0, 1.0, 0.1}) {
    ClusterSpec cl = Devices(4);
    cl.worker_bandwidth_bps = gbps * 1e9;
    auto r = Optimize(*model, cl);
    ASSERT_TRUE(r.ok()) << r.status();
    const int fc = FcDegreeSum(*r);
    EXPECT_LE(fc, previous) << gbps << " Gb/s";
    previous = fc;
  }
}

ModelProfile TwoConvs() {
  ModelProfile m;
  m.name = "two";
  m.layers = {Conv("a", "", 3, 8, 16, 3), Conv("b", "a", 8, 8, 16, 3)};
  return m;
}

TEST(OptcnnErrors, BadInputIsInvalidArgument) {
  auto expect_error = [](const StatusOr<CostTables>& t, const std::string& needle) {
    ASSERT_FALSE(t.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status();
  };
  // No devices.
  Options zero;
  zero.num_devices = 0;
  expect_error(BuildCostTables(TwoConvs(), Devices(4), zero), "device count");
  expect_error(BuildCostTables(TwoConvs(), Devices(0), Options{}), "workers");
  EXPECT_EQ(Optimize(TwoConvs(), Devices(4), zero).status().code(), StatusCode::kInvalidArgument);
  // More devices than the search takes (its tables grow as configurations^2 x devices):
  // refused before any work, naming the limit.
  Options many;
  many.num_devices = kMaxDevices + 1;
  expect_error(BuildCostTables(TwoConvs(), Devices(4), many), "at most 1024");
  EXPECT_EQ(Optimize(TwoConvs(), Devices(kMaxDevices + 1)).status().code(),
            StatusCode::kInvalidArgument);

  // Dimensions that divide no allowed degree: 5 channels of 7x7, batch 6, only 4-way.
  ModelProfile odd;
  odd.name = "odd";
  odd.layers = {Conv("conv", "", 3, 5, 7, 3)};
  Options four;
  four.batch_size = 6;
  four.allowed_products = {4};
  expect_error(BuildCostTables(odd, Devices(4), four), "no configuration");
  Options out_of_range;
  out_of_range.allowed_products = {8};
  expect_error(BuildCostTables(odd, Devices(4), out_of_range), "allowed product");
  Options negative_batch;
  negative_batch.batch_size = -1;
  expect_error(BuildCostTables(odd, Devices(4), negative_batch), "batch_size");

  // A kind with no parallelizable dimension, and layers that need a shape but have none.
  ModelProfile emb = TwoConvs();
  LayerProfile e;
  e.name = "embed";
  e.kind = LayerKind::kEmbedding;
  emb.layers.insert(emb.layers.begin(), e);
  expect_error(BuildCostTables(emb, Devices(4)), "embedding");
  ModelProfile noshape = TwoConvs();
  noshape.layers[1].shape = LayerShape{};
  expect_error(BuildCostTables(noshape, Devices(4)), "no layer shape");
  ModelProfile fc_noshape;
  fc_noshape.name = "fc";
  fc_noshape.layers = {Conv("a", "", 3, 8, 16, 3), Fc("fc", "a", 8 * 16 * 16, 10)};
  fc_noshape.layers[1].shape.in_channels = 0;
  expect_error(BuildCostTables(fc_noshape, Devices(4)), "no layer shape");

  // Shapes of connected layers that disagree.
  ModelProfile mismatch;
  mismatch.name = "mismatch";
  mismatch.layers = {Conv("a", "", 3, 8, 16, 3), Fc("fc", "a", 1000, 10)};
  expect_error(BuildCostTables(mismatch, Devices(4)), "features");

  // A cycle: a reads b, b reads a.
  ModelProfile cycle = TwoConvs();
  cycle.layers[0].inputs = {"b"};
  expect_error(BuildCostTables(cycle, Devices(4)), "cycle");

  // Measured times that name nothing.
  Options unknown;
  unknown.measured = {MeasuredCompute{"nope", Degrees{}, 1.0}};
  expect_error(BuildCostTables(TwoConvs(), Devices(4), unknown), "unknown layer");
  Options badcfg;
  badcfg.measured = {MeasuredCompute{"a", Degrees{3, 1, 1, 1}, 1.0}};
  expect_error(BuildCostTables(TwoConvs(), Devices(4), badcfg), "not one of its configurations");
}

// The plan's outputs: a strategy per layer, the baselines, JSON with the same numbers.
// The progress callback counts every configuration pair of every edge, ending at the total.
TEST(OptcnnTables, ProgressCountsEveryConfigurationPair) {
  auto model = BuiltinProfile("alexnet");
  ASSERT_TRUE(model.ok());
  Options o;
  uint64_t calls = 0, last_done = 0, last_total = 0;
  bool monotonic = true;
  o.progress = [&](uint64_t done, uint64_t total) {
    monotonic = monotonic && done > last_done && done <= total;
    ++calls;
    last_done = done;
    last_total = total;
  };
  auto t = BuildCostTables(*model, Devices(8), o);
  ASSERT_TRUE(t.ok()) << t.status();
  uint64_t pairs = 0;
  for (const auto& e : t->graph.edges) pairs += e.cost.size();
  EXPECT_GT(calls, 0u);
  EXPECT_TRUE(monotonic);
  EXPECT_EQ(last_done, pairs);
  EXPECT_EQ(last_total, pairs);
}

TEST(OptcnnModels, ReportListsEveryLayerAndTheBaselines) {
  auto model = BuiltinProfile("alexnet");
  ASSERT_TRUE(model.ok());
  auto rep = Optimize(*model, Devices(4));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->optcnn.layers.size(), model->layers.size());
  const std::string table = FormatReport(*rep);
  const std::string json = ReportToJson(*rep);
  for (const LayerProfile& l : model->layers) {
    EXPECT_NE(table.find(l.name), std::string::npos) << l.name;
    EXPECT_NE(json.find("\"" + l.name + "\""), std::string::npos) << l.name;
  }
  for (const char* s : {"optcnn", "data", "model", "owt"}) {
    EXPECT_NE(table.find(s), std::string::npos) << s;
    EXPECT_NE(json.find(std::string("\"name\": \"") + s + "\""), std::string::npos) << s;
  }
  const ParallelStrategy& d = rep->baselines[0];
  EXPECT_TRUE(d.executable);
  EXPECT_DOUBLE_EQ(d.step_time_s, d.compute_s + d.sync_s + d.transfer_s);
  EXPECT_EQ(d.transfer_s, 0.0);  // data parallel everywhere: nothing between layers
}

// Item 5: what LayerPS runs. The big-FC-head CNN on 2 devices: data parallelism becomes the
// uniform plan, OWT (conv n2, every FC layer c2) a stanza plan with 2 channel-parallel FC
// nodes; model parallelism (conv c2) and mixed FC configurations are refused with the layer.
TEST(OptcnnModels, ExecutionPlansOfWhatLayerPsRuns) {
  auto model = BuiltinProfile("bigfc");
  ASSERT_TRUE(model.ok());
  ClusterSpec c = Devices(2);
  c.servers = 2;
  PlanOptions o;
  o.batch = 32;
  Options opt;
  opt.batch_size = 64;
  auto rep = Optimize(*model, c, opt);
  ASSERT_TRUE(rep.ok()) << rep.status();
  const ParallelStrategy* by_name[3] = {nullptr, nullptr, nullptr};
  for (const ParallelStrategy& s : rep->baselines) {
    if (s.name == "data") by_name[0] = &s;
    if (s.name == "owt") by_name[1] = &s;
    if (s.name == "model") by_name[2] = &s;
  }
  ASSERT_TRUE(by_name[0] && by_name[1] && by_name[2]);

  auto data = ExecutionPlan(*model, c, o, *by_name[0], 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->strategy, "uniform");
  EXPECT_EQ(data->cut, -1);

  ASSERT_TRUE(by_name[1]->executable) << by_name[1]->not_executable_reason;
  auto owt = ExecutionPlan(*model, c, o, *by_name[1], 2);
  ASSERT_TRUE(owt.ok()) << owt.status();
  EXPECT_EQ(owt->strategy, "stanza");
  EXPECT_EQ(owt->cut_layer, "fc1");
  EXPECT_EQ(owt->fc_parallel, "channel");
  EXPECT_EQ(owt->roles.fc_nodes, (std::vector<int>{0, 1}));
  auto back = PlanFromJson(PlanToJson(*owt));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fc_parallel, "channel");

  EXPECT_FALSE(by_name[2]->executable);
  auto model_parallel = ExecutionPlan(*model, c, o, *by_name[2], 2);
  ASSERT_FALSE(model_parallel.ok());
  EXPECT_EQ(model_parallel.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(model_parallel.status().message().find("conv1"), std::string::npos)
      << model_parallel.status();

  // A mixed suffix (fc1 c2, fc2 and fc3 on one device): fc2's rows on FC node 0 only.
  ParallelStrategy mixed = *by_name[1];
  mixed.name = "mixed";
  mixed.layers[5].degrees = Degrees{1, 1, 1, 1};
  mixed.layers[6].degrees = Degrees{1, 1, 1, 1};
  auto ran = ExecutionPlan(*model, c, o, mixed, 2);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->fc_parallel, "channel");
  EXPECT_EQ(ran->roles.fc_nodes.size(), 2u);
  EXPECT_EQ(ran->layers[4].servers, (std::vector<int>{0, 1}));  // fc1 c2
  EXPECT_EQ(ran->layers[5].servers, (std::vector<int>{0}));     // fc2 on one FC node
  EXPECT_EQ(ran->layers[5].server_bytes, (std::vector<uint64_t>{model->layers[5].param_bytes}));
  EXPECT_EQ(ran->layers[5].config, "1");
  EXPECT_EQ(ran->layers[4].config, "c2");
  // A sample-parallel FC layer beside channel-parallel ones runs whole on every FC node.
  ParallelStrategy replica = *by_name[1];
  replica.name = "replica";
  replica.layers[5].degrees = Degrees{2, 1, 1, 1};
  auto whole = ExecutionPlan(*model, c, o, replica, 2);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->layers[5].config, "n2");
  EXPECT_EQ(whole->layers[5].servers, (std::vector<int>{0, 1}));
  // A split the FC nodes cannot run (a sample and a channel degree at once): refused.
  ParallelStrategy odd = *by_name[1];
  odd.name = "odd";
  odd.layers[5].degrees = Degrees{2, 2, 1, 1};
  auto refused = ExecutionPlan(*model, c, o, odd, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("layer 'fc2' is n2c2"), std::string::npos)
      << refused.status();

  // More FC nodes than servers to put them beside; a cluster of the wrong size.
  ClusterSpec one_server = c;
  one_server.servers = 1;
  EXPECT_EQ(ExecutionPlan(*model, one_server, o, *by_name[1], 2).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ExecutionPlan(*model, c, o, *by_name[1], 4).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace optcnn
}  // namespace placement
}  // namespace ps
