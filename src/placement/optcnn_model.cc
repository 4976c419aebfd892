// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN on a ModelProfile: the cost tables of Eq. 1 (t_c, t_s, t_x) over the
// configurations of every layer. docs/optcnn.md states the rules implemented here; keep the
// two in step. The layers' geometry and configurations are in optcnn_layers.cc, t_x's
// transfer model in optcnn_transfer.cc, the strategies and baselines on the tables in
// optcnn_strategies.cc, the execution plan in optcnn_plan.cc, the output in
// optcnn_report.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "placement/optcnn_internal.h"

namespace ps {
namespace placement {
namespace optcnn {

using internal::Configurations;
using internal::Coord;
using internal::Devices;
using internal::EdgeCost;
using internal::Geometries;
using internal::Geometry;
using internal::MakeReader;
using internal::Role;
using internal::TileCoord;
using internal::TransferModel;
using internal::Where;

namespace {

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

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
