// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The OptCNN search over an abstract cost graph: node elimination (Eq. 2), edge
// elimination (Eq. 3) to a fixpoint, enumeration (or branch and bound) of what is left,
// then the eliminations undone in reverse order to recover every node's configuration.
//
// Representation: flat vectors only. Live edges are kept in a small per-node incidence
// list (degrees are tiny in CNN graphs); every cost matrix is a contiguous row-major
// vector. The min-plus products of Eq. 2 run over contiguous rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ps/optcnn.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    return std::numeric_limits<uint64_t>::max();
  }
  return a * b;
}

// One live or dead edge of the working graph. Matrix is cost[ca * n(b) + cb].
struct WorkEdge {
  int a;
  int b;
  bool alive;
  std::vector<double> cost;
};

// What undoing one elimination needs.
struct UndoRecord {
  enum Kind : uint8_t { kDegree2, kLeaf, kIsolated } kind;
  int node;              // the eliminated node
  int a;                 // first neighbour (kDegree2, kLeaf)
  int b;                 // second neighbour (kDegree2)
  std::vector<int> arg;  // kDegree2: arg[ca * n(b) + cb]; kLeaf: arg[ca]; kIsolated: arg[0]
};

class Eliminator {
 public:
  Eliminator(const CostGraph& g, Elimination mode) : mode_(mode) {
    const int n = g.num_nodes();
    node_cost_ = g.node_cost;
    alive_.assign(n, true);
    incident_.assign(n, {});
    edges_.reserve(g.edges.size() * 2);
    for (const auto& e : g.edges) {
      AddEdge(e.src, e.dst, e.cost);
    }
  }

  // Runs eliminations to a fixpoint.
  void Run() {
    // Merge parallel edges first, then a worklist of nodes whose degree may allow a fold.
    std::vector<int> work;
    work.reserve(node_cost_.size());
    for (int v = 0; v < static_cast<int>(node_cost_.size()); ++v) MergeParallel(v);
    for (int v = static_cast<int>(node_cost_.size()) - 1; v >= 0; --v) work.push_back(v);
    // Process lowest index first (work is a stack, pushed in reverse) for determinism.
    while (!work.empty()) {
      const int v = work.back();
      work.pop_back();
      if (!alive_[v]) continue;
      Compact(v);
      const auto& inc = incident_[v];
      if (inc.size() == 2 && Eligible2(v)) {
        // e1 is the in-edge when there is one, so the new edge keeps the direction of
        // the path it replaces (the paper's rule looks at directions).
        int e1 = inc[0];
        int e2 = inc[1];
        if (edges_[e1].b != v && edges_[e2].b == v) std::swap(e1, e2);
        const int a = Other(e1, v);
        const int b = Other(e2, v);
        FoldDegree2(v, e1, e2);
        MergeParallel(a);
        work.push_back(b);
        work.push_back(a);
      } else if (mode_ == Elimination::kExtended && inc.size() == 1) {
        const int a = Other(inc[0], v);
        FoldLeaf(v, inc[0]);
        work.push_back(a);
      } else if (mode_ == Elimination::kExtended && inc.empty()) {
        FoldIsolated(v);
      }
    }
  }

  int eliminated_nodes() const { return eliminated_nodes_; }
  int eliminated_edges() const { return eliminated_edges_; }
  double constant() const { return constant_; }
  const std::vector<std::vector<double>>& node_cost() const { return node_cost_; }
  const std::vector<WorkEdge>& edges() const { return edges_; }
  const std::vector<char>& alive() const { return alive_; }

