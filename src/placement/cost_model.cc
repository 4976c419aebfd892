// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cost model: bytes per NIC per step, compute, latency and memory of a plan
// (docs/placement.md, "Cost model", gives every formula), and the checks a plan must
// pass before it is predicted or applied.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {

const char* TrainModeName(TrainMode mode) {
  switch (mode) {
    case TrainMode::kPs:
      return "ps";
    case TrainMode::kOnServer:
      return "on_server";
    case TrainMode::kFcNode:
      return "fc_node";
    case TrainMode::kAllReduce:
      return "allreduce";
  }
  return "unknown";
}

StatusOr<TrainMode> ParseTrainMode(const std::string& name) {
  for (TrainMode m :
       {TrainMode::kPs, TrainMode::kOnServer, TrainMode::kFcNode, TrainMode::kAllReduce}) {
    if (name == TrainModeName(m)) return m;
  }
  return InvalidArgument("unknown training mode '" + name +
                         "' (expected ps, on_server, fc_node or allreduce)");
}

Status PlanOptions::Validate() const {
  if (batch < 1 || batch > (1u << 24)) return InvalidArgument("batch must be in [1, 2^24]");
  if (fc_nodes < 0) return InvalidArgument("fc_nodes must be >= 0");
  if (chunk_bytes < 4) return InvalidArgument("chunk_bytes must be >= 4");
  if (!std::isfinite(backward_factor) || backward_factor < 0) {
    return InvalidArgument("backward_factor must be finite and >= 0");
  }
  if (!std::isfinite(min_cut_gain) || min_cut_gain < 0 || min_cut_gain >= 1) {
    return InvalidArgument("min_cut_gain must be in [0, 1)");
  }
  if (!(embedding_rows_touched > 0 && embedding_rows_touched <= 1)) {
    return InvalidArgument("embedding_rows_touched must be in (0, 1]");
  }
  return Status::OK();
}

namespace {

bool IsWorkerMode(TrainMode m) { return m == TrainMode::kPs || m == TrainMode::kAllReduce; }

Status CheckRanks(const std::vector<int>& ranks, int limit, const std::string& what) {
  // A flag per rank, not a tree: a layer spread over 65,536 servers is checked without an
  // allocation per rank (the planner's maxima, PlanTest.EveryStrategyAtTheMaxima).
  std::vector<bool> seen(ranks.empty() ? 0 : static_cast<size_t>(limit), false);
  for (int r : ranks) {
    if (r < 0 || r >= limit) {
      return InvalidArgument("plan: " + what + " names rank " + std::to_string(r) +
                             ", but the cluster has ranks 0.." + std::to_string(limit - 1));
    }
    if (seen[static_cast<size_t>(r)]) {
      return InvalidArgument("plan: " + what + " names rank " + std::to_string(r) + " twice");
    }
    seen[static_cast<size_t>(r)] = true;
  }
  return Status::OK();
}

}  // namespace

