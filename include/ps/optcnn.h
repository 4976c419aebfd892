// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN (Jia et al., ICML 2018): layer-wise parallelism. Every layer picks its own
// parallel configuration, a degree per parallelizable output dimension (sample, channel,
// height, width); the cost of a choice for the whole model is Eq. 1 of the paper,
//
//   cost = sum_layers [ t_c(l, c_l) + t_s(l, c_l) ] + sum_edges t_x(e, c_src, c_dst),
//
// and the node/edge elimination search (Eq. 2, Eq. 3) finds its minimum. docs/optcnn.md
// gives the formulas, the configuration rules and the tile-to-device rule.
//
// Two levels:
//  - CostGraph / Search / BruteForce: the search over an abstract graph whose nodes carry
//    a cost per configuration and whose edges carry a cost matrix. Knows nothing of layers.
//  - BuildCostTables / Optimize: the configurations and cost tables of a ModelProfile on a
//    ClusterSpec, the search's strategy next to data, model and OWT parallelism.
//
// Errors the caller can cause (bad graph, bad profile, no devices, a cycle) come back as
// Status (InvalidArgument, or ResourceExhausted when a search bound is hit); nothing aborts.
//
// Thread-safety: all types are plain values and all functions are pure; distinct calls
// may run concurrently. A user-supplied TileToDevice hook is called from the calling thread
// only.
#ifndef PS_OPTCNN_H_
#define PS_OPTCNN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ps/placement.h"
#include "ps/status.h"

namespace ps {
namespace placement {
namespace optcnn {

// ---------------------------------------------------------------------------------------
// The abstract search
// ---------------------------------------------------------------------------------------

// A cost graph: node v has NumConfigs(v) >= 1 configurations, each with a cost; an edge
// (src, dst) has a cost per pair of configurations, stored row-major:
// cost[c_src * NumConfigs(dst) + c_dst]. Parallel edges are allowed (they are summed).
// All costs must be finite; they need not be non-negative.
struct CostGraph {
  struct Edge {
    int src = 0;
    int dst = 0;
    std::vector<double> cost;
  };
  std::vector<std::vector<double>> node_cost;  // node_cost[v][c]
  std::vector<Edge> edges;

  // Appends a node and returns its index.
  int AddNode(std::vector<double> cost);
  // Appends an edge and returns its index. Sizes are checked by Validate(), not here.
  int AddEdge(int src, int dst, std::vector<double> cost);

  int num_nodes() const { return static_cast<int>(node_cost.size()); }
  int NumConfigs(int v) const { return static_cast<int>(node_cost[v].size()); }

  // InvalidArgument when a node has no configuration, an edge names a missing node or
  // itself, a matrix has the wrong size, a cost is not finite, or (require_acyclic) the
  // directed edges form a cycle. The message names the first offence.
  Status Validate(bool require_acyclic = true) const;