  // Given the configuration of every residual node, fills in the eliminated ones.
  void Undo(std::vector<int>* assignment) const {
    auto& x = *assignment;
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      switch (it->kind) {
        case UndoRecord::kDegree2: {
          const int nb = static_cast<int>(node_cost_[it->b].size());
          x[it->node] = it->arg[static_cast<size_t>(x[it->a]) * nb + x[it->b]];
          break;
        }
        case UndoRecord::kLeaf:
          x[it->node] = it->arg[x[it->a]];
          break;
        case UndoRecord::kIsolated:
          x[it->node] = it->arg[0];
          break;
      }
    }
  }

 private:
  int N(int v) const { return static_cast<int>(node_cost_[v].size()); }
  int Other(int e, int v) const { return edges_[e].a == v ? edges_[e].b : edges_[e].a; }

  int AddEdge(int a, int b, std::vector<double> cost) {
    const int id = static_cast<int>(edges_.size());
    edges_.push_back(WorkEdge{a, b, true, std::move(cost)});
    incident_[a].push_back(id);
    incident_[b].push_back(id);
    return id;
  }

  void Compact(int v) {
    auto& inc = incident_[v];
    inc.erase(std::remove_if(inc.begin(), inc.end(), [&](int e) { return !edges_[e].alive; }),
              inc.end());
  }

  // The paper's rule needs one in-edge and one out-edge; kExtended any two edges.
  bool Eligible2(int v) const {
    const auto& inc = incident_[v];
    if (mode_ == Elimination::kExtended) return true;
    const bool first_in = edges_[inc[0]].b == v;
    const bool second_in = edges_[inc[1]].b == v;
    return first_in != second_in;
  }

  // Eq. 3: every live edge between v and the same neighbour is summed into the first
  // (lowest id), transposing when it points the other way.
  void MergeParallel(int v) {
    Compact(v);
    auto& inc = incident_[v];
    for (size_t i = 0; i < inc.size(); ++i) {
      WorkEdge& keep = edges_[inc[i]];
      if (!keep.alive) continue;
      const int u = keep.a == v ? keep.b : keep.a;
      for (size_t j = i + 1; j < inc.size(); ++j) {
        WorkEdge& dup = edges_[inc[j]];
        if (!dup.alive) continue;
        const int w = dup.a == v ? dup.b : dup.a;
        if (w != u) continue;
        if (dup.a == keep.a) {
          for (size_t k = 0; k < keep.cost.size(); ++k) keep.cost[k] += dup.cost[k];
        } else {
          const int nb = N(keep.b);
          const int na = N(keep.a);
          for (int ca = 0; ca < na; ++ca) {
            for (int cb = 0; cb < nb; ++cb) {
              keep.cost[static_cast<size_t>(ca) * nb + cb] +=
                  dup.cost[static_cast<size_t>(cb) * na + ca];
            }
          }
        }
        dup.alive = false;
        dup.cost.clear();
        dup.cost.shrink_to_fit();
        ++eliminated_edges_;
      }
    }
    Compact(v);
    // The neighbours' incidence lists hold dead ids now; they are compacted lazily.
  }

  // Copies edge e as a matrix oriented [c_from][c_to] into out (size n(from) * n(to)).
  void Oriented(int e, int from, std::vector<double>* out) const {
    const WorkEdge& we = edges_[e];
    const int to = we.a == from ? we.b : we.a;
    const int nf = N(from);
    const int nt = N(to);
    out->resize(static_cast<size_t>(nf) * nt);
    if (we.a == from) {
      std::copy(we.cost.begin(), we.cost.end(), out->begin());
    } else {
      for (int cf = 0; cf < nf; ++cf) {
        for (int ct = 0; ct < nt; ++ct) {
          (*out)[static_cast<size_t>(cf) * nt + ct] = we.cost[static_cast<size_t>(ct) * nf + cf];
        }
      }
    }
  }

  // Eq. 2: v between a (edge e1) and b (edge e2) becomes one edge (a, b) with
  // cost[ca][cb] = min_cv e1[ca][cv] + node[v][cv] + e2[cv][cb], argmin remembered.
  void FoldDegree2(int v, int e1, int e2) {
    const int a = Other(e1, v);
    const int b = Other(e2, v);
    const int na = N(a);
    const int nv = N(v);
    const int nb = N(b);
    Oriented(e1, a, &left_);   // [ca][cv]
    Oriented(e2, v, &right_);  // [cv][cb]
    const auto& nc = node_cost_[v];
    std::vector<double> cost(static_cast<size_t>(na) * nb, kInf);
    UndoRecord rec{UndoRecord::kDegree2, v, a, b, std::vector<int>(cost.size(), 0)};
    for (int ca = 0; ca < na; ++ca) {
      double* row = cost.data() + static_cast<size_t>(ca) * nb;
      int* arg = rec.arg.data() + static_cast<size_t>(ca) * nb;
      const double* l = left_.data() + static_cast<size_t>(ca) * nv;
      for (int cv = 0; cv < nv; ++cv) {
        const double base = l[cv] + nc[cv];
        const double* r = right_.data() + static_cast<size_t>(cv) * nb;
        for (int cb = 0; cb < nb; ++cb) {
          const double t = base + r[cb];
          if (t < row[cb]) {  // strict: the lowest cv wins a tie
            row[cb] = t;
            arg[cb] = cv;
          }
        }
      }
    }
    Kill(v, e1, e2);
    AddEdge(a, b, std::move(cost));
    undo_.push_back(std::move(rec));
    ++eliminated_nodes_;
  }

  // A node with one edge: its best response to each configuration of the neighbour is
  // added to the neighbour's node cost.
  void FoldLeaf(int v, int e) {
    const int a = Other(e, v);
    const int na = N(a);
    const int nv = N(v);
    Oriented(e, a, &left_);
    const auto& nc = node_cost_[v];
    UndoRecord rec{UndoRecord::kLeaf, v, a, -1, std::vector<int>(na, 0)};
    for (int ca = 0; ca < na; ++ca) {
      const double* l = left_.data() + static_cast<size_t>(ca) * nv;
      double best = kInf;
      for (int cv = 0; cv < nv; ++cv) {
        const double t = l[cv] + nc[cv];
        if (t < best) {
          best = t;
          rec.arg[ca] = cv;
        }
      }
      node_cost_[a][ca] += best;
    }
    Kill(v, e, -1);
    undo_.push_back(std::move(rec));
    ++eliminated_nodes_;
  }

  void FoldIsolated(int v) {
    const auto& nc = node_cost_[v];
    int best = 0;
    for (int c = 1; c < N(v); ++c) {
      if (nc[c] < nc[best]) best = c;
    }
    constant_ += nc[best];
    alive_[v] = false;
    undo_.push_back(UndoRecord{UndoRecord::kIsolated, v, -1, -1, std::vector<int>{best}});
    ++eliminated_nodes_;
  }

  void Kill(int v, int e1, int e2) {
    alive_[v] = false;
    edges_[e1].alive = false;
    edges_[e1].cost = {};
    if (e2 >= 0) {
      edges_[e2].alive = false;
      edges_[e2].cost = {};
    }
    incident_[v].clear();
  }

  Elimination mode_;
  std::vector<std::vector<double>> node_cost_;
  std::vector<WorkEdge> edges_;
  std::vector<std::vector<int>> incident_;
  std::vector<char> alive_;
  std::vector<UndoRecord> undo_;
  std::vector<double> left_, right_;  // scratch
  double constant_ = 0;
  int eliminated_nodes_ = 0;
  int eliminated_edges_ = 0;
};

