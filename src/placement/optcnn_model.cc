// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN on a ModelProfile: the configurations of every layer, the cost tables of Eq. 1
// (t_c, t_s, t_x), the baselines (data, model, OWT) and the plan. docs/optcnn.md states
// the rules implemented here; keep the two in step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ps/optcnn.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace {

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


std::string Where(const LayerProfile& l) {
  return "optcnn: layer '" + l.name + "' (" + std::string(LayerKindName(l.kind)) + ")";
}

struct Resolved {
  int devices = 0;
  int batch = 0;
  double flops = 0;
  double bits_per_s = 0;
  double latency = 0;
  std::vector<int> products;  // allowed degree products, ascending
};

StatusOr<Resolved> Resolve(const ClusterSpec& cluster, const Options& o) {
  Status st = cluster.Validate();
  if (!st.ok()) return st.WithContext("optcnn");
  Resolved r;
  r.devices = o.num_devices < 0 ? cluster.workers : o.num_devices;
  if (r.devices <= 0) {
    return InvalidArgument("optcnn: the device count must be >= 1, got " +
                           std::to_string(r.devices));
  }
  if (r.devices > kMaxDevices) {
    // The cost tables cost every pair of configurations of every edge, each pair O(devices)
    // (docs/optcnn.md, "Cost"): about 40 s at 1024 devices on 2 cores, growing faster than
    // the devices.
    return InvalidArgument("optcnn: " + std::to_string(r.devices) + " devices; the search takes "
                           "at most " + std::to_string(kMaxDevices) +
                           " (its cost tables grow as configurations^2 x devices: docs/optcnn.md, "
                           "\"Cost\")");
  }
  r.batch = o.batch_size == 0 ? 32 * r.devices : o.batch_size;
  if (r.batch <= 0) {
    return InvalidArgument("optcnn: batch_size must be >= 1 (or 0 for 32 per device), got " +
                           std::to_string(o.batch_size));
  }
  r.flops = o.device_flops > 0 ? o.device_flops : cluster.worker_flops;
  r.bits_per_s = o.link_bandwidth_bps > 0 ? o.link_bandwidth_bps : cluster.worker_bandwidth_bps;
  r.latency = o.latency_s >= 0 ? o.latency_s : cluster.latency_s;
  if (!std::isfinite(o.device_flops) || !std::isfinite(o.link_bandwidth_bps) ||
      !std::isfinite(o.latency_s) || o.device_flops < 0 || o.link_bandwidth_bps < 0) {
    return InvalidArgument(
        "optcnn: device_flops, link_bandwidth_bps and latency_s must be finite "
        "(device_flops and link_bandwidth_bps >= 0)");
  }
  if (!std::isfinite(o.backward_factor) || o.backward_factor <= 0) {
    return InvalidArgument("optcnn: backward_factor must be finite and > 0");
  }
  if (o.allowed_products.empty()) {
    for (int p = 1; p <= r.devices; ++p) {
      if (r.devices % p == 0) r.products.push_back(p);
    }
  } else {
    for (int p : o.allowed_products) {
      if (p < 1 || p > r.devices) {
        return InvalidArgument("optcnn: allowed product " + std::to_string(p) + " is outside [1, " +
                               std::to_string(r.devices) + "]");
      }
      r.products.push_back(p);
    }
    std::sort(r.products.begin(), r.products.end());
    r.products.erase(std::unique(r.products.begin(), r.products.end()), r.products.end());
  }
  return r;
}

// The output geometry of every layer (rules in docs/optcnn.md, "Configurations").
StatusOr<std::vector<Geometry>> Geometries(const ModelProfile& model,
                                           const std::vector<std::vector<int>>& inputs) {
  std::vector<Geometry> geo(model.layers.size());
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerProfile& l = model.layers[i];
    const LayerShape& s = l.shape;
    Geometry& g = geo[i];
    switch (l.kind) {
      case LayerKind::kEmbedding:
        return InvalidArgument(Where(l) +
                               ": an embedding has no dimension optcnn can split (its table is "
                               "sparse); use the parallax strategy for such models");
      case LayerKind::kConv:
      case LayerKind::kPool:
        if (s.out_channels == 0 || s.out_height == 0 || s.out_width == 0 || s.in_channels == 0 ||
            s.in_height == 0 || s.in_width == 0) {
          return InvalidArgument(Where(l) +
                                 ": no layer shape (in/out channels, height, width); optcnn "
                                 "needs it to split the sample, channel, height and width");
        }
        g.role = Role::kSpatial;
        g.c = s.out_channels;
        g.h = s.out_height;
        g.w = s.out_width;
        break;
      case LayerKind::kFc:
        if (s.out_channels == 0 || s.in_channels == 0) {
          return InvalidArgument(Where(l) +
                                 ": no layer shape (in_channels, out_channels); optcnn needs it "
                                 "to split the sample and channel dimensions");
        }
        g.role = Role::kFc;
        g.c = s.out_channels;
        break;
      case LayerKind::kNorm:
      case LayerKind::kOther: {
        if (s.out_channels > 0 && s.out_height > 0 && s.out_width > 0) {
          g.role = Role::kElementwise;
          g.c = s.out_channels;
          g.h = s.out_height;
          g.w = s.out_width;
          // Several inputs whose channels add up to the output's: a concatenation.
          uint64_t in_c = 0;
          for (int j : inputs[i]) in_c += geo[j].c;
          g.concat = inputs[i].size() > 1 && in_c == s.out_channels;
          break;
        }
        // No shape: an element-wise join (add) or a channel concatenation when the inputs'
        // geometry explains the activation size; otherwise only the sample dimension.
        const auto& in = inputs[i];
        bool spatial_inputs = !in.empty();
        uint64_t sum_c = 0;
        bool same_c = true;
        for (int j : in) {
          const Geometry& x = geo[j];
          if (x.role == Role::kOpaque || x.h != geo[in[0]].h || x.w != geo[in[0]].w) {
            spatial_inputs = false;
          }
          sum_c += x.c;
          same_c &= x.c == geo[in[0]].c;
        }
        if (spatial_inputs) {
          const Geometry& x0 = geo[in[0]];
          const uint64_t plane = x0.h * x0.w * kFloatBytes;
          if (in.size() > 1 && sum_c * plane == l.activation_bytes) {
            g = Geometry{Role::kElementwise, sum_c, x0.h, x0.w, kFloatBytes, /*concat=*/true};
            break;
          }
          if (same_c && x0.c * plane == l.activation_bytes) {
            g = Geometry{Role::kElementwise, x0.c, x0.h, x0.w, kFloatBytes, false};
            break;
          }
        }
        g = Geometry{Role::kOpaque, 1, 1, 1, std::max<uint64_t>(l.activation_bytes, 1), false};
        break;
      }
    }
  }
  return geo;
}