  // Eq. 1 for one configuration per node (assignment[v] in [0, NumConfigs(v))); sums node
  // costs in node order, then edge costs in edge order. InvalidArgument on a bad assignment.
  StatusOr<double> Evaluate(const std::vector<int>& assignment) const;
};

// Which nodes the search folds away before it enumerates what is left.
enum class Elimination : int {
  // The paper: node elimination only for a node with exactly one in-edge and one
  // out-edge (after parallel edges are merged), plus edge elimination.
  kPaper = 0,
  // Also a node with two incident edges in any direction, a node with one edge (folded
  // into its neighbour's node costs) and an isolated node. Exact for the same reason
  // as Eq. 2 (the cost is a sum of node and pairwise terms); leaves fewer nodes to
  // enumerate. The default.
  kExtended = 1,
};

struct SearchOptions {
  // Default kExtended.
  Elimination elimination = Elimination::kExtended;
  // When the product of the residual nodes' configuration counts is at most this, the
  // residual graph is enumerated exhaustively; above it, a depth-first branch and bound
  // (a lower bound from the cheapest node and edge entries) takes over. Default 2^20,
  // any value >= 1.
  uint64_t max_enumeration = uint64_t{1} << 20;
  // The most partial assignments the branch and bound may visit before giving up with
  // ResourceExhausted. Default 2^32; any value >= 1.
  uint64_t max_search_states = uint64_t{1} << 32;
};

struct SearchResult {
  std::vector<int> assignment;  // one configuration per node
  double cost = 0;              // Eq. 1 of the assignment, as the search summed it
  int eliminated_nodes = 0;     // Eq. 2 (and, kExtended, leaf/isolated) eliminations
  int eliminated_edges = 0;     // Eq. 3 merges
  int residual_nodes = 0;       // nodes left for enumeration
  int residual_edges = 0;
  uint64_t residual_product = 0;  // product of their configuration counts (saturating)
  bool branch_and_bound = false;  // the residual graph was too large to enumerate
  uint64_t states_visited = 0;    // partial assignments visited while enumerating
};

// The optimum of Eq. 1 over all assignments. Deterministic: ties between configurations
// are broken towards the lowest index (in the eliminations, and lexicographically over
// the residual nodes in index order). Errors: Validate(), ResourceExhausted.
StatusOr<SearchResult> Search(const CostGraph& graph, const SearchOptions& options = {});

// Exhaustive enumeration of every assignment (for tests): the lexicographically first
// optimum in node order. ResourceExhausted when there are more than max_assignments.
StatusOr<SearchResult> BruteForce(const CostGraph& graph, uint64_t max_assignments = 1u << 26);

// ---------------------------------------------------------------------------------------
// Configurations and cost tables of a model
// ---------------------------------------------------------------------------------------

// A parallel configuration: the degree of each output dimension. Dimensions a layer
// cannot split stay 1. The tiles are the product of the degrees; tile t has coordinates
// (tn, tc, th, tw) with t = ((tn * c + tc) * h + th) * w + tw, and covers an equal slice
// [i * S / d, (i + 1) * S / d) of every dimension (degrees divide the dimensions).
struct Degrees {
  int n = 1;  // sample
  int c = 1;  // channel (output channels / output features)
  int h = 1;  // height
  int w = 1;  // width
  int Product() const { return n * c * h * w; }
  // "n4", "c2", "n2h2", "1" (one device).
  std::string ToString() const;
};
inline bool operator==(const Degrees& a, const Degrees& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
}

// Maps tile `tile` of a configuration to a device in [0, num_devices). The default
// (an empty function) is contiguous: tile t on device t, so a configuration with p
// tiles uses devices 0..p-1. A hook may map several tiles to one device; compute is
// then the sum of the tiles on the busiest device.
using TileToDevice = std::function<int(const Degrees& degrees, int tile, int num_devices)>;

// A measured compute time (forward + backward of one tile) that replaces the analytic
// t_c of one layer in one configuration.
struct MeasuredCompute {
  std::string layer;
  Degrees degrees;
  double seconds = 0;  // >= 0
};

// The most devices a search takes (docs/optcnn.md, "Cost").
constexpr int kMaxDevices = 1024;

struct Options {
  // Devices the model is split over. Default -1: cluster.workers. 0 or less, or more
  // than kMaxDevices, is an error.
  int num_devices = -1;
  // Global mini-batch (samples per step). Default 0: 32 per device. The sample degree
  // must divide it.
  int batch_size = 0;
  // Allowed degree products (tiles per configuration). Default empty: every divisor of
  // num_devices. Entries must lie in [1, num_devices].
  std::vector<int> allowed_products;
  // t_c = backward_factor * forward FLOPs of the tile / device rate. Default 3
  // (backward ~ 2x forward: gradients of inputs and of weights).
  double backward_factor = 3.0;
  // Device compute rate (FLOP/s) and per-device link bandwidth (bit/s, each direction).
  // Default 0: cluster.worker_flops and cluster.worker_bandwidth_bps.
  double device_flops = 0;
  double link_bandwidth_bps = 0;
  // Per-message latency (s). Default negative: cluster.latency_s.
  double latency_s = -1;
  // Tile placement; default contiguous (see TileToDevice).
  TileToDevice tile_to_device;
  // Measured compute times; each must name a layer and one of its configurations.
  std::vector<MeasuredCompute> measured;
  SearchOptions search;
  // Called from the calling thread while the Eq. 1 tables are built, the long part of a
  // search on many devices (docs/optcnn.md, "Cost"): configuration pairs costed so far,
  // and in all. Optional.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// The configurations and Eq. 1 tables of a model. Node v of `graph` is layer v of the
// profile; each edge is (input layer -> layer) for one entry of LayerProfile::inputs
// (the model input has no edge: the data loader hands every tile its samples).
struct CostTables {
  std::vector<std::string> layer_names;
  std::vector<LayerKind> kinds;
  std::vector<std::vector<Degrees>> configs;    // configs[v][c]
  std::vector<std::vector<double>> compute_s;   // t_c
  std::vector<std::vector<double>> sync_s;      // t_s
  std::vector<std::vector<double>> sync_bytes;  // parameter-sync bytes, all devices together
  std::vector<std::vector<double>> edge_bytes;  // per graph edge, like its cost matrix:
                                                // bytes crossing devices, fwd + bwd
  CostGraph graph;                              // node = t_c + t_s, edge = t_x
  int num_devices = 0;
  int batch_size = 0;
};

// Configurations of every layer (rule in docs/optcnn.md) and their costs. Errors
// (InvalidArgument): a bad profile (empty, duplicate or unknown inputs, not in
// topological order: a cycle), no devices, an embedding layer, a conv/pool/fc layer
// without a shape, shapes of connected layers that disagree, a layer with no valid
// configuration (its dimensions divide no allowed degree), a bad measured entry.
StatusOr<CostTables> BuildCostTables(const ModelProfile& model, const ClusterSpec& cluster,
                                     const Options& options = {});

// The per-layer configurations of a strategy and their cost.
struct LayerChoice {
  std::string layer;
  LayerKind kind = LayerKind::kOther;
  Degrees degrees;
  double compute_s = 0;
  double sync_s = 0;
  double sync_bytes = 0;
};
struct ParallelStrategy {
  std::string name;               // "optcnn", "data", "model", "owt"
  std::vector<int> config_index;  // per layer, into CostTables::configs
  std::vector<LayerChoice> layers;
  double step_time_s = 0;     // Eq. 1
  double compute_s = 0;       // sum of t_c
  double sync_s = 0;          // sum of t_s
  double transfer_s = 0;      // sum of t_x
  double bytes_per_step = 0;  // sync + transfer bytes crossing devices
  // True when LayerPS can run it (ExecutionPlan): every layer before the first FC layer
  // data-parallel on all devices (sample degree = devices), and the layers from the first
  // FC layer on either the same, or all one configuration that FC nodes run: channel-
  // parallel cN (model parallelism over N FC nodes), or nN with N < devices (N replicas).
  bool executable = false;
  // Why not, naming the first layer that breaks the rule; empty when executable.
  std::string not_executable_reason;
};

// The cost of an assignment (config_index per layer). InvalidArgument when it is malformed.
StatusOr<ParallelStrategy> EvaluateStrategy(const CostTables& tables, const std::string& name,
                                            const std::vector<int>& config_index);

// The baselines, as assignments:
//  - data: every layer sample degree = devices (or the largest divisor of the batch that
//    is an allowed product, when devices does not divide it);
//  - model: every layer channel degree = the largest allowed product dividing its
//    channels (shapeless layers: one device);
//  - owt ("one weird trick"): layers before the first FC layer (in profile order) as in
//    data, the FC layer and every later layer as in model.
StatusOr<std::vector<int>> DataParallel(const CostTables& tables);
StatusOr<std::vector<int>> ModelParallel(const CostTables& tables);
StatusOr<std::vector<int>> OneWeirdTrick(const CostTables& tables);

struct Report {
  std::string model;
  int num_devices = 0;
  int batch_size = 0;
  ParallelStrategy optcnn;
  std::vector<ParallelStrategy> baselines;  // data, model, owt
  SearchResult search;
  double tables_seconds = 0;  // wall time of BuildCostTables
  double search_seconds = 0;  // wall time of Search (eliminations, enumeration, undo)
};

// The placement plan (ps/placement.h) that runs an executable strategy on LayerPS, for
// layerps-plan --write_plan and the placement executor (examples/python/placement_cnn.py):
//  - every layer data-parallel: the "uniform" plan (every worker trains the whole model
//    through the servers);
//  - else a "stanza" plan cut at the first FC layer, with N FC nodes on the last N server
//    machines and fc_parallel "channel" (cN: FC node j holds the j-th block of output
//    channels) or "data" (nN: N replicas). The FC nodes are extra worker processes beside
//    those servers; the cost model's devices are the conv workers (cluster.workers), and
//    with one server per device machine the FC node's traffic is what the model counts.
// FailedPrecondition when the strategy is not executable (its reason), or N exceeds the
// servers or the workers; InvalidArgument when cluster.workers is not num_devices.
StatusOr<Plan> ExecutionPlan(const ModelProfile& model, const ClusterSpec& cluster,
                             const PlanOptions& options, const ParallelStrategy& strategy,
                             int num_devices);

// BuildCostTables, Search, the baselines. Errors as theirs.
StatusOr<Report> Optimize(const ModelProfile& model, const ClusterSpec& cluster,
                          const Options& options = {});

// A human-readable table (per-layer strategy; step time and bytes next to the
// baselines) and a JSON object with the same content.
std::string FormatReport(const Report& report);
std::string ReportToJson(const Report& report);

}  // namespace optcnn
}  // namespace placement
}  // namespace ps

#endif  // PS_OPTCNN_H_
