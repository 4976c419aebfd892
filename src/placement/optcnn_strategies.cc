// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN strategies on the cost tables: a strategy's predicted step time and its split
// (EvaluateStrategy), the baselines (data, model, OWT) and Optimize, which builds the
// tables, runs the search and sets its strategy next to the baselines (docs/optcnn.md).
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "placement/optcnn_internal.h"

namespace ps {
namespace placement {
namespace optcnn {

using internal::NotExecutableReason;

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

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
