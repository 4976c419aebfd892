// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Placement: the description of a model by its layers (a profile) and of a cluster (a
// cluster spec), from which the strategies in src/placement/ derive a plan. A pure
// library: it needs only ps/status.h and ps/types.h, and does no I/O beyond what a caller
// asks for (JSON in and out). docs/placement.md describes the formats and the formulas.
//
// Thread-safety: the types here are plain values; const functions may be called from any
// number of threads. StrategyRegistry is a value too: build one, then only read it.
#ifndef PS_PLACEMENT_H_
#define PS_PLACEMENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {
namespace placement {

// What a layer computes. Conv, pool and fc layers have parallelizable output dimensions
// (see LayerShape); embedding tables are sparse; the others are carried along.
enum class LayerKind : int { kConv = 0, kFc = 1, kPool = 2, kEmbedding = 3, kNorm = 4, kOther = 5 };
const char* LayerKindName(LayerKind kind);                    // "conv", "fc", ...
StatusOr<LayerKind> ParseLayerKind(const std::string& name);  // InvalidArgument when unknown

// The geometry of a layer, per sample (NCHW without N). All zero when unknown; the
// strategies that need it (optcnn) say so with a clear error.
//  - conv / pool: input in_channels x in_height x in_width, output out_channels x
//    out_height x out_width, a kernel_h x kernel_w window moved by `stride` with `padding`
//    zero rows (and columns, unless padding_w says otherwise) on each side.
//  - fc: in_features = in_channels (in_height = in_width = 1 after the flatten),
//    out_features = out_channels, out_height = out_width = 1.
struct LayerShape {
  uint32_t in_channels = 0;
  uint32_t in_height = 0;
  uint32_t in_width = 0;
  uint32_t out_channels = 0;
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  uint32_t kernel_h = 0;
  uint32_t kernel_w = 0;
  uint32_t stride = 1;
  uint32_t padding = 0;  // rows of zeros above and below (and columns, see padding_w)
  // Columns of zeros left and right when they differ from `padding` (Inception's 1x7 and
  // 7x1 kernels); -1 means "the same as padding". Read it through PaddingW().
  int32_t padding_w = -1;

  uint32_t PaddingW() const { return padding_w < 0 ? padding : static_cast<uint32_t>(padding_w); }
};

// One layer of a model. Sizes are fp32 bytes and forward FLOPs (a multiply-add is 2).
struct LayerProfile {
  std::string name;  // unique in the model
  LayerKind kind = LayerKind::kOther;
  uint64_t param_bytes = 0;         // weights and biases (and batch-norm scale and shift)
  double flops_per_sample = 0;      // forward pass
  // Forward + backward seconds per sample, measured with torch's current threads, whose
  // float32 matrix products ran at ModelProfile::reference_flops with the same threads (layerps.placement.profile with
  // time_layers=True). 0: not measured; the cost model then uses flops_per_sample.
  double train_seconds_per_sample = 0;
  uint64_t activation_bytes = 0;    // output activation, per sample
  std::vector<std::string> inputs;  // layers whose outputs feed this one; empty: the model input
  std::vector<std::string> tables;  // the parameter tables it owns (TableSpec::layer == name)
  LayerShape shape;
};

// A point where the model can be split in two: the prefix [0, index) and the suffix
// [index, n) are connected only through the output of one prefix layer, `producer`
// (and the suffix does not read the model input).
struct CutPoint {
  int index = 0;                  // first suffix layer, 1 <= index < n
  int producer = 0;               // the one prefix layer whose output the suffix reads
  uint64_t activation_bytes = 0;  // that output, per sample (A_{k-1} of PAPERS.md §1)
};

// A model as a DAG of layers listed in a topological order (every input before its user).
struct ModelProfile {
  std::string name;
  uint64_t input_bytes_per_sample = 0;
  // The FLOP/s (float32 matrix products) of the thread that measured the layers'
  // train_seconds_per_sample; > 0 whenever a layer has them. A node of the cluster that
  // sustains F FLOP/s runs such a layer in train_seconds_per_sample x reference_flops / F
  // seconds per sample: measured times, scaled by the node's speed.
  double reference_flops = 0;
  std::vector<LayerProfile> layers;