// Depth-first enumeration of the residual graph in node-index order. Each edge is charged
// when its later endpoint (in that order) is assigned. With `prune`, a branch whose partial
// cost plus a lower bound on the rest exceeds the best so far is cut (branch and bound).
class Enumerator {
 public:
  Enumerator(const std::vector<int>& nodes, const std::vector<std::vector<double>>& node_cost,
             const std::vector<const WorkEdge*>& edges)
      : nodes_(nodes), node_cost_(node_cost) {
    const int k = static_cast<int>(nodes.size());
    std::vector<int> pos(node_cost.size(), -1);
    for (int i = 0; i < k; ++i) pos[nodes[i]] = i;
    later_.assign(k, {});
    for (const WorkEdge* e : edges) {
      const int pa = pos[e->a];
      const int pb = pos[e->b];
      // Charged at the later position; `other` is the earlier one.
      if (pa > pb) {
        later_[pa].push_back(Charge{pb, e, /*self_is_a=*/true});
      } else {
        later_[pb].push_back(Charge{pa, e, /*self_is_a=*/false});
      }
    }
    // suffix_lb_[i]: a lower bound on what positions i.. add (cheapest entries).
    suffix_lb_.assign(k + 1, 0.0);
    for (int i = k - 1; i >= 0; --i) {
      double lb = *std::min_element(node_cost[nodes[i]].begin(), node_cost[nodes[i]].end());
      for (const Charge& ch : later_[i]) {
        lb += *std::min_element(ch.edge->cost.begin(), ch.edge->cost.end());
      }
      suffix_lb_[i] = suffix_lb_[i + 1] + lb;
    }
    current_.assign(k, 0);
    best_.assign(k, 0);
  }

  // Returns false when max_states was exceeded.
  bool Run(bool prune, uint64_t max_states) {
    prune_ = prune;
    max_states_ = max_states;
    best_cost_ = kInf;
    if (nodes_.empty()) {
      best_cost_ = 0;
      return true;
    }
    Dfs(0, 0.0);
    return !exceeded_;
  }

