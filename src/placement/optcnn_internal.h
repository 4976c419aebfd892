// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What the OptCNN model files share, not part of the API (include/ps/optcnn.h is): the
// output geometry of a layer and how a layer reads its inputs (optcnn_layers.cc), the
// transfer model of one edge (optcnn_transfer.cc), and the rule of
// ParallelStrategy::executable (optcnn_plan.cc). optcnn_model.cc builds the cost tables
// from them; optcnn_strategies.cc and optcnn_plan.cc use the executability rule.
// docs/optcnn.md states the rules implemented here; keep the two in step.
#ifndef PS_PLACEMENT_OPTCNN_INTERNAL_H_
#define PS_PLACEMENT_OPTCNN_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ps/optcnn.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace internal {

constexpr uint64_t kFloatBytes = 4;

// How a layer's output may be split and how it reads its inputs.
enum class Role {
  kSpatial,      // conv or pool: N, C, H, W; reads a k x k window of its input
  kFc,           // N, C; reads the whole flattened (C, H, W) of each of its samples
  kElementwise,  // N, C, H, W; reads the same box of its input (concat: channel offset)
  kOpaque,       // N only; reads the whole sample (a layer whose geometry is unknown)
};

// A layer's output tensor: N x c x h x w elements of elem_bytes each.
struct Geometry {
  Role role = Role::kOpaque;
  uint64_t c = 1, h = 1, w = 1;
  uint64_t elem_bytes = kFloatBytes;
  // kElementwise with several inputs: concat (each input at a channel offset) or add.
  bool concat = false;
};

// The interval [lo, hi) of one dimension that a destination tile needs from its source.
struct Interval {
  int64_t lo = 0;
  int64_t hi = 0;
};

// How a destination layer reads one input, per dimension (sample is always identity).
struct Reader {
  enum Mode { kWhole, kSame, kOffset, kWindow } c_mode = kWhole, h_mode = kWhole, w_mode = kWhole;
  int64_t c_offset = 0;  // kOffset: source channel = dest channel - c_offset
  // kWindow: input rows [o0 * stride - pad, (o1 - 1) * stride - pad + kernel).
  int64_t kh = 1, kw = 1, stride = 1, ph = 0, pw = 0;
};

// ---------------------------------------------------------------------------------------
// Layers (optcnn_layers.cc)

// "optcnn: layer 'name' (kind)": the prefix of every error about one layer.
std::string Where(const LayerProfile& l);

// The output geometry of every layer (rules in docs/optcnn.md, "Configurations").
StatusOr<std::vector<Geometry>> Geometries(const ModelProfile& model,
                                           const std::vector<std::vector<int>>& inputs);

// How layer `dst` reads its input number k (layer `src`); checks that the shapes agree.
StatusOr<Reader> MakeReader(const LayerProfile& dl, const Geometry& dg, const Geometry& sg,
                            const std::vector<Geometry>& geo, const std::vector<int>& inputs,
                            size_t k);

// The configurations of one layer in a deterministic order: fewer tiles first, then the
// larger sample degree, then channel, height, width (so a tie prefers data parallelism).
std::vector<Degrees> Configurations(const Geometry& g, int batch, const std::vector<int>& products);

// Tile coordinates of tile t: t = ((tn * c + tc) * h + th) * w + tw.
struct TileCoord {
  int n, c, h, w;
};
TileCoord Coord(const Degrees& d, int t);

// Devices of every tile of a configuration (the hook, or contiguous).
StatusOr<std::vector<int>> Devices(const Degrees& d, int devices, const TileToDevice& hook);

// ---------------------------------------------------------------------------------------
// Transfers (optcnn_transfer.cc)

// Per dimension, per (degree, tile index) of the destination: the needed interval. Built
// once per edge so the pair loop only looks intervals up.
struct DimNeeds {
  // needs[d][i] for destination degree d (1..max) and tile index i < d.
  std::vector<std::vector<Interval>> needs;
};

struct EdgeCost {
  double seconds = 0;
  double bytes = 0;
};

// Forward activations and backward activation gradients between two configurations.
class TransferModel {
 public:
  TransferModel(const Geometry& src, const Geometry& dst, const Reader& r, int batch,
                int max_degree, double bits_per_s, double latency, int devices);

  // The cost between source configuration sd (tile s on device sdev[s]) and destination
  // configuration dd. s_on / d_on: the tile each device holds (-1: none), or empty when
  // some device holds several tiles of the configuration; then the pairwise loop runs.
  EdgeCost Cost(const Degrees& sd, const std::vector<int>& sdev, const std::vector<int>& s_on,
                const std::vector<TileCoord>& scoord, const Degrees& dd,
                const std::vector<int>& ddev, const std::vector<int>& d_on,
                const std::vector<TileCoord>& dcoord);

 private:
  // Described where they are defined (optcnn_transfer.cc).
  static int64_t Overlap(const Interval& i, int64_t lo, int64_t len);
  static int64_t Clipped(const Interval& i, int64_t lo, int64_t len);
  void Box(const Degrees& dd, int t, Interval box[4]) const;
  static void DimSums(const DimNeeds& dn, int ddeg, int64_t repeat, int64_t slen, int sdeg,
                      std::vector<int64_t>* sums);
  EdgeCost OneTilePerDevice(const Degrees& sd, const std::vector<int>& sdev,
                            const std::vector<int>& s_on, const Degrees& dd,
                            const std::vector<int>& ddev, const std::vector<int>& d_on);
  EdgeCost Finish(uint64_t total, uint64_t max_f, uint64_t max_b) const;

  std::vector<int64_t> sums_[4];
  const std::vector<TileCoord>* scoord_ = nullptr;  // tile coordinates of the current pair
  const std::vector<TileCoord>* dcoord_ = nullptr;

  Geometry src_;
  double bits_per_s_, latency_;
  int64_t batch_;
  bool whole_c_ = true, whole_h_ = true, whole_w_ = true;
  DimNeeds n_, c_, h_, w_;
  std::vector<uint64_t> fwd_, bwd_;
};

// ---------------------------------------------------------------------------------------
// Executability (optcnn_plan.cc)

// The rule of ParallelStrategy::executable; "" when LayerPS runs the strategy.
std::string NotExecutableReason(const std::vector<LayerChoice>& layers, int devices);

}  // namespace internal
}  // namespace optcnn
}  // namespace placement
}  // namespace ps

#endif  // PS_PLACEMENT_OPTCNN_INTERNAL_H_