  // Unique non-empty names, inputs that name earlier layers (so no cycle), known kinds,
  // finite non-negative FLOPs and seconds, byte sizes <= 2^40, at most 2^20 layers, and
  // reference_flops > 0 when a layer has measured seconds. The message names the first
  // bad layer.
  Status Validate() const;
  // The training FLOPs per sample of layer i as the cost model counts them: the measured
  // seconds x reference_flops when measured, else (1 + backward_factor) x the forward
  // FLOPs.
  double TrainFlopsPerSample(size_t i, double backward_factor) const;
  uint64_t TotalParamBytes() const;
  double TotalFlopsPerSample() const;
  // Bytes of the layers of this kind (fc: the "in FC" column of PAPERS.md's table).
  uint64_t ParamBytesOfKind(LayerKind kind) const;
  double FlopsOfKind(LayerKind kind) const;
  // Index of the layer with this name, or -1.
  int LayerIndex(const std::string& name) const;
};

// Every single-tensor cut point of a valid profile, by increasing index. A chain of n
// layers has n - 1; a block with branches (Inception, a residual) has none inside it.
// Precondition: profile.Validate() is OK (otherwise the result is empty).
std::vector<CutPoint> FindCutPoints(const ModelProfile& profile);

// The cut at the conv/fc boundary: the last cut point whose index is at most that of the
// first fc layer. NotFound when the model has no fc layer or no such cut.
StatusOr<CutPoint> FcBoundaryCut(const ModelProfile& profile);

// Built-in analytic profiles, computed from the layer shapes of the standard
// architectures (torchvision's, fp32, ImageNet heads): "alexnet" (224x224),
// "vgg16" (224), "resnet50" (224), "inception_v3" (299, no auxiliary head) and "bigfc"
// (BigFcProfile(3)). docs/placement.md lists their layers.
std::vector<std::string> BuiltinProfileNames();
StatusOr<ModelProfile> BuiltinProfile(const std::string& name);  // NotFound when unknown
// The big-FC-head CNN of PAPERS.md, on in_channels x 32 x 32 input: conv 5x5 (->32, pad 2)
// + relu, maxpool 2, conv 5x5 (32->64, pad 2) + relu, maxpool 2, flatten (64x8x8 = 4096),
// fc 4096->1024 + relu, fc 1024->1024 + relu, fc 1024->10.
ModelProfile BigFcProfile(uint32_t in_channels = 3);

// Parses a bandwidth in bits per second: "1Gbit", "100Mbit", "10Gbit", "25Gbps",
// "1.5Gb", "800Kbit", "1e9" (a bare number is bits/s); "...Bps"/"...GB/s"/"MiB/s" are
// bytes and are multiplied by 8. InvalidArgument for anything else or a value <= 0.
StatusOr<double> ParseBandwidth(const std::string& text);
// Parses a duration into seconds: "50us", "0.2ms", "1s", "100ns", or a bare number of
// seconds. Must be finite and >= 0.
StatusOr<double> ParseDuration(const std::string& text);
// Parses a rate with an optional SI prefix and FLOPS unit: "5T" and "5e12" -> 5e12,
// "900G", "2.5TFLOPS". Must be finite and > 0.
StatusOr<double> ParseSiValue(const std::string& text);
// Parses a size in bytes: "64GiB", "16GB", "512MiB", "1048576". Must be > 0.
StatusOr<uint64_t> ParseBytes(const std::string& text);

// The machines a plan is made for. Bandwidths are bits per second of each node's NIC
// (each direction: NICs are full duplex), compute rates FLOP/s a node sustains on the
// model's layers.
struct ClusterSpec {
  int servers = 1;  // >= 1
  int workers = 1;  // >= 1
  double server_bandwidth_bps = 10e9;
  double worker_bandwidth_bps = 10e9;
  double latency_s = 50e-6;  // one message, one way
  double worker_flops = 5e12;
  double server_flops = 5e12;
  uint64_t server_memory_bytes = uint64_t{64} << 30;
  uint64_t worker_memory_bytes = uint64_t{16} << 30;
  // 0: every server has a machine (and NIC) of its own. > 0: the servers, and the suffix
  // ranks beside them (park's PS worker, stanza's FC nodes), share one host, so what
  // they send each other (the FC replicas' all-reduce, the PS worker's remote shards)
  // crosses no NIC: it goes through that host's loopback, at this many bits per second
  // for all of them together.
  double server_loopback_bps = 0;
  // 0: every worker has a machine (and NIC) of its own. > 0: the workers share one host,
  // so what they send each other (the ring all-reduce of `allreduce` layers) crosses no
  // NIC but that host's loopback, at this many bits per second for all of them together.
  double worker_loopback_bps = 0;
  // 0: every worker's (server's) NIC reaches the others at its full bandwidth. > 0: the
  // workers (servers) reach the network through one link of this many bits per second
  // that they share (one host's NIC, a rack's uplink): in each phase of a step their
  // bytes together cross it.
  double worker_link_bps = 0;
  double server_link_bps = 0;