  double best_cost() const { return best_cost_; }
  const std::vector<int>& best() const { return best_; }
  uint64_t states() const { return states_; }

 private:
  struct Charge {
    int other;  // position of the earlier endpoint
    const WorkEdge* edge;
    bool self_is_a;  // the later endpoint is edge->a
  };

  void Dfs(int i, double partial) {
    const int k = static_cast<int>(nodes_.size());
    const int v = nodes_[i];
    const auto& nc = node_cost_[v];
    const int nv = static_cast<int>(nc.size());
    for (int c = 0; c < nv; ++c) {
      if (exceeded_) return;
      if (++states_ > max_states_) {
        exceeded_ = true;
        return;
      }
      double cost = partial + nc[c];
      for (const Charge& ch : later_[i]) {
        const int co = current_[ch.other];
        const WorkEdge& e = *ch.edge;
        const int nb = static_cast<int>(node_cost_[e.b].size());
        cost += ch.self_is_a ? e.cost[static_cast<size_t>(c) * nb + co]
                             : e.cost[static_cast<size_t>(co) * nb + c];
      }
      current_[i] = c;
      if (i + 1 == k) {
        if (cost < best_cost_) {  // strict: the lexicographically first optimum stays
          best_cost_ = cost;
          best_ = current_;
        }
        continue;
      }
      if (prune_ && cost + suffix_lb_[i + 1] > best_cost_ + 1e-12 * std::fabs(best_cost_)) {
        continue;
      }
      Dfs(i + 1, cost);
    }
  }

  const std::vector<int>& nodes_;
  const std::vector<std::vector<double>>& node_cost_;
  std::vector<std::vector<Charge>> later_;
  std::vector<double> suffix_lb_;
  std::vector<int> current_, best_;
  double best_cost_ = kInf;
  bool prune_ = false;
  bool exceeded_ = false;
  uint64_t max_states_ = 0;
  uint64_t states_ = 0;
};

}  // namespace

int CostGraph::AddNode(std::vector<double> cost) {
  node_cost.push_back(std::move(cost));
  return num_nodes() - 1;
}

int CostGraph::AddEdge(int src, int dst, std::vector<double> cost) {
  edges.push_back(Edge{src, dst, std::move(cost)});
  return static_cast<int>(edges.size()) - 1;
}

Status CostGraph::Validate(bool require_acyclic) const {
  const int n = num_nodes();
  for (int v = 0; v < n; ++v) {
    if (node_cost[v].empty()) {
      return InvalidArgument("cost graph: node " + std::to_string(v) + " has no configuration");
    }
    for (double x : node_cost[v]) {
      if (!std::isfinite(x)) {
        return InvalidArgument("cost graph: node " + std::to_string(v) + " has a non-finite cost");
      }
    }
  }
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> out(n);
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    const std::string name = "cost graph: edge " + std::to_string(i);
    if (e.src < 0 || e.src >= n || e.dst < 0 || e.dst >= n) {
      return InvalidArgument(name + " names a node that does not exist");
    }
    if (e.src == e.dst)
      return InvalidArgument(name + " is a self-loop on node " + std::to_string(e.src));
    const size_t want = static_cast<size_t>(NumConfigs(e.src)) * NumConfigs(e.dst);
    if (e.cost.size() != want) {
      return InvalidArgument(name + " has " + std::to_string(e.cost.size()) + " costs, expected " +
                             std::to_string(want));
    }
    for (double x : e.cost) {
      if (!std::isfinite(x)) return InvalidArgument(name + " has a non-finite cost");
    }
    ++indegree[e.dst];
    out[e.src].push_back(e.dst);
  }
  if (require_acyclic) {
    std::vector<int> ready;
    for (int v = 0; v < n; ++v) {
      if (indegree[v] == 0) ready.push_back(v);
    }
    int seen = 0;
    while (!ready.empty()) {
      const int v = ready.back();
      ready.pop_back();
      ++seen;
      for (int w : out[v]) {
        if (--indegree[w] == 0) ready.push_back(w);
      }
    }
    if (seen != n) {
      for (int v = 0; v < n; ++v) {
        if (indegree[v] > 0) {
          return InvalidArgument("cost graph: the edges form a cycle (through node " +
                                 std::to_string(v) + ")");
        }
      }
    }
  }
  return Status::OK();
}

