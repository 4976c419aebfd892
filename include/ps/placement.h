// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Placement: the description of a model by its layers (a profile) and of a cluster (a
// cluster spec), from which the strategies in src/placement/ derive a plan. A pure
// library: it needs only ps/status.h and ps/types.h, and does no I/O beyond what a caller
// asks for (JSON in and out). docs/placement.md describes the formats and the formulas.
//
// Thread-safety: the types here are plain values; const functions may be called from any
// number of threads.
#ifndef PS_PLACEMENT_H_
#define PS_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace placement {

// What a layer computes. Conv, pool and fc layers have parallelizable output dimensions
// (see LayerShape); embedding tables are sparse; the others are carried along.
enum class LayerKind : int { kConv = 0, kFc = 1, kPool = 2, kEmbedding = 3, kNorm = 4, kOther = 5 };
const char* LayerKindName(LayerKind kind);           // "conv", "fc", ...
StatusOr<LayerKind> ParseLayerKind(const std::string& name);  // InvalidArgument when unknown

// The geometry of a layer, per sample (NCHW without N). All zero when unknown; the
// strategies that need it (optcnn) say so with a clear error.
//  - conv / pool: input in_channels x in_height x in_width, output out_channels x
//    out_height x out_width, a kernel_h x kernel_w window moved by `stride` with `padding`.
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
  uint32_t padding = 0;
};

// One layer of a model. Sizes are fp32 bytes and forward FLOPs (a multiply-add is 2).
struct LayerProfile {
  std::string name;  // unique in the model
  LayerKind kind = LayerKind::kOther;
  uint64_t param_bytes = 0;         // weights and biases
  double flops_per_sample = 0;      // forward pass
  uint64_t activation_bytes = 0;    // output activation, per sample
  std::vector<std::string> inputs;  // layers whose outputs feed this one; empty: the model input
  std::vector<std::string> tables;  // the parameter tables it owns (TableSpec::layer == name)
  LayerShape shape;
};

// A model as a DAG of layers listed in a topological order (every input before its user).
struct ModelProfile {
  std::string name;
  uint64_t input_bytes_per_sample = 0;
  std::vector<LayerProfile> layers;

  // Unique non-empty names, inputs that name earlier layers (so no cycle), known kinds,
  // finite non-negative sizes. The message names the first bad layer.
  Status Validate() const;
  uint64_t TotalParamBytes() const;
};

// The machines a plan is made for. Bandwidths are bits per second of each node's NIC
// (each direction), compute rates FLOP/s a node sustains on the model's layers.
struct ClusterSpec {
  int servers = 1;
  int workers = 1;
  double server_bandwidth_bps = 10e9;
  double worker_bandwidth_bps = 10e9;
  double latency_s = 50e-6;  // one message, one way
  double worker_flops = 5e12;
  double server_flops = 5e12;
  uint64_t server_memory_bytes = uint64_t{64} << 30;
  uint64_t worker_memory_bytes = uint64_t{16} << 30;

  Status Validate() const;
};

}  // namespace placement
}  // namespace ps

#endif  // PS_PLACEMENT_H_