  // Counts >= 1 (and <= 65536), bandwidths and compute rates finite and > 0, latency
  // finite and >= 0, the loopbacks and the shared links finite and >= 0, memories
  // > 0. The message names the first bad field.
  Status Validate() const;
};

// How a layer is trained under a plan.
enum class TrainMode : int {
  kPs = 0,         // workers run it; its gradients are pushed to and pulled from servers
  kOnServer = 1,   // park: runs on the "PS worker" beside its dedicated server(s)
  kFcNode = 2,     // stanza: runs on FC nodes; its parameters never reach a worker
  kAllReduce = 3,  // workers run it and sum its gradients by ring all-reduce (hybrid)
};
const char* TrainModeName(TrainMode mode);  // "ps", "on_server", "fc_node", "allreduce"
StatusOr<TrainMode> ParseTrainMode(const std::string& name);

// Where one layer's tables live and how the layer is trained.
struct LayerPlacement {
  std::string layer;
  TrainMode mode = TrainMode::kPs;
  // Server ranks holding the layer's parameters and the bytes on each (same length).
  // kFcNode: the FC nodes' ranks, each holding a full replica (or, fc_parallel
  // "channel", its block of the layer's output channels).
  std::vector<int> servers;
  std::vector<uint64_t> server_bytes;
  // An OptCNN execution plan's configuration of an FC-node layer: "cK" (rows on the first K
  // FC nodes), "1" (one FC node), "nK" (every FC node computes it whole: a replica).
  // Empty otherwise.
  std::string config;
};

// Which ranks play which part. Worker ranks are 0..workers-1, server ranks 0..servers-1;
// FC nodes and the PS worker run on server machines (their ranks are server ranks).
struct PlanRoles {
  std::vector<int> conv_workers;       // workers that run the prefix (all of them)
  std::vector<int> ps_servers;         // servers holding the worker-trained layers
  std::vector<int> dedicated_servers;  // park: servers holding the suffix's tables
  int ps_worker = -1;                  // park: the server rank running the suffix, or -1
  std::vector<int> fc_nodes;           // stanza: server ranks running the FC layers
  // stanza: fc_node_of_worker[w] is the index in fc_nodes that worker w talks to.
  std::vector<int> fc_node_of_worker;
};

// What one machine does per training step, as the cost model predicts it.
struct NodeLoad {
  bool is_server = false;
  int rank = 0;
  std::string duty;        // "worker", "server", "dedicated server + PS worker", "FC node"...
  uint64_t bytes_in = 0;   // received per step through its NIC
  uint64_t bytes_out = 0;  // sent per step through its NIC
  // Its NIC's time in a step, phase by phase as a step runs them (pull, activations out,
  // their gradients back, all-reduce, push; PredictPlan): in each phase the longer
  // direction at its bandwidth, summed over the phases.
  double nic_s = 0;
  double compute_s = 0;    // forward + backward of the layers it runs
  uint64_t memory_bytes = 0;
  uint64_t memory_limit_bytes = 0;
};

struct PlanPrediction {
  std::vector<NodeLoad> nodes;  // workers by rank, then servers by rank
  int busiest = -1;             // index in `nodes` of the NIC with the longest nic_s
  uint64_t busiest_nic_bytes = 0;
  // Bytes through the workers' NICs (in + out, summed over workers): bytes_PS of
  // PAPERS.md §1, the number the park/uniform ratio compares.
  uint64_t worker_bytes = 0;
  uint64_t network_bytes = 0;  // every byte sent on the network, all nodes together
  double worker_compute_s = 0;
  double server_compute_s = 0;  // the suffix on the PS worker / an FC node
  // The step's communication: for each phase, the longest of the nodes' NIC times, the
  // shared links' times and the servers' loopback time in it, summed over the phases
  // (>= every node's nic_s).
  double comm_s = 0;
  // Bytes the servers and suffix ranks send each other through their shared host's
  // loopback (ClusterSpec::server_loopback_bps > 0), and the time that takes.
  uint64_t loopback_bytes = 0;
  double loopback_s = 0;
  // The same for the workers' host (ClusterSpec::worker_loopback_bps > 0): the bytes of
  // the workers' ring all-reduce, and the time that takes.
  uint64_t worker_loopback_bytes = 0;
  double worker_loopback_s = 0;
  double latency_s = 0;         // sequential message rounds x their latency
  double step_s = 0;            // worker_compute_s + server_compute_s + comm_s + latency_s
  uint64_t max_worker_memory = 0;
  uint64_t max_server_memory = 0;
  bool fits_memory = true;
  std::string memory_note;  // which node does not fit, when one does not
};

// A plan: the strategy's decision for a model on a cluster, with its predictions.
struct Plan {
  std::string strategy;
  std::string model;
  ClusterSpec cluster;
  uint32_t batch = 0;     // samples per worker per step
  int cut = -1;           // CutPoint::index of the cut; -1: no cut (every layer on workers)
  std::string cut_layer;  // name of the first suffix layer; empty when no cut
  std::vector<LayerPlacement> layers;  // one per model layer, in the model's order
  PlanRoles roles;
  // stanza: how the FC nodes share the suffix. "data" (Stanza): each FC node trains a
  // replica on its conv workers' activations and the replicas all-reduce their gradients.
  // "channel" (model parallelism, OptCNN's channel-parallel FC layers): FC node j holds
  // the j-th block of every FC layer's output channels and sees every worker's activations.
  std::string fc_parallel = "data";
  PlanPrediction prediction;
  std::string reason;  // one line: why this strategy made this choice
};

// Choices the strategies take from the caller.
struct PlanOptions {
  uint32_t batch = 32;  // samples per worker per step, >= 1
  // park: "" searches the cut; "none" forces no cut; a layer name forces the cut before
  // that layer (it must be a cut point).
  std::string cut_layer;
  // park: server ranks that hold the suffix; empty: the last rank (the only one when
  // servers == 1).
  std::vector<int> dedicated_servers;
  // stanza: the number of FC nodes; 0: StanzaPlan takes the smallest that keeps an FC
  // node's link from being the bottleneck (Stanza's rule), and ComparePlans (so
  // layerps-plan) predicts every count and keeps the fastest that fits (docs/placement.md).
  int fc_nodes = 0;
  // balanced: the granularity of a table's ranges (Options::dense_chunk_elems x 4 bytes).
  uint64_t chunk_bytes = uint64_t{65536} * 4;
  // Training FLOPs = (1 + backward_factor) x forward FLOPs.
  double backward_factor = 2.0;
  // park: a cut must beat "no cut" by this fraction of the predicted step time; a smaller
  // gain is within the cost model's error and does not pay for the split step.
  double min_cut_gain = 0.10;
  // park: also search cuts whose suffix holds conv layers. Off by default: RALP moves the
  // parameter-heavy, compute-light head (fc, pools) and leaves conv parameters on the
  // other servers; a conv suffix would make one PS worker compute for all W workers.
  // A forced cut_layer may be any cut point either way.
  bool park_conv_suffix = false;
  // The fraction of an embedding layer's rows a worker touches per step (alpha of
  // PAPERS.md §5), in (0, 1]: a sparse table through the servers moves that fraction of
  // its bytes (Parallax's 4·alpha·w). 1: as dense.
  double embedding_rows_touched = 1.0;