// How layer `dst` reads its input number k (layer `src`); checks that the shapes agree.
StatusOr<Reader> MakeReader(const LayerProfile& dl, const Geometry& dg, const Geometry& sg,
                            const std::vector<Geometry>& geo, const std::vector<int>& inputs,
                            size_t k) {
  Reader r;
  if (sg.role == Role::kOpaque || dg.role == Role::kOpaque) return r;  // whole sample
  const LayerShape& s = dl.shape;
  uint64_t in_c = 0, in_elems = 0;
  for (int j : inputs) {
    in_c += geo[j].c;
    in_elems += geo[j].c * geo[j].h * geo[j].w;
  }
  const std::string mismatch = Where(dl) + ": its inputs give ";
  switch (dg.role) {
    case Role::kFc:
      if (in_elems != s.in_channels) {
        return InvalidArgument(mismatch + std::to_string(in_elems) + " features, its shape says " +
                               std::to_string(s.in_channels));
      }
      return r;  // all of (C, H, W): the reshape before an FC layer
    case Role::kSpatial: {
      if (in_c != s.in_channels || sg.h != s.in_height || sg.w != s.in_width) {
        return InvalidArgument(mismatch + std::to_string(in_c) + "x" + std::to_string(sg.h) + "x" +
                               std::to_string(sg.w) + ", its shape says " +
                               std::to_string(s.in_channels) + "x" + std::to_string(s.in_height) +
                               "x" + std::to_string(s.in_width));
      }
      if (dl.kind == LayerKind::kPool) {
        if (s.in_channels != s.out_channels || inputs.size() != 1) {
          return InvalidArgument(Where(dl) +
                                 ": a pool layer must keep its channels and have one "
                                 "input");
        }
        r.c_mode = Reader::kSame;
      }
      r.h_mode = r.w_mode = Reader::kWindow;
      r.kh = s.kernel_h == 0 ? s.in_height : s.kernel_h;
      r.kw = s.kernel_w == 0 ? s.in_width : s.kernel_w;
      r.stride = std::max<uint32_t>(s.stride, 1);
      r.ph = s.padding;
      r.pw = s.PaddingW();
      return r;
    }
    case Role::kElementwise: {
      if (sg.h != dg.h || sg.w != dg.w) {
        return InvalidArgument(mismatch + std::to_string(sg.h) + "x" + std::to_string(sg.w) +
                               " planes, it produces " + std::to_string(dg.h) + "x" +
                               std::to_string(dg.w));
      }
      r.h_mode = r.w_mode = Reader::kSame;
      if (dg.concat) {
        int64_t offset = 0;
        for (size_t i = 0; i < k; ++i) offset += static_cast<int64_t>(geo[inputs[i]].c);
        r.c_mode = Reader::kOffset;
        r.c_offset = offset;
      } else if (sg.c == dg.c) {
        r.c_mode = Reader::kSame;
      } else {
        return InvalidArgument(mismatch + std::to_string(sg.c) + " channels, it produces " +
                               std::to_string(dg.c));
      }
      return r;
    }
    case Role::kOpaque:
      break;
  }
  return r;
}

