// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Layer kinds, profile validation and totals, and the single-tensor cut points of a DAG.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {

namespace {
constexpr LayerKind kAllKinds[] = {LayerKind::kConv,      LayerKind::kFc,   LayerKind::kPool,
                                   LayerKind::kEmbedding, LayerKind::kNorm, LayerKind::kOther};
}  // namespace

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv:
      return "conv";
    case LayerKind::kFc:
      return "fc";
    case LayerKind::kPool:
      return "pool";
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kNorm:
      return "norm";
    case LayerKind::kOther:
      return "other";
  }
  return "unknown";
}

StatusOr<LayerKind> ParseLayerKind(const std::string& name) {
  for (LayerKind k : kAllKinds) {
    if (name == LayerKindName(k)) return k;
  }
  return InvalidArgument("unknown layer kind '" + name +
                         "' (expected conv, fc, pool, embedding, norm or other)");
}

Status ModelProfile::Validate() const {
  // Bounds that keep every total and every per-step byte count far from overflow.
  constexpr size_t kMaxLayers = size_t{1} << 20;
  constexpr uint64_t kMaxLayerBytes = uint64_t{1} << 40;  // 1 TiB
  if (layers.empty()) return InvalidArgument("model '" + name + "' has no layers");
  if (!std::isfinite(reference_flops) || reference_flops < 0) {
    return InvalidArgument("model '" + name + "': reference_flops must be finite and >= 0");
  }
  if (layers.size() > kMaxLayers) {
    return InvalidArgument("model '" + name + "' has more than 2^20 layers");
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerProfile& l = layers[i];
    const std::string where = "layer " + std::to_string(i) + " '" + l.name + "'";
    if (l.name.empty()) return InvalidArgument("layer " + std::to_string(i) + " has no name");
    if (index.count(l.name)) return InvalidArgument(where + ": duplicate layer name");
    bool known_kind = false;
    for (LayerKind k : kAllKinds) known_kind |= (k == l.kind);
    if (!known_kind) {
      return InvalidArgument(where + ": unknown kind " + std::to_string(static_cast<int>(l.kind)));
    }
    if (l.param_bytes > kMaxLayerBytes || l.activation_bytes > kMaxLayerBytes) {
      return InvalidArgument(where + ": param_bytes and activation_bytes must be <= 2^40");
    }
    if (!std::isfinite(l.flops_per_sample) || l.flops_per_sample < 0) {
      return InvalidArgument(where + ": flops_per_sample must be finite and >= 0");
    }
    if (!std::isfinite(l.train_seconds_per_sample) || l.train_seconds_per_sample < 0) {
      return InvalidArgument(where + ": train_seconds_per_sample must be finite and >= 0");
    }
    if (l.train_seconds_per_sample > 0 && !(std::isfinite(reference_flops) && reference_flops > 0)) {
      return InvalidArgument(where + ": has train_seconds_per_sample, so the model needs a "
                             "reference_flops > 0 (the FLOP/s of the thread that measured it)");
    }
    for (const std::string& in : l.inputs) {
      auto it = index.find(in);
      if (it == index.end()) {
        bool later = false;
        for (size_t j = i; j < layers.size(); ++j) later |= (layers[j].name == in);
        return InvalidArgument(where + ": input '" + in + "' " +
                               (later ? "is not an earlier layer (a cycle, or not in "
                                        "topological order)"
                                      : "names no layer"));
      }
    }
    index.emplace(l.name, i);
  }
  return Status::OK();
}

uint64_t ModelProfile::TotalParamBytes() const {
  uint64_t total = 0;
  for (const LayerProfile& l : layers) total += l.param_bytes;
  return total;
}

double ModelProfile::TrainFlopsPerSample(size_t i, double backward_factor) const {
  const LayerProfile& l = layers[i];
  if (l.train_seconds_per_sample > 0 && reference_flops > 0) {
    return l.train_seconds_per_sample * reference_flops;
  }
  return (1.0 + backward_factor) * l.flops_per_sample;
}

double ModelProfile::TotalFlopsPerSample() const {
  double total = 0;
  for (const LayerProfile& l : layers) total += l.flops_per_sample;
  return total;
}

uint64_t ModelProfile::ParamBytesOfKind(LayerKind kind) const {
  uint64_t total = 0;
  for (const LayerProfile& l : layers) {
    if (l.kind == kind) total += l.param_bytes;
  }
  return total;
}

double ModelProfile::FlopsOfKind(LayerKind kind) const {
  double total = 0;
  for (const LayerProfile& l : layers) {
    if (l.kind == kind) total += l.flops_per_sample;
  }
  return total;
}

int ModelProfile::LayerIndex(const std::string& layer_name) const {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].name == layer_name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<CutPoint> FindCutPoints(const ModelProfile& profile) {
  std::vector<CutPoint> cuts;
  if (!profile.Validate().ok()) return cuts;
  const int n = static_cast<int>(profile.layers.size());
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < n; ++i) index.emplace(profile.layers[i].name, i);
  // last_use[j]: the last layer reading layer j's output (-1: none). A cut before k is
  // a single tensor when exactly one j < k is still read at or after k, and no layer at
  // or after k reads the model input.
  std::vector<int> last_use(n, -1);
  int last_input_use = -1;
  for (int i = 0; i < n; ++i) {
    const LayerProfile& l = profile.layers[i];
    if (l.inputs.empty()) last_input_use = i;
    for (const std::string& in : l.inputs) {
      int& u = last_use[index.at(in)];
      u = std::max(u, i);
    }
  }
  // Sweep k upwards keeping the number of live prefix outputs: layer k-1 joins the
  // prefix (live if read at or after k); outputs whose last use is k-1 die.
  std::vector<int> dying_at(n + 1, 0);  // dying_at[k]: prefix outputs last read by k-1
  int live = 0;
  int producer = -1;
  for (int k = 1; k < n; ++k) {
    const int j = k - 1;
    if (last_use[j] >= k) {
      ++live;
      producer = j;
      dying_at[last_use[j] + 1]++;
    }
    live -= dying_at[k];
    if (live == 1 && k > last_input_use) {
      // Find the one live producer: the latest j < k with last_use[j] >= k.
      int p = producer;
      if (!(last_use[p] >= k)) {
        for (p = k - 1; p >= 0 && last_use[p] < k; --p) {
        }
      }
      cuts.push_back(CutPoint{k, p, profile.layers[p].activation_bytes});
    }
  }
  return cuts;
}

StatusOr<CutPoint> FcBoundaryCut(const ModelProfile& profile) {
  int first_fc = -1;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    if (profile.layers[i].kind == LayerKind::kFc) {
      first_fc = static_cast<int>(i);
      break;
    }
  }
  if (first_fc < 0) return NotFound("model '" + profile.name + "' has no fc layer");
  const CutPoint* best = nullptr;
  std::vector<CutPoint> cuts = FindCutPoints(profile);
  for (const CutPoint& c : cuts) {
    if (c.index <= first_fc) best = &c;
  }
  if (best == nullptr) {
    return NotFound("model '" + profile.name +
                    "' has no single-tensor cut before its first fc layer '" +
                    profile.layers[first_fc].name + "'");
  }
  return *best;
}

}  // namespace placement
}  // namespace ps