  Status Validate() const;
};

// Checks that a plan fits the model and its cluster: one placement per layer in order,
// server ranks that exist, byte counts that add up to each layer's parameters, modes
// consistent with the cut and the roles. The message names the first bad layer or rank.
Status ValidatePlan(const Plan& plan, const ModelProfile& profile);

// The cost model: fills plan->prediction from the plan's placements, roles and cut
// (docs/placement.md gives every formula). Validates the plan first.
Status PredictPlan(const ModelProfile& profile, const PlanOptions& options, Plan* plan);

// The strategies. Each validates its inputs and returns a predicted plan.
StatusOr<Plan> UniformPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                           const PlanOptions& options);
StatusOr<Plan> BalancedPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                            const PlanOptions& options);
StatusOr<Plan> ParkPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                        const PlanOptions& options);
StatusOr<Plan> StanzaPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                          const PlanOptions& options);
// Every gradient summed by ring all-reduce among the workers; the servers idle (Horovod).
StatusOr<Plan> AllReducePlan(const ModelProfile& profile, const ClusterSpec& cluster,
                             const PlanOptions& options);
// Parallax's hybrid: embedding layers through the servers as sparse tables (the rows
// touched, PlanOptions::embedding_rows_touched), every other layer by ring all-reduce.
// FailedPrecondition for a model without embedding layers (it would be the all-reduce).
StatusOr<Plan> HybridPlan(const ModelProfile& profile, const ClusterSpec& cluster,
                          const PlanOptions& options);