// The configurations of one layer in a deterministic order: fewer tiles first, then the
// larger sample degree, then channel, height, width (so a tie prefers data parallelism).
std::vector<Degrees> Configurations(const Geometry& g, int batch,
                                    const std::vector<int>& products) {
  const int max_p = products.back();
  const bool split_c = g.role != Role::kOpaque;
  const bool split_hw = g.role == Role::kSpatial || g.role == Role::kElementwise;
  auto divides = [](int d, uint64_t size) { return size % static_cast<uint64_t>(d) == 0; };
  std::vector<Degrees> out;
  for (int n = 1; n <= max_p; ++n) {
    if (batch % n != 0) continue;
    for (int c = 1; n * c <= max_p; ++c) {
      if (c > 1 && (!split_c || !divides(c, g.c))) continue;
      for (int h = 1; n * c * h <= max_p; ++h) {
        if (h > 1 && (!split_hw || !divides(h, g.h))) continue;
        for (int w = 1; n * c * h * w <= max_p; ++w) {
          if (w > 1 && (!split_hw || !divides(w, g.w))) continue;
          const int p = n * c * h * w;
          if (std::binary_search(products.begin(), products.end(), p)) {
            out.push_back(Degrees{n, c, h, w});
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Degrees& a, const Degrees& b) {
    if (a.Product() != b.Product()) return a.Product() < b.Product();
    if (a.n != b.n) return a.n > b.n;
    if (a.c != b.c) return a.c > b.c;
    if (a.h != b.h) return a.h > b.h;
    return a.w > b.w;
  });
  return out;
}

// Tile coordinates of tile t: t = ((tn * c + tc) * h + th) * w + tw.
struct TileCoord {
  int n, c, h, w;
};
TileCoord Coord(const Degrees& d, int t) {
  TileCoord x;
  x.w = t % d.w;
  t /= d.w;
  x.h = t % d.h;
  t /= d.h;
  x.c = t % d.c;
  x.n = t / d.c;
  return x;
}

// Devices of every tile of a configuration (the hook, or contiguous).
StatusOr<std::vector<int>> Devices(const Degrees& d, int devices, const TileToDevice& hook) {
  std::vector<int> dev(d.Product());
  for (int t = 0; t < d.Product(); ++t) {
    dev[t] = hook ? hook(d, t, devices) : t;
    if (dev[t] < 0 || dev[t] >= devices) {
      return InvalidArgument("optcnn: the tile_to_device hook put tile " + std::to_string(t) +
                             " of " + d.ToString() + " on device " + std::to_string(dev[t]) +
                             ", outside [0, " + std::to_string(devices) + ")");
    }
  }
  return dev;
}

// The needed interval, in source coordinates, of one dimension.
Interval Needed(Reader::Mode mode, int64_t o0, int64_t o1, int64_t src_size, int64_t offset,
                int64_t k, int64_t stride, int64_t pad) {
  Interval r;
  switch (mode) {
    case Reader::kWhole:
      r = {0, src_size};
      break;
    case Reader::kSame:
      r = {o0, o1};
      break;
    case Reader::kOffset:
      r = {o0 - offset, o1 - offset};
      break;
    case Reader::kWindow:
      r = {o0 * stride - pad, (o1 - 1) * stride - pad + k};
      break;
  }
  r.lo = std::max<int64_t>(r.lo, 0);
  r.hi = std::min<int64_t>(r.hi, src_size);
  return r;
}

// Per dimension, per (degree, tile index) of the destination: the needed interval. Built
// once per edge so the pair loop only looks intervals up.
struct DimNeeds {
  // needs[d][i] for destination degree d (1..max) and tile index i < d.
  std::vector<std::vector<Interval>> needs;
};

DimNeeds BuildNeeds(int max_degree, int64_t dst_size, int64_t src_size, Reader::Mode mode,
                    int64_t offset, int64_t k, int64_t stride, int64_t pad) {
  DimNeeds dn;
  dn.needs.resize(max_degree + 1);
  for (int d = 1; d <= max_degree; ++d) {
    if (dst_size % d != 0) continue;
    const int64_t len = dst_size / d;
    for (int i = 0; i < d; ++i) {
      dn.needs[d].push_back(Needed(mode, i * len, (i + 1) * len, src_size, offset, k, stride, pad));
    }
  }
  return dn;
}

struct EdgeCost {
  double seconds = 0;
  double bytes = 0;
};

// Forward activations and backward activation gradients between two configurations.
class TransferModel {
 public:
  TransferModel(const Geometry& src, const Geometry& dst, const Reader& r, int batch,
                int max_degree, double bits_per_s, double latency, int devices)
      : src_(src), bits_per_s_(bits_per_s), latency_(latency), batch_(batch) {
    const int64_t sc = static_cast<int64_t>(src.c), sh = static_cast<int64_t>(src.h),
                  sw = static_cast<int64_t>(src.w);
    const bool opaque =
        r.c_mode == Reader::kWhole && r.h_mode == Reader::kWhole && r.w_mode == Reader::kWhole;
    // A destination that reads whole samples needs nothing from the tile coordinates
    // beyond the sample; its own C/H/W sizes are irrelevant (use 1 so any degree maps).
    const int64_t dc = opaque ? 1 : static_cast<int64_t>(dst.c);
    const int64_t dh = r.h_mode == Reader::kWhole ? 1 : static_cast<int64_t>(dst.h);
    const int64_t dw = r.w_mode == Reader::kWhole ? 1 : static_cast<int64_t>(dst.w);
    whole_c_ = r.c_mode == Reader::kWhole;
    whole_h_ = r.h_mode == Reader::kWhole;
    whole_w_ = r.w_mode == Reader::kWhole;
    n_ = BuildNeeds(max_degree, batch, batch, Reader::kSame, 0, 1, 1, 0);
    c_ = BuildNeeds(max_degree, whole_c_ ? 1 : dc, sc, r.c_mode, r.c_offset, 1, 1, 0);
    h_ = BuildNeeds(max_degree, dh, sh, r.h_mode, 0, r.kh, r.stride, r.ph);
    w_ = BuildNeeds(max_degree, dw, sw, r.w_mode, 0, r.kw, r.stride, r.pw);
    fwd_.assign(devices, 0);
    bwd_.assign(devices, 0);
  }

  // The cost between source configuration sd (tile s on device sdev[s]) and destination
  // configuration dd. s_on / d_on: the tile each device holds (-1: none), or empty when
  // some device holds several tiles of the configuration; then the pairwise loop runs.
  EdgeCost Cost(const Degrees& sd, const std::vector<int>& sdev, const std::vector<int>& s_on,
                const std::vector<TileCoord>& scoord, const Degrees& dd,
                const std::vector<int>& ddev, const std::vector<int>& d_on,
                const std::vector<TileCoord>& dcoord) {
    scoord_ = &scoord;
    dcoord_ = &dcoord;
    if (!s_on.empty() && !d_on.empty()) return OneTilePerDevice(sd, sdev, s_on, dd, ddev, d_on);
    std::fill(fwd_.begin(), fwd_.end(), 0);
    std::fill(bwd_.begin(), bwd_.end(), 0);
    uint64_t total = 0;
    const int64_t sn_len = batch_ / sd.n;
    const int64_t sc_len = static_cast<int64_t>(src_.c) / sd.c;
    const int64_t sh_len = static_cast<int64_t>(src_.h) / sd.h;
    const int64_t sw_len = static_cast<int64_t>(src_.w) / sd.w;
    const int p = dd.Product();
    for (int t = 0; t < p; ++t) {
      const TileCoord x = (*dcoord_)[t];
      const Interval in = n_.needs[dd.n][x.n];
      const Interval ic = c_.needs[whole_c_ ? 1 : dd.c][whole_c_ ? 0 : x.c];
      const Interval ih = h_.needs[whole_h_ ? 1 : dd.h][whole_h_ ? 0 : x.h];
      const Interval iw = w_.needs[whole_w_ ? 1 : dd.w][whole_w_ ? 0 : x.w];
      if (in.hi <= in.lo || ic.hi <= ic.lo || ih.hi <= ih.lo || iw.hi <= iw.lo) continue;
      const int dev = ddev[t];
      for (int64_t a = in.lo / sn_len; a * sn_len < in.hi; ++a) {
        const int64_t on = Overlap(in, a * sn_len, sn_len);
        for (int64_t b = ic.lo / sc_len; b * sc_len < ic.hi; ++b) {
          const int64_t oc = Overlap(ic, b * sc_len, sc_len);
          for (int64_t e = ih.lo / sh_len; e * sh_len < ih.hi; ++e) {
            const int64_t oh = Overlap(ih, e * sh_len, sh_len);
            for (int64_t f = iw.lo / sw_len; f * sw_len < iw.hi; ++f) {
              const int s = static_cast<int>(((a * sd.c + b) * sd.h + e) * sd.w + f);
              const int sdv = sdev[s];
              if (sdv == dev) continue;  // already local
              const uint64_t vol =
                  static_cast<uint64_t>(on * oc * oh * Overlap(iw, f * sw_len, sw_len));
              fwd_[dev] += vol;  // activations into the destination's device
              bwd_[sdv] += vol;  // their gradients back into the source's device
              total += vol;
            }
          }
        }
      }
    }
    if (total == 0) return EdgeCost{};
    return Finish(total, *std::max_element(fwd_.begin(), fwd_.end()),
                  *std::max_element(bwd_.begin(), bwd_.end()));
  }

 private:
  static int64_t Overlap(const Interval& i, int64_t lo, int64_t len) {
    return std::min(i.hi, lo + len) - std::max(i.lo, lo);
  }
  static int64_t Clipped(const Interval& i, int64_t lo, int64_t len) {
    return std::max<int64_t>(0, Overlap(i, lo, len));
  }

  // The needed box of destination tile t, per dimension.
  void Box(const Degrees& dd, int t, Interval box[4]) const {
    const TileCoord x = (*dcoord_)[t];
    box[0] = n_.needs[dd.n][x.n];
    box[1] = c_.needs[whole_c_ ? 1 : dd.c][whole_c_ ? 0 : x.c];
    box[2] = h_.needs[whole_h_ ? 1 : dd.h][whole_h_ ? 0 : x.h];
    box[3] = w_.needs[whole_w_ ? 1 : dd.w][whole_w_ ? 0 : x.w];
  }

  // sums[k] = sum over the destination tiles' needed intervals along one dimension of
  // their overlap with source tile k of that dimension.
  static void DimSums(const DimNeeds& dn, int ddeg, int64_t repeat, int64_t slen, int sdeg,
                      std::vector<int64_t>* sums) {
    sums->assign(sdeg, 0);
    for (const Interval& iv : dn.needs[ddeg]) {
      if (iv.hi <= iv.lo) continue;
      for (int64_t k = iv.lo / slen; k * slen < iv.hi; ++k)
        (*sums)[k] += repeat * Overlap(iv, k * slen, slen);
    }
  }

  // With at most one tile of each configuration per device, what device d receives
  // forward is its tile's needed box minus the part of it the device already holds, and
  // what source device s receives backward is the sum over all destination tiles of their
  // overlap with its tile (which factorizes over the dimensions, because the destination
  // tiles form a grid) minus the local part. O(tiles) per pair instead of O(tile pairs).
  EdgeCost OneTilePerDevice(const Degrees& sd, const std::vector<int>& sdev,
                            const std::vector<int>& s_on, const Degrees& dd,
                            const std::vector<int>& ddev, const std::vector<int>& d_on) {
    const int64_t len[4] = {batch_ / sd.n, static_cast<int64_t>(src_.c) / sd.c,
                            static_cast<int64_t>(src_.h) / sd.h,
                            static_cast<int64_t>(src_.w) / sd.w};
    auto local = [&](const Interval box[4], int s) {
      const TileCoord y = (*scoord_)[s];
      const int64_t k[4] = {y.n, y.c, y.h, y.w};
      int64_t v = 1;
      for (int d = 0; d < 4; ++d) v *= Clipped(box[d], k[d] * len[d], len[d]);
      return static_cast<uint64_t>(v);
    };
    uint64_t total = 0, max_f = 0, max_b = 0;
    Interval box[4];
    for (int t = 0; t < dd.Product(); ++t) {
      Box(dd, t, box);
      int64_t need = 1;
      for (const Interval& iv : box) need *= std::max<int64_t>(0, iv.hi - iv.lo);
      if (need == 0) continue;
      const int s = s_on[ddev[t]];
      const uint64_t in = static_cast<uint64_t>(need) - (s >= 0 ? local(box, s) : 0);
      total += in;
      max_f = std::max(max_f, in);
    }
    if (total == 0) return EdgeCost{};
    // A dimension read whole is needed by every destination tile along it: its sum
    // counts each of them (repeat = the destination's degree there).
    DimSums(n_, dd.n, 1, len[0], sd.n, &sums_[0]);
    DimSums(c_, whole_c_ ? 1 : dd.c, whole_c_ ? dd.c : 1, len[1], sd.c, &sums_[1]);
    DimSums(h_, whole_h_ ? 1 : dd.h, whole_h_ ? dd.h : 1, len[2], sd.h, &sums_[2]);
    DimSums(w_, whole_w_ ? 1 : dd.w, whole_w_ ? dd.w : 1, len[3], sd.w, &sums_[3]);
    for (int s = 0; s < sd.Product(); ++s) {
      const TileCoord y = (*scoord_)[s];
      const uint64_t all =
          static_cast<uint64_t>(sums_[0][y.n] * sums_[1][y.c] * sums_[2][y.h] * sums_[3][y.w]);
      if (all == 0) continue;
      const int t = d_on[sdev[s]];
      uint64_t mine = 0;
      if (t >= 0) {
        Box(dd, t, box);
        mine = local(box, s);
      }
      max_b = std::max(max_b, all - mine);
    }
    return Finish(total, max_f, max_b);
  }

  EdgeCost Finish(uint64_t total, uint64_t max_f, uint64_t max_b) const {
    EdgeCost ec;
    if (total == 0) return ec;
    const double eb = static_cast<double>(src_.elem_bytes);
    ec.bytes = 2.0 * static_cast<double>(total) * eb;
    ec.seconds = static_cast<double>(max_f + max_b) * eb * 8.0 / bits_per_s_ + 2.0 * latency_;
    return ec;
  }

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

}  // namespace

std::string Degrees::ToString() const {
  std::string s;
  if (n > 1) s += "n" + std::to_string(n);
  if (c > 1) s += "c" + std::to_string(c);
  if (h > 1) s += "h" + std::to_string(h);
  if (w > 1) s += "w" + std::to_string(w);
  return s.empty() ? "1" : s;
}

StatusOr<CostTables> BuildCostTables(const ModelProfile& model, const ClusterSpec& cluster,
                                     const Options& options) {
  Status st = model.Validate();
  if (!st.ok()) return st.WithContext("optcnn");
  auto resolved = Resolve(cluster, options);
  if (!resolved.ok()) return resolved.status();
  const Resolved& r = *resolved;
  const int n = static_cast<int>(model.layers.size());

  std::vector<std::vector<int>> inputs(n);
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : model.layers[i].inputs) {
      inputs[i].push_back(model.LayerIndex(in));  // Validate() made sure it exists
    }
  }
  auto geo_or = Geometries(model, inputs);
  if (!geo_or.ok()) return geo_or.status();
  const std::vector<Geometry>& geo = *geo_or;

  CostTables t;
  t.num_devices = r.devices;
  t.batch_size = r.batch;
  t.layer_names.resize(n);
  t.kinds.resize(n);
  t.configs.resize(n);
  t.compute_s.resize(n);
  t.sync_s.resize(n);
  t.sync_bytes.resize(n);
  std::vector<std::vector<std::vector<int>>> devs(n);  // devs[layer][config][tile]
  // on[layer][config][device]: the tile the device holds, -1 for none; empty when a
  // device holds several tiles (a non-injective hook).
  std::vector<std::vector<std::vector<int>>> on(n);
  std::vector<std::vector<std::vector<TileCoord>>> coords(n);  // coords[layer][config][tile]

  for (int i = 0; i < n; ++i) {
    const LayerProfile& l = model.layers[i];
    const Geometry& g = geo[i];
    t.layer_names[i] = l.name;
    t.kinds[i] = l.kind;
    t.configs[i] = Configurations(g, r.batch, r.products);
    if (t.configs[i].empty()) {
      std::string ps;
      for (int p : r.products) ps += (ps.empty() ? "" : ", ") + std::to_string(p);
      return InvalidArgument(Where(l) + ": no configuration: batch " + std::to_string(r.batch) +
                             " and output " + std::to_string(g.c) + "x" + std::to_string(g.h) +
                             "x" + std::to_string(g.w) +
                             " divide into none of the allowed degree products {" + ps + "}");
    }
    double flops = l.flops_per_sample;
    const double param = static_cast<double>(l.param_bytes);
    const double bytes_per_s = r.bits_per_s / 8.0;
    std::vector<double> node;
    for (const Degrees& d : t.configs[i]) {
      auto dv = Devices(d, r.devices, options.tile_to_device);
      if (!dv.ok()) return dv.status();
      // The busiest device runs this many tiles (1 with the contiguous rule).
      std::vector<int> count(r.devices, 0);
      int busiest = 0;
      for (int dev : *dv) busiest = std::max(busiest, ++count[dev]);
      std::vector<int> inverse(r.devices, -1);
      for (size_t tile = 0; tile < dv->size(); ++tile)
        inverse[(*dv)[tile]] = static_cast<int>(tile);
      if (busiest > 1) inverse.clear();
      on[i].push_back(std::move(inverse));
      std::vector<TileCoord> xy(d.Product());
      for (int tile = 0; tile < d.Product(); ++tile) xy[tile] = Coord(d, tile);
      coords[i].push_back(std::move(xy));
      devs[i].push_back(std::move(*dv));
      // t_c: forward FLOPs of one tile (an equal share of the layer's outputs) times
      // backward_factor, over the device rate.
      const double tile_flops = flops * r.batch / d.Product();
      t.compute_s[i].push_back(busiest * options.backward_factor * tile_flops / r.flops);
      // t_s: the parameters are split by the channel degree (output channels own their
      // weights) and replicated over the other degrees; each shard is ring-all-reduced
      // among its r replicas: 2 (r-1)/r of the shard per device, 2 (r-1) messages.
      const int c_split = g.role == Role::kOpaque ? 1 : d.c;
      const int replicas = d.Product() / c_split;
      double sync = 0, sync_bytes = 0;
      if (replicas > 1 && param > 0) {
        const double shard = param / c_split;
        sync = 2.0 * (replicas - 1) / replicas * shard / bytes_per_s +
               2.0 * (replicas - 1) * r.latency;
        sync_bytes = 2.0 * (replicas - 1) * param;
      }
      t.sync_s[i].push_back(sync);
      t.sync_bytes[i].push_back(sync_bytes);
    }
    for (const MeasuredCompute& m : options.measured) {
      if (m.layer != l.name) continue;
      if (!std::isfinite(m.seconds) || m.seconds < 0) {
        return InvalidArgument(Where(l) + ": measured time must be finite and >= 0");
      }
      auto it = std::find(t.configs[i].begin(), t.configs[i].end(), m.degrees);
      if (it == t.configs[i].end()) {
        return InvalidArgument(Where(l) + ": measured configuration " + m.degrees.ToString() +
                               " is not one of its configurations");
      }
      t.compute_s[i][it - t.configs[i].begin()] = m.seconds;
    }
    for (size_t c = 0; c < t.configs[i].size(); ++c) {
      node.push_back(t.compute_s[i][c] + t.sync_s[i][c]);
    }
    t.graph.AddNode(std::move(node));
  }
  for (const MeasuredCompute& m : options.measured) {
    if (model.LayerIndex(m.layer) < 0) {
      return InvalidArgument("optcnn: measured time for unknown layer '" + m.layer + "'");
    }
  }

  // t_x for every (input -> layer) edge.
  const int max_degree = r.products.back();
  uint64_t pairs_total = 0, pairs_done = 0;
  for (int j = 0; j < n; ++j) {
    for (int i : inputs[j]) pairs_total += uint64_t{t.configs[i].size()} * t.configs[j].size();
  }
  for (int j = 0; j < n; ++j) {
    for (size_t k = 0; k < inputs[j].size(); ++k) {
      const int i = inputs[j][k];
      auto reader = MakeReader(model.layers[j], geo[j], geo[i], geo, inputs[j], k);
      if (!reader.ok()) return reader.status();
      TransferModel tm(geo[i], geo[j], *reader, r.batch, max_degree, r.bits_per_s, r.latency,
                       r.devices);
      const size_t ni = t.configs[i].size(), nj = t.configs[j].size();
      std::vector<double> cost(ni * nj), bytes(ni * nj);
      for (size_t ci = 0; ci < ni; ++ci) {
        for (size_t cj = 0; cj < nj; ++cj) {
          const EdgeCost ec = tm.Cost(t.configs[i][ci], devs[i][ci], on[i][ci], coords[i][ci],
                                      t.configs[j][cj], devs[j][cj], on[j][cj], coords[j][cj]);
          cost[ci * nj + cj] = ec.seconds;
          bytes[ci * nj + cj] = ec.bytes;
        }
        pairs_done += nj;
        if (options.progress) options.progress(pairs_done, pairs_total);
      }
      t.graph.AddEdge(i, j, std::move(cost));
      t.edge_bytes.push_back(std::move(bytes));
    }
  }
  return t;
}

namespace {

bool AllDevicesData(const Degrees& d, int devices) { return d.n == devices && d.Product() == devices; }

int FirstFc(const std::vector<LayerChoice>& layers) {
  for (size_t v = 0; v < layers.size(); ++v) {
    if (layers[v].kind == LayerKind::kFc) return static_cast<int>(v);
  }
  return -1;
}

// The rule of ParallelStrategy::executable; "" when LayerPS runs the strategy.
std::string NotExecutableReason(const std::vector<LayerChoice>& layers, int devices) {
  const int n = static_cast<int>(layers.size());
  const int first_fc = FirstFc(layers);
  const int prefix_end = first_fc < 0 ? n : first_fc;
  for (int v = 0; v < prefix_end; ++v) {
    if (!AllDevicesData(layers[v].degrees, devices)) {
      return "layer '" + layers[v].layer + "' is " + layers[v].degrees.ToString() +
             ": layers before the first FC layer run data-parallel on all " +
             std::to_string(devices) + " devices (n" + std::to_string(devices) + ")";
    }
  }
  if (first_fc < 0) return "";
  bool all_data = true;
  for (int v = first_fc; v < n; ++v) all_data = all_data && AllDevicesData(layers[v].degrees, devices);
  if (all_data) return "";
  // FC nodes: every FC layer either channel-parallel on its own number of FC nodes (cK,
  // or one device) or sample-parallel (nK, run whole by every FC node: a replica); the
  // element-wise layers between them run on every FC node.
  for (int v = first_fc; v < n; ++v) {
    const LayerChoice& l = layers[v];
    if (l.kind == LayerKind::kOther) continue;  // element-wise: runs on every FC node
    if (l.kind != LayerKind::kFc) {
      return "layer '" + l.layer + "' (" + LayerKindName(l.kind) +
             ") follows the first FC layer: FC nodes run FC and element-wise layers only";
    }
    const Degrees& e = l.degrees;
    if (e.h != 1 || e.w != 1 || (e.n > 1 && e.c > 1)) {
      return "layer '" + l.layer + "' is " + e.ToString() +
             ": FC nodes run each FC layer channel-parallel (cK) or sample-parallel (nK), "
             "not both";
    }
  }
  return "";
}

}  // namespace

StatusOr<ParallelStrategy> EvaluateStrategy(const CostTables& t, const std::string& name,
                                            const std::vector<int>& x) {
  auto total = t.graph.Evaluate(x);
  if (!total.ok()) return total.status();
  ParallelStrategy s;
  s.name = name;
  s.config_index = x;
  s.step_time_s = *total;
  const int n = static_cast<int>(x.size());
  const int devices = t.num_devices;
  for (int v = 0; v < n; ++v) {
    LayerChoice c;
    c.layer = t.layer_names[v];
    c.kind = t.kinds[v];
    c.degrees = t.configs[v][x[v]];
    c.compute_s = t.compute_s[v][x[v]];
    c.sync_s = t.sync_s[v][x[v]];
    c.sync_bytes = t.sync_bytes[v][x[v]];
    s.compute_s += c.compute_s;
    s.sync_s += c.sync_s;
    s.bytes_per_step += c.sync_bytes;
    s.layers.push_back(std::move(c));
  }
  s.not_executable_reason = NotExecutableReason(s.layers, devices);
  s.executable = s.not_executable_reason.empty();
  for (size_t e = 0; e < t.graph.edges.size(); ++e) {
    const auto& edge = t.graph.edges[e];
    const size_t at = static_cast<size_t>(x[edge.src]) * t.graph.NumConfigs(edge.dst) + x[edge.dst];
    s.transfer_s += edge.cost[at];
    s.bytes_per_step += t.edge_bytes[e][at];
  }
  return s;
}

namespace {

// The index of the configuration of layer v that `pick` prefers (largest key), among those
// `accept` allows; -1 when none does.
template <typename Accept, typename Key>
int Pick(const CostTables& t, int v, Accept accept, Key key) {
  int best = -1;
  for (size_t c = 0; c < t.configs[v].size(); ++c) {
    const Degrees& d = t.configs[v][c];
    if (!accept(d)) continue;
    if (best < 0 || key(d) > key(t.configs[v][best])) best = static_cast<int>(c);
  }
  return best;
}

int PickData(const CostTables& t, int v) {
  return Pick(
      t, v, [](const Degrees& d) { return d.c == 1 && d.h == 1 && d.w == 1; },
      [](const Degrees& d) { return d.n; });
}

int PickModel(const CostTables& t, int v) {
  return Pick(
      t, v, [](const Degrees& d) { return d.n == 1 && d.h == 1 && d.w == 1; },
      [](const Degrees& d) { return d.c; });
}

Status CheckTables(const CostTables& t) {
  if (t.configs.size() != t.layer_names.size() || t.configs.size() != t.kinds.size() ||
      static_cast<int>(t.configs.size()) != t.graph.num_nodes()) {
    return InvalidArgument("optcnn: malformed cost tables");
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::vector<int>> DataParallel(const CostTables& t) {
  Status st = CheckTables(t);
  if (!st.ok()) return st;
  std::vector<int> x(t.configs.size());
  for (size_t v = 0; v < x.size(); ++v) x[v] = PickData(t, static_cast<int>(v));
  for (int c : x) {
    if (c < 0) return InvalidArgument("optcnn: a layer has no data-parallel configuration");
  }
  return x;
}

StatusOr<std::vector<int>> ModelParallel(const CostTables& t) {
  Status st = CheckTables(t);
  if (!st.ok()) return st;
  std::vector<int> x(t.configs.size());
  for (size_t v = 0; v < x.size(); ++v) x[v] = PickModel(t, static_cast<int>(v));
  for (int c : x) {
    if (c < 0) return InvalidArgument("optcnn: a layer has no channel-parallel configuration");
  }
  return x;
}

StatusOr<std::vector<int>> OneWeirdTrick(const CostTables& t) {
  auto data = DataParallel(t);
  if (!data.ok()) return data;
  auto model = ModelParallel(t);
  if (!model.ok()) return model;
  std::vector<int> x = *data;
  const auto first_fc = std::find(t.kinds.begin(), t.kinds.end(), LayerKind::kFc);
  for (size_t v = first_fc - t.kinds.begin(); v < x.size(); ++v) x[v] = (*model)[v];
  return x;
}

StatusOr<Plan> ExecutionPlan(const ModelProfile& model, const ClusterSpec& cluster,
                             const PlanOptions& options, const ParallelStrategy& strategy,
                             int num_devices) {
  if (cluster.workers != num_devices) {
    return InvalidArgument("optcnn execution plan: the strategy is for " +
                           std::to_string(num_devices) + " devices, the cluster has " +
                           std::to_string(cluster.workers) + " workers");
  }
  if (strategy.layers.size() != model.layers.size()) {
    return InvalidArgument("optcnn execution plan: the strategy has " +
                           std::to_string(strategy.layers.size()) + " layers, the model " +
                           std::to_string(model.layers.size()));
  }
  const std::string why = NotExecutableReason(strategy.layers, num_devices);
  if (!why.empty()) {
    return FailedPrecondition("optcnn strategy '" + strategy.name +
                              "' is beyond what LayerPS executes: " + why);
  }
  const int first_fc = FirstFc(strategy.layers);
  bool all_data = true;
  for (const LayerChoice& c : strategy.layers) all_data = all_data && AllDevicesData(c.degrees, num_devices);
  if (all_data) {
    StatusOr<Plan> plan = UniformPlan(model, cluster, options);
    if (!plan.ok()) return plan.status();
    plan->reason = "optcnn strategy '" + strategy.name + "': every layer data-parallel on " +
                   std::to_string(num_devices) + " devices; " + plan->reason;
    return plan;
  }
  // As many FC nodes as the widest FC layer's degree. All sample-parallel: Stanza's
  // replicas (each FC node trains on its conv workers' samples); else channel-parallel
  // execution, where a sample-parallel FC layer runs whole on every FC node.
  int nodes = 1;
  bool any_channel = false;
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    const LayerChoice& c = strategy.layers[i];
    if (c.kind != LayerKind::kFc) continue;
    any_channel = any_channel || c.degrees.n == 1;
    nodes = std::max(nodes, c.degrees.Product());
  }
  const bool channel = any_channel;
  if (!channel) {
    for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
      const LayerChoice& c = strategy.layers[i];
      if (c.kind == LayerKind::kFc && c.degrees.n != nodes) {
        return FailedPrecondition("optcnn strategy '" + strategy.name + "': layer '" + c.layer +
                                  "' is " + c.degrees.ToString() + ", others n" +
                                  std::to_string(nodes) +
                                  ": sample-parallel FC layers run as one group of replicas");
      }
    }
  }
  if (!channel && nodes == num_devices) {
    return FailedPrecondition("optcnn strategy '" + strategy.name +
                              "': FC layers sample-parallel on every device but earlier layers "
                              "too would be data parallelism; this mix is not executed");
  }
  if (nodes > cluster.servers) {
    return FailedPrecondition("optcnn strategy '" + strategy.name + "' runs its FC layers on " +
                              std::to_string(nodes) + " FC nodes, one beside each of as many "
                              "servers, but the cluster has " + std::to_string(cluster.servers) +
                              " servers");
  }
  PlanOptions o = options;
  o.fc_nodes = nodes;
  StatusOr<Plan> plan = StanzaPlan(model, cluster, o);
  if (!plan.ok()) return plan.status();
  if (plan->cut_layer != strategy.layers[first_fc].layer) {
    return FailedPrecondition("optcnn execution plan: stanza cuts before '" + plan->cut_layer +
                              "', the strategy's FC layers start at '" +
                              strategy.layers[first_fc].layer + "'");
  }
  plan->fc_parallel = channel ? "channel" : "data";
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    LayerPlacement& p = plan->layers[i];
    if (strategy.layers[i].kind != LayerKind::kFc) continue;
    const Degrees& e = strategy.layers[i].degrees;
    p.config = e.ToString();
    if (!channel || e.n > 1 || p.servers.empty()) continue;  // replicas: every FC node
    // Layer l's rows on FC nodes 0..K_l-1 (the contiguous tile rule: tile t on device t).
    const int k = e.c;
    const uint64_t m = model.layers[i].param_bytes;
    p.servers.resize(k);
    p.server_bytes.assign(k, m / k);
  }
  std::string fc;
  for (size_t i = first_fc; i < strategy.layers.size(); ++i) {
    if (strategy.layers[i].kind != LayerKind::kFc) continue;
    fc += (fc.empty() ? "" : ", ") + strategy.layers[i].layer + " " + strategy.layers[i].degrees.ToString();
  }
  plan->reason = "optcnn strategy '" + strategy.name + "': layers before '" + plan->cut_layer +
                 "' data-parallel on " + std::to_string(num_devices) + " conv workers; " + fc +
                 " on " + std::to_string(nodes) + " FC node(s), " + plan->fc_parallel +
                 "-parallel; " + plan->reason;
  return plan;
}

StatusOr<Report> Optimize(const ModelProfile& model, const ClusterSpec& cluster,
                          const Options& options) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto tables = BuildCostTables(model, cluster, options);
  if (!tables.ok()) return tables.status();
  const auto t1 = Clock::now();
  auto found = Search(tables->graph, options.search);
  if (!found.ok()) return found.status();
  const auto t2 = Clock::now();

  Report rep;
  rep.model = model.name;
  rep.num_devices = tables->num_devices;
  rep.batch_size = tables->batch_size;
  rep.search = *found;
  rep.tables_seconds = std::chrono::duration<double>(t1 - t0).count();
  rep.search_seconds = std::chrono::duration<double>(t2 - t1).count();
  auto best = EvaluateStrategy(*tables, "optcnn", found->assignment);
  if (!best.ok()) return best.status();
  rep.optcnn = std::move(*best);
  const std::pair<const char*, StatusOr<std::vector<int>> (*)(const CostTables&)> baselines[] = {
      {"data", &DataParallel}, {"model", &ModelParallel}, {"owt", &OneWeirdTrick}};
  for (const auto& b : baselines) {
    auto x = b.second(*tables);
    if (!x.ok()) return x.status();
    auto s = EvaluateStrategy(*tables, b.first, *x);
    if (!s.ok()) return s.status();
    rep.baselines.push_back(std::move(*s));
  }
  return rep;
}

namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string StrategyJson(const ParallelStrategy& s, bool with_layers) {
  std::string j =
      "{\"name\": " + JsonString(s.name) + ", \"step_time_s\": " + JsonNumber(s.step_time_s) +
      ", \"compute_s\": " + JsonNumber(s.compute_s) + ", \"sync_s\": " + JsonNumber(s.sync_s) +
      ", \"transfer_s\": " + JsonNumber(s.transfer_s) +
      ", \"bytes_per_step\": " + JsonNumber(s.bytes_per_step) +
      ", \"executable_by_layerps\": " + (s.executable ? "true" : "false");
  if (!s.executable) j += ", \"not_executable_reason\": " + JsonString(s.not_executable_reason);
  if (with_layers) {
    j += ", \"layers\": [";
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const LayerChoice& c = s.layers[i];
      j += std::string(i ? ", " : "") + "{\"layer\": " + JsonString(c.layer) +
           ", \"kind\": " + JsonString(LayerKindName(c.kind)) +
           ", \"config\": " + JsonString(c.degrees.ToString()) +
           ", \"degrees\": {\"n\": " + std::to_string(c.degrees.n) +
           ", \"c\": " + std::to_string(c.degrees.c) + ", \"h\": " + std::to_string(c.degrees.h) +
           ", \"w\": " + std::to_string(c.degrees.w) + "}" +
           ", \"compute_s\": " + JsonNumber(c.compute_s) + ", \"sync_s\": " + JsonNumber(c.sync_s) +
           ", \"sync_bytes\": " + JsonNumber(c.sync_bytes) + "}";
    }
    j += "]";
  }
  return j + "}";
}

}  // namespace

