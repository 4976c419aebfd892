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

}  // namespace
}  // namespace optcnn
}  // namespace placement
}  // namespace ps