// Named strategies, in the order they are listed and compared.
using StrategyFn =
    std::function<StatusOr<Plan>(const ModelProfile&, const ClusterSpec&, const PlanOptions&)>;
struct Strategy {
  std::string name;
  std::string summary;  // one line, for --help
  StrategyFn make;
};
class StrategyRegistry {
 public:
  // AlreadyExists when the name is taken; InvalidArgument when empty or without `make`.
  Status Register(Strategy strategy);
  const Strategy* Find(const std::string& name) const;  // null when unknown
  std::vector<std::string> Names() const;
  const std::vector<Strategy>& strategies() const { return strategies_; }

 private:
  std::vector<Strategy> strategies_;
};
// uniform, balanced, park, stanza (and whatever src/placement adds to this list).
StrategyRegistry DefaultStrategies();

// Every strategy of `names` (all of the registry's when empty), and the one picked: the
// shortest predicted step among the plans that fit in memory, where a plan with a cut
// must beat the plans without one by options.min_cut_gain (ties: fewer bytes at the
// busiest NIC, then the earlier strategy).
// A strategy that does not apply to the model (stanza without an fc layer: its
// FailedPrecondition) is listed in `skipped`; any other error fails the comparison.
struct Comparison {
  std::vector<Plan> plans;
  int chosen = -1;                   // index in plans
  std::string reason;                // one line
  std::vector<std::string> skipped;  // "name: why"
};
StatusOr<Comparison> ComparePlans(const ModelProfile& profile, const ClusterSpec& cluster,
                                  const PlanOptions& options, const StrategyRegistry& registry,
                                  const std::vector<std::string>& names = {});

// JSON (docs/placement.md). The readers check everything the Validate functions check and
// reject unknown keys; errors are InvalidArgument naming the field (and layer).
StatusOr<ModelProfile> ModelProfileFromJson(const std::string& text);
std::string ModelProfileToJson(const ModelProfile& profile);
StatusOr<ClusterSpec> ClusterSpecFromJson(const std::string& text);
std::string ClusterSpecToJson(const ClusterSpec& cluster);
StatusOr<Plan> PlanFromJson(const std::string& text);
// Reads a plan from a JSON file: kIoError when it cannot be read, else as PlanFromJson.
StatusOr<Plan> ReadPlanFile(const std::string& path);

// What the scheduler applies of a plan: for every layer the plan puts on servers, the
// server ranks its tables are pinned to (Scheduler::InstallPlacement,
// Worker::InstallPlacement). Layers the plan keeps off the servers (an FC node's) are
// pinned where the plan says their replicas live.
std::vector<LayerServers> TablePlacementOf(const Plan& plan);
std::string PlanToJson(const Plan& plan);
std::string ComparisonToJson(const Comparison& comparison);

}  // namespace placement
}  // namespace ps

#endif  // PS_PLACEMENT_H_