Status ValidatePlan(const Plan& plan, const ModelProfile& profile) {
  PS_RETURN_IF_ERROR(profile.Validate());
  PS_RETURN_IF_ERROR(plan.cluster.Validate());
  const int servers = plan.cluster.servers;
  const int workers = plan.cluster.workers;
  if (plan.batch < 1) return InvalidArgument("plan: batch must be >= 1");
  if (plan.layers.size() != profile.layers.size()) {
    return InvalidArgument("plan: has " + std::to_string(plan.layers.size()) + " layers, model '" +
                           profile.name + "' has " + std::to_string(profile.layers.size()));
  }
  const PlanRoles& roles = plan.roles;
  PS_RETURN_IF_ERROR(CheckRanks(roles.conv_workers, workers, "conv_workers"));
  PS_RETURN_IF_ERROR(CheckRanks(roles.ps_servers, servers, "ps_servers"));
  PS_RETURN_IF_ERROR(CheckRanks(roles.dedicated_servers, servers, "dedicated_servers"));
  PS_RETURN_IF_ERROR(CheckRanks(roles.fc_nodes, servers, "fc_nodes"));
  if (roles.ps_worker < -1 || roles.ps_worker >= servers) {
    return InvalidArgument("plan: ps_worker names server rank " + std::to_string(roles.ps_worker) +
                           ", but the cluster has ranks 0.." + std::to_string(servers - 1));
  }

  // The cut, and the modes on each side of it.
  const int n = static_cast<int>(profile.layers.size());
  TrainMode suffix_mode = TrainMode::kPs;
  if (plan.cut != -1) {
    bool is_cut = false;
    for (const CutPoint& c : FindCutPoints(profile)) is_cut |= (c.index == plan.cut);
    if (plan.cut < 1 || plan.cut >= n || !is_cut) {
      return InvalidArgument("plan: cut " + std::to_string(plan.cut) +
                             " is not a single-tensor cut point of model '" + profile.name + "'");
    }
    if (plan.cut_layer != profile.layers[plan.cut].name) {
      return InvalidArgument("plan: cut_layer '" + plan.cut_layer + "' is not layer " +
                             std::to_string(plan.cut) + " ('" + profile.layers[plan.cut].name +
                             "')");
    }
    suffix_mode = plan.layers[plan.cut].mode;
    if (suffix_mode != TrainMode::kOnServer && suffix_mode != TrainMode::kFcNode) {
      return InvalidArgument("plan: the layers after the cut must be on_server or fc_node");
    }
  } else if (!plan.cut_layer.empty()) {
    return InvalidArgument("plan: cut_layer '" + plan.cut_layer + "' given without a cut");
  }
  if (suffix_mode == TrainMode::kOnServer) {
    if (roles.ps_worker < 0 || roles.dedicated_servers.empty()) {
      return InvalidArgument("plan: on_server layers need a ps_worker and dedicated_servers");
    }
    if (std::find(roles.dedicated_servers.begin(), roles.dedicated_servers.end(),
                  roles.ps_worker) == roles.dedicated_servers.end()) {
      return InvalidArgument("plan: the ps_worker must be one of the dedicated_servers");
    }
  }
  if (suffix_mode == TrainMode::kFcNode) {
    if (roles.fc_nodes.empty()) return InvalidArgument("plan: fc_node layers need fc_nodes");
    if (static_cast<int>(roles.fc_node_of_worker.size()) != workers) {
      return InvalidArgument("plan: fc_node_of_worker must have one entry per worker");
    }
    for (int f : roles.fc_node_of_worker) {
      if (f < 0 || f >= static_cast<int>(roles.fc_nodes.size())) {
        return InvalidArgument("plan: fc_node_of_worker names FC node " + std::to_string(f) +
                               " of " + std::to_string(roles.fc_nodes.size()));
      }
    }
  }

  for (int i = 0; i < n; ++i) {
    const LayerProfile& l = profile.layers[i];
    const LayerPlacement& p = plan.layers[i];
    const std::string where = "plan: layer " + std::to_string(i) + " '" + p.layer + "'";
    if (p.layer != l.name) {
      return InvalidArgument(where + ": expected layer '" + l.name + "' of model '" + profile.name +
                             "'");
    }
    const bool in_suffix = plan.cut != -1 && i >= plan.cut;
    if (in_suffix ? p.mode != suffix_mode : !IsWorkerMode(p.mode)) {
      return InvalidArgument(where + ": mode " + TrainModeName(p.mode) + " on the " +
                             (in_suffix ? "suffix side" : "worker side") + " of the cut");
    }
    if (p.servers.size() != p.server_bytes.size()) {
      return InvalidArgument(where + ": servers and server_bytes differ in length");
    }
    PS_RETURN_IF_ERROR(CheckRanks(p.servers, servers, "layer '" + p.layer + "' servers"));
    uint64_t sum = 0;
    for (uint64_t b : p.server_bytes) sum += b;
    switch (p.mode) {
      case TrainMode::kPs:
      case TrainMode::kOnServer:
        if (sum != l.param_bytes) {
          return InvalidArgument(where + ": its servers hold " + std::to_string(sum) +
                                 " bytes, the layer has " + std::to_string(l.param_bytes));
        }
        break;
      case TrainMode::kFcNode:
        if (l.param_bytes > 0 && p.servers != roles.fc_nodes) {
          return InvalidArgument(where + ": an fc_node layer lives on every FC node");
        }
        for (uint64_t b : p.server_bytes) {
          if (b != l.param_bytes) return InvalidArgument(where + ": each FC node holds a replica");
        }
        break;
      case TrainMode::kAllReduce:
        if (!p.servers.empty()) return InvalidArgument(where + ": allreduce layers use no server");
        break;
    }
    if (p.mode == TrainMode::kOnServer) {
      for (int s : p.servers) {
        if (std::find(roles.dedicated_servers.begin(), roles.dedicated_servers.end(), s) ==
            roles.dedicated_servers.end()) {
          return InvalidArgument(where + ": server " + std::to_string(s) +
                                 " is not a dedicated server");
        }
      }
    }
  }
  return Status::OK();
}