std::string FormatReport(const Report& rep) {
  std::string out = "optcnn: " + rep.model + " on " + std::to_string(rep.num_devices) +
                    " devices, batch " + std::to_string(rep.batch_size) + "\n";
  out += "  search: " + std::to_string(rep.search.eliminated_nodes) + " nodes and " +
         std::to_string(rep.search.eliminated_edges) + " edges eliminated, " +
         std::to_string(rep.search.residual_nodes) + " residual nodes" +
         (rep.search.branch_and_bound ? " (branch and bound)" : "") + "; tables " +
         Fixed(rep.tables_seconds * 1e3, 2) + " ms, search " + Fixed(rep.search_seconds * 1e3, 3) +
         " ms\n\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-32s %-6s %-10s %12s %12s\n", "layer", "kind", "config",
                "compute ms", "sync ms");
  out += line;
  for (const LayerChoice& c : rep.optcnn.layers) {
    std::snprintf(line, sizeof(line), "  %-32s %-6s %-10s %12.3f %12.3f\n", c.layer.c_str(),
                  LayerKindName(c.kind), c.degrees.ToString().c_str(), c.compute_s * 1e3,
                  c.sync_s * 1e3);
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof(line), "  %-8s %12s %12s %12s %12s %14s %10s %s\n", "strategy",
                "step ms", "compute ms", "sync ms", "transfer ms", "MB per step", "speedup",
                "LayerPS runs it");
  out += line;
  std::vector<const ParallelStrategy*> all = {&rep.optcnn};
  for (const ParallelStrategy& b : rep.baselines) all.push_back(&b);
  for (const ParallelStrategy* s : all) {
    std::snprintf(line, sizeof(line), "  %-8s %12.3f %12.3f %12.3f %12.3f %14.2f %9.2fx %s\n",
                  s->name.c_str(), s->step_time_s * 1e3, s->compute_s * 1e3, s->sync_s * 1e3,
                  s->transfer_s * 1e3, s->bytes_per_step / 1e6,
                  s->step_time_s > 0 ? s->step_time_s / rep.optcnn.step_time_s : 1.0,
                  s->executable ? "yes" : "no");
    out += line;
  }
  out += "  (speedup: the strategy's predicted step time over optcnn's)\n";
  return out;
}