StatusOr<double> CostGraph::Evaluate(const std::vector<int>& assignment) const {
  if (assignment.size() != node_cost.size()) {
    return InvalidArgument("assignment has " + std::to_string(assignment.size()) + " entries for " +
                           std::to_string(num_nodes()) + " nodes");
  }
  double cost = 0;
  for (int v = 0; v < num_nodes(); ++v) {
    if (assignment[v] < 0 || assignment[v] >= NumConfigs(v)) {
      return InvalidArgument("assignment: node " + std::to_string(v) + " has configuration " +
                             std::to_string(assignment[v]) + " of " +
                             std::to_string(NumConfigs(v)));
    }
    cost += node_cost[v][assignment[v]];
  }
  for (const Edge& e : edges) {
    if (e.src < 0 || e.src >= num_nodes() || e.dst < 0 || e.dst >= num_nodes() ||
        e.cost.size() != static_cast<size_t>(NumConfigs(e.src)) * NumConfigs(e.dst)) {
      return InvalidArgument("assignment: the graph is malformed");
    }
    cost += e.cost[static_cast<size_t>(assignment[e.src]) * NumConfigs(e.dst) + assignment[e.dst]];
  }
  return cost;
}

StatusOr<SearchResult> Search(const CostGraph& graph, const SearchOptions& options) {
  Status st = graph.Validate(/*require_acyclic=*/true);
  if (!st.ok()) return st;
  if (options.max_enumeration < 1 || options.max_search_states < 1) {
    return InvalidArgument("search options: max_enumeration and max_search_states must be >= 1");
  }
  Eliminator elim(graph, options.elimination);
  elim.Run();

  std::vector<int> residual;
  uint64_t product = 1;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    if (elim.alive()[v]) {
      residual.push_back(v);
      product = SaturatingMul(product, elim.node_cost()[v].size());
    }
  }
  std::vector<const WorkEdge*> live;
  for (const WorkEdge& e : elim.edges()) {
    if (e.alive) live.push_back(&e);
  }

  SearchResult result;
  result.eliminated_nodes = elim.eliminated_nodes();
  result.eliminated_edges = elim.eliminated_edges();
  result.residual_nodes = static_cast<int>(residual.size());
  result.residual_edges = static_cast<int>(live.size());
  result.residual_product = residual.empty() ? 0 : product;
  result.branch_and_bound = product > options.max_enumeration;

  Enumerator en(residual, elim.node_cost(), live);
  const uint64_t limit =
      result.branch_and_bound ? options.max_search_states : std::numeric_limits<uint64_t>::max();
  if (!en.Run(result.branch_and_bound, limit)) {
    return ResourceExhausted("optcnn search: the branch and bound visited more than " +
                             std::to_string(options.max_search_states) + " states over " +
                             std::to_string(residual.size()) +
                             " residual nodes; raise SearchOptions::max_search_states");
  }
  result.states_visited = en.states();
  result.assignment.assign(graph.num_nodes(), 0);
  for (size_t i = 0; i < residual.size(); ++i) result.assignment[residual[i]] = en.best()[i];
  elim.Undo(&result.assignment);
  result.cost = en.best_cost() + elim.constant();
  return result;
}

StatusOr<SearchResult> BruteForce(const CostGraph& graph, uint64_t max_assignments) {
  Status st = graph.Validate(/*require_acyclic=*/false);
  if (!st.ok()) return st;
  const int n = graph.num_nodes();
  uint64_t total = 1;
  for (int v = 0; v < n; ++v) total = SaturatingMul(total, graph.NumConfigs(v));
  if (total > max_assignments) {
    return ResourceExhausted("brute force: " + std::to_string(total) +
                             " assignments exceed the limit of " + std::to_string(max_assignments));
  }
  SearchResult result;
  result.residual_nodes = n;
  result.residual_edges = static_cast<int>(graph.edges.size());
  result.residual_product = n == 0 ? 0 : total;
  std::vector<int> x(n, 0);
  double best = kInf;
  // Mixed-radix counter with node 0 most significant: lexicographic order.
  while (true) {
    ++result.states_visited;
    const double c = graph.Evaluate(x).value();
    if (c < best) {
      best = c;
      result.assignment = x;
    }
    int v = n - 1;
    while (v >= 0 && ++x[v] == graph.NumConfigs(v)) x[v--] = 0;
    if (v < 0) break;
  }
  result.cost = n == 0 ? 0 : best;
  return result;
}

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