Status PredictPlan(const ModelProfile& profile, const PlanOptions& options, Plan* plan) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_RETURN_IF_ERROR(ValidatePlan(*plan, profile));
  const ClusterSpec& c = plan->cluster;
  const int W = c.workers;
  const int S = c.servers;
  const uint64_t b = plan->batch;
  // Every byte count below is at most 4 (W + S + 1)(b + 1)(sum M + sum A): refuse inputs
  // for which that does not fit in 63 bits rather than wrap around.
  long double sizes = 1;
  for (const LayerProfile& l : profile.layers) {
    sizes += static_cast<long double>(l.param_bytes) + l.activation_bytes;
  }
  if (4.0L * (W + S + 1) * (b + 1) * sizes > 9.2e18L) {
    return InvalidArgument("plan: the bytes per step of model '" + profile.name +
                           "' with this batch and cluster exceed 2^63");
  }

  PlanPrediction pred;
  pred.nodes.resize(W + S);
  for (int w = 0; w < W; ++w) {
    pred.nodes[w].rank = w;
    pred.nodes[w].duty = "worker";
    pred.nodes[w].memory_limit_bytes = c.worker_memory_bytes;
  }
  for (int s = 0; s < S; ++s) {
    NodeLoad& node = pred.nodes[W + s];
    node.is_server = true;
    node.rank = s;
    node.duty = "server";
    node.memory_limit_bytes = c.server_memory_bytes;
  }
  // A step runs its transfers in phases, one after the other, as the executed steps do
  // (the mode-"server"/"ps" optimizers and the split step: pull, forward, activations to
  // the suffix, their gradients back, backward, all-reduce, push, each waited for): the
  // bytes of a phase are counted apart, and its time is its slowest NIC (or the servers'
  // or the workers' loopback, or a shared link). A NIC is full duplex, so within a phase
  // its longer direction counts.
  enum Phase { kPull = 0, kForward, kBackward, kSync, kPush, kPhases };
  struct Traffic {
    uint64_t in[kPhases] = {};
    uint64_t out[kPhases] = {};
  };
  std::vector<Traffic> traffic(W + S);
  uint64_t loopback[kPhases] = {};
  auto worker = [&](int w) -> NodeLoad& { return pred.nodes[w]; };
  auto server = [&](int s) -> NodeLoad& { return pred.nodes[W + s]; };
  // The shared links (ClusterSpec::worker_link_bps, server_link_bps; index 0 the workers',
  // 1 the servers'): per phase, what the side's nodes send to and receive from the other
  // side. Traffic between two nodes of one side (a workers' ring all-reduce, FC replicas'
  // sync) stays behind the link and is not counted on it.
  uint64_t link_in[2][kPhases] = {}, link_out[2][kPhases] = {};
  auto send = [&](int from, int to, Phase phase, uint64_t bytes) {  // node indices
    traffic[from].out[phase] += bytes;
    traffic[to].in[phase] += bytes;
    const int fs = from >= W, ts = to >= W;
    if (fs != ts) {
      link_out[fs][phase] += bytes;
      link_in[ts][phase] += bytes;
    }
  };
  // Between two servers (or the suffix ranks on them): their NICs, or the shared loopback.
  const bool colocated = c.server_loopback_bps > 0;
  auto server_to_server = [&](int from, int to, Phase phase, uint64_t bytes) {
    if (colocated) {
      loopback[phase] += bytes;
    } else {
      send(W + from, W + to, phase, bytes);
    }
  };
  // Between two workers (their ring all-reduce): their NICs, or their host's loopback.
  const bool workers_colocated = c.worker_loopback_bps > 0;
  uint64_t worker_loopback[kPhases] = {};
  auto worker_to_worker = [&](int from, int to, Phase phase, uint64_t bytes) {
    if (workers_colocated) {
      worker_loopback[phase] += bytes;
    } else {
      send(from, to, phase, bytes);
    }
  };

  const PlanRoles& roles = plan->roles;
  const int nf = static_cast<int>(roles.fc_nodes.size());
  std::vector<uint64_t> workers_of_fc(nf, 0);
  for (int w = 0; w < static_cast<int>(roles.fc_node_of_worker.size()); ++w) {
    workers_of_fc[roles.fc_node_of_worker[w]]++;
  }
  double worker_flops = 0;  // training FLOPs per sample of the layers a worker runs
  double suffix_flops = 0;  // ... of the layers past the cut
  uint64_t worker_mem = 0;  // per worker
  bool any_ps = false, any_allreduce = false, remote_suffix_shards = false;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    const LayerProfile& l = profile.layers[i];
    const LayerPlacement& p = plan->layers[i];
    const uint64_t m = l.param_bytes;
    const double flops = profile.TrainFlopsPerSample(i, options.backward_factor);
    // A sparse table through the servers moves the rows touched (embedding_rows_touched).
    const double moved = l.kind == LayerKind::kEmbedding ? options.embedding_rows_touched : 1.0;
    auto touched = [moved](uint64_t bytes) {
      return moved >= 1.0 ? bytes : static_cast<uint64_t>(std::ceil(static_cast<double>(bytes) * moved));
    };
    switch (p.mode) {
      case TrainMode::kPs:
        // Each worker pulls the values and pushes its gradient: m in, m out. Server s
        // holding x bytes of the layer sends W pulls of x and receives W pushes of x.
        any_ps |= m > 0;
        for (int w = 0; w < W; ++w) {
          traffic[w].in[kPull] += touched(m);
          traffic[w].out[kPush] += touched(m);
          link_in[0][kPull] += touched(m);
          link_out[0][kPush] += touched(m);
        }
        for (size_t j = 0; j < p.servers.size(); ++j) {
          Traffic& t = traffic[W + p.servers[j]];
          t.out[kPull] += W * touched(p.server_bytes[j]);
          t.in[kPush] += W * touched(p.server_bytes[j]);
          link_out[1][kPull] += W * touched(p.server_bytes[j]);
          link_in[1][kPush] += W * touched(p.server_bytes[j]);
          server(p.servers[j]).memory_bytes += p.server_bytes[j];
        }
        worker_flops += flops;
        worker_mem += 2 * m + b * l.activation_bytes;  // values, gradients, activations
        break;
      case TrainMode::kAllReduce:
        // Ring all-reduce: reduce-scatter then all-gather, (W-1)/W of m each, each way.
        any_allreduce |= m > 0 && W > 1;
        for (int w = 0; w < W && W > 1; ++w) {
          worker_to_worker(w, (w + 1) % W, kSync, 2 * (W - 1) * m / W);
        }
        worker_flops += flops;
        worker_mem += 2 * m + b * l.activation_bytes;
        break;
      case TrainMode::kOnServer: {
        // The PS worker runs the layer on all W x b samples. Shards on other dedicated
        // servers are pulled and pushed by it once per step.
        NodeLoad& host = server(roles.ps_worker);
        for (size_t j = 0; j < p.servers.size(); ++j) {
          NodeLoad& s = server(p.servers[j]);
          s.memory_bytes += p.server_bytes[j];
          if (p.servers[j] != roles.ps_worker) {
            server_to_server(p.servers[j], roles.ps_worker, kPull, p.server_bytes[j]);
            server_to_server(roles.ps_worker, p.servers[j], kPush, p.server_bytes[j]);
            remote_suffix_shards |= p.server_bytes[j] > 0;
          }
        }
        host.memory_bytes += m + W * b * l.activation_bytes;  // gradients, activations
        suffix_flops += flops;
        break;
      }
      case TrainMode::kFcNode: {
        // Every FC node holds a replica and runs its workers' samples; replicas sum their
        // gradients by ring all-reduce among themselves.
        for (int f = 0; f < nf; ++f) {
          NodeLoad& node = server(roles.fc_nodes[f]);
          node.memory_bytes += 2 * m + workers_of_fc[f] * b * l.activation_bytes;
          if (nf > 1) {
            server_to_server(roles.fc_nodes[f], roles.fc_nodes[(f + 1) % nf], kSync,
                             2 * (nf - 1) * m / nf);
          }
        }
        suffix_flops += flops;
        break;
      }
    }
  }

  // The activations crossing the cut: b x A out of each worker (forward) and b x A back
  // (their gradients), to and from the PS worker or the worker's FC node.
  if (plan->cut >= 0) {
    uint64_t act = 0;
    for (const CutPoint& cp : FindCutPoints(profile)) {
      if (cp.index == plan->cut) act = cp.activation_bytes;
    }
    const TrainMode mode = plan->layers[plan->cut].mode;
    for (int w = 0; w < W; ++w) {
      const int to = mode == TrainMode::kOnServer ? roles.ps_worker
                                                  : roles.fc_nodes[roles.fc_node_of_worker[w]];
      send(w, W + to, kForward, b * act);
      send(W + to, w, kBackward, b * act);
    }
    if (mode == TrainMode::kOnServer) {
      NodeLoad& host = server(roles.ps_worker);
      host.duty = "dedicated server + PS worker";
      host.compute_s = W * b * suffix_flops / c.server_flops;
      for (int s : roles.dedicated_servers) {
        if (s != roles.ps_worker) server(s).duty = "dedicated server";
      }
    } else {
      for (int f = 0; f < nf; ++f) {
        NodeLoad& node = server(roles.fc_nodes[f]);
        node.duty = "FC node";
        node.compute_s = workers_of_fc[f] * b * suffix_flops / c.server_flops;
      }
    }
  }
  for (int w = 0; w < W; ++w) {
    worker(w).compute_s = b * worker_flops / c.worker_flops;
    worker(w).memory_bytes = worker_mem;
  }

  double phase_s[kPhases] = {};
  for (int phase = 0; phase < kPhases; ++phase) {
    pred.loopback_bytes += loopback[phase];
    phase_s[phase] = colocated ? static_cast<double>(loopback[phase]) * 8.0 / c.server_loopback_bps : 0;
    pred.loopback_s += phase_s[phase];
    pred.worker_loopback_bytes += worker_loopback[phase];
    if (workers_colocated) {
      const double s = static_cast<double>(worker_loopback[phase]) * 8.0 / c.worker_loopback_bps;
      pred.worker_loopback_s += s;
      phase_s[phase] = std::max(phase_s[phase], s);
    }
  }
  for (size_t i = 0; i < pred.nodes.size(); ++i) {
    NodeLoad& node = pred.nodes[i];
    const Traffic& t = traffic[i];
    const double bw = node.is_server ? c.server_bandwidth_bps : c.worker_bandwidth_bps;
    for (int phase = 0; phase < kPhases; ++phase) {
      node.bytes_in += t.in[phase];
      node.bytes_out += t.out[phase];
      const double s = static_cast<double>(std::max(t.in[phase], t.out[phase])) * 8.0 / bw;
      node.nic_s += s;
      phase_s[phase] = std::max(phase_s[phase], s);
    }
    if (pred.busiest < 0 || node.nic_s > pred.nodes[pred.busiest].nic_s) {
      pred.busiest = static_cast<int>(i);
    }
    pred.network_bytes += node.bytes_out;
    if (node.is_server) {
      pred.server_compute_s = std::max(pred.server_compute_s, node.compute_s);
      pred.max_server_memory = std::max(pred.max_server_memory, node.memory_bytes);
    } else {
      pred.worker_bytes += node.bytes_in + node.bytes_out;
      pred.worker_compute_s = std::max(pred.worker_compute_s, node.compute_s);
      pred.max_worker_memory = std::max(pred.max_worker_memory, node.memory_bytes);
    }
    if (pred.fits_memory && node.memory_bytes > node.memory_limit_bytes) {
      pred.fits_memory = false;
      pred.memory_note = std::string(node.is_server ? "server " : "worker ") +
                         std::to_string(node.rank) + " (" + node.duty + ") needs " +
                         std::to_string(node.memory_bytes) + " bytes, has " +
                         std::to_string(node.memory_limit_bytes);
    }
  }
  const NodeLoad& busiest = pred.nodes[pred.busiest];
  pred.busiest_nic_bytes = std::max(busiest.bytes_in, busiest.bytes_out);
  const double link_bps[2] = {c.worker_link_bps, c.server_link_bps};
  for (int side = 0; side < 2; ++side) {
    if (link_bps[side] <= 0) continue;
    for (int phase = 0; phase < kPhases; ++phase) {
      const uint64_t bytes = std::max(link_in[side][phase], link_out[side][phase]);
      phase_s[phase] = std::max(phase_s[phase], static_cast<double>(bytes) * 8.0 / link_bps[side]);
    }
  }
  for (double s : phase_s) pred.comm_s += s;

  // Sequential message rounds, each a request and its reply (2 x latency): the PS
  // push/pull, the activations to the suffix and their gradients back, the PS worker's
  // pull/push of remote suffix shards; ring all-reduces take 2 (N - 1) one-way steps.
  double rounds = 0;
  if (any_ps) rounds += 2;
  if (plan->cut >= 0) rounds += 2;
  if (remote_suffix_shards) rounds += 2;
  if (any_allreduce) rounds += 2.0 * (W - 1);
  if (plan->cut >= 0 && plan->layers[plan->cut].mode == TrainMode::kFcNode && nf > 1) {
    rounds += 2.0 * (nf - 1);
  }
  pred.latency_s = rounds * c.latency_s;
  pred.step_s = pred.worker_compute_s + pred.server_compute_s + pred.comm_s + pred.latency_s;
  plan->prediction = std::move(pred);
  return Status::OK();
}

}  // namespace placement
}  // namespace ps
