// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN's view of each layer of a ModelProfile: its output geometry, how it reads each of
// its inputs, its configurations (degrees per dimension) and the devices of their tiles.
// The rules are docs/optcnn.md's ("Configurations"); keep the two in step. Declared in
// optcnn_internal.h; optcnn_model.cc builds the cost tables on them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "placement/optcnn_internal.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace internal {

std::string Where(const LayerProfile& l) {
  return "optcnn: layer '" + l.name + "' (" + std::string(LayerKindName(l.kind)) + ")";
}

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

}  // namespace internal
}  // namespace optcnn
}  // namespace placement
}  // namespace ps