std::string ReportToJson(const Report& rep) {
  std::string j = "{\"strategy\": \"optcnn\", \"model\": " + JsonString(rep.model) +
                  ", \"devices\": " + std::to_string(rep.num_devices) +
                  ", \"batch_size\": " + std::to_string(rep.batch_size) + ", \"search\": {" +
                  "\"eliminated_nodes\": " + std::to_string(rep.search.eliminated_nodes) +
                  ", \"eliminated_edges\": " + std::to_string(rep.search.eliminated_edges) +
                  ", \"residual_nodes\": " + std::to_string(rep.search.residual_nodes) +
                  ", \"residual_edges\": " + std::to_string(rep.search.residual_edges) +
                  ", \"branch_and_bound\": " + (rep.search.branch_and_bound ? "true" : "false") +
                  ", \"tables_seconds\": " + JsonNumber(rep.tables_seconds) +
                  ", \"search_seconds\": " + JsonNumber(rep.search_seconds) + "}" +
                  ", \"optcnn\": " + StrategyJson(rep.optcnn, true) + ", \"baselines\": [";
  for (size_t i = 0; i < rep.baselines.size(); ++i) {
    j += std::string(i ? ", " : "") + StrategyJson(rep.baselines[i], true);
  }
  return j + "]}";
}

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
