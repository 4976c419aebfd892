// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// AlgorithmSpec and LocalOptimizer: names, parsing, validation, the learning-rate schedule.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "ps/algorithm.h"

namespace ps {
namespace {

struct NamedAlgorithm {
  const char* name;
  Algorithm kind;
  std::vector<const char*> params;  // positional order
};

const std::vector<NamedAlgorithm>& Algorithms() {
  static const std::vector<NamedAlgorithm> kAll = {
      {"bsp", Algorithm::kBsp, {}},
      {"asp", Algorithm::kAsp, {}},
      {"ssp", Algorithm::kSsp, {"s"}},
      {"easgd", Algorithm::kEasgd, {"tau", "alpha"}},
      {"arsgd", Algorithm::kArsgd, {}},
      {"gosgd", Algorithm::kGosgd, {"p"}},
      {"adpsgd", Algorithm::kAdpsgd, {}},
  };
  return kAll;
}

std::string FormatFloat(float v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

// Parses a whole string as a number; false on trailing garbage or an empty string.
bool ParseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

const char* AlgorithmName(Algorithm algorithm) {
  for (const auto& a : Algorithms()) {
    if (a.kind == algorithm) return a.name;
  }
  return "unknown";
}

AlgorithmSpec AlgorithmSpec::Bsp() { return AlgorithmSpec(); }
AlgorithmSpec AlgorithmSpec::Asp() {
  AlgorithmSpec s;
  s.kind = Algorithm::kAsp;
  return s;
}
AlgorithmSpec AlgorithmSpec::Ssp(int32_t staleness) {
  AlgorithmSpec s;
  s.kind = Algorithm::kSsp;
  s.staleness = staleness;
  return s;
}
AlgorithmSpec AlgorithmSpec::Easgd(int32_t tau, float alpha) {
  AlgorithmSpec s;
  s.kind = Algorithm::kEasgd;
  s.tau = tau;
  s.alpha = alpha;
  return s;
}
AlgorithmSpec AlgorithmSpec::Arsgd() {
  AlgorithmSpec s;
  s.kind = Algorithm::kArsgd;
  return s;
}
AlgorithmSpec AlgorithmSpec::Gosgd(float p) {
  AlgorithmSpec s;
  s.kind = Algorithm::kGosgd;
  s.p = p;
  return s;
}
AlgorithmSpec AlgorithmSpec::Adpsgd() {
  AlgorithmSpec s;
  s.kind = Algorithm::kAdpsgd;
  return s;
}

bool AlgorithmSpec::through_servers() const {
  return kind == Algorithm::kBsp || kind == Algorithm::kAsp || kind == Algorithm::kSsp;
}

Status AlgorithmSpec::Validate() const {
  switch (kind) {
    case Algorithm::kBsp:
    case Algorithm::kAsp:
    case Algorithm::kArsgd:
    case Algorithm::kAdpsgd:
      return Status::OK();
    case Algorithm::kSsp:
      if (staleness < 0) {
        return InvalidArgument("ssp: the staleness s must be >= 0, got " + std::to_string(staleness));
      }
      return Status::OK();
    case Algorithm::kEasgd:
      if (tau < 1) return InvalidArgument("easgd: tau must be >= 1, got " + std::to_string(tau));
      if (!(alpha > 0.0f && alpha < 1.0f)) {
        return InvalidArgument("easgd: alpha must lie in (0, 1), got " + FormatFloat(alpha));
      }
      return Status::OK();
    case Algorithm::kGosgd:
      if (!(p >= 0.0f && p <= 1.0f)) {
        return InvalidArgument("gosgd: p must lie in [0, 1], got " + FormatFloat(p));
      }
      return Status::OK();
  }
  return InvalidArgument("unknown algorithm " + std::to_string(static_cast<int>(kind)));
}

std::string AlgorithmSpec::ToString() const {
  switch (kind) {
    case Algorithm::kSsp:
      return "ssp(s=" + std::to_string(staleness) + ")";
    case Algorithm::kEasgd:
      return "easgd(tau=" + std::to_string(tau) + ",alpha=" + FormatFloat(alpha) + ")";
    case Algorithm::kGosgd:
      return "gosgd(p=" + FormatFloat(p) + ")";
    default:
      return AlgorithmName(kind);
  }
}

StatusOr<AlgorithmSpec> ParseAlgorithm(const std::string& text) {
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) t += static_cast<char>(std::tolower(c));
  }
  std::string name = t, args;
  const size_t open = t.find('(');
  if (open != std::string::npos) {
    if (t.back() != ')') return InvalidArgument("algorithm '" + text + "': missing ')'");
    name = t.substr(0, open);
    args = t.substr(open + 1, t.size() - open - 2);
  }
  const NamedAlgorithm* found = nullptr;
  for (const auto& a : Algorithms()) {
    if (name == a.name) found = &a;
  }
  if (found == nullptr) {
    return InvalidArgument("unknown algorithm '" + text +
                           "' (bsp, asp, ssp(s), easgd(tau,alpha), arsgd, gosgd(p), adpsgd)");
  }
  AlgorithmSpec spec;
  spec.kind = found->kind;
  std::map<std::string, double> values;
  if (!args.empty()) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (;;) {
      const size_t comma = args.find(',', start);
      parts.push_back(args.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (parts.size() > found->params.size()) {
      return InvalidArgument("algorithm '" + text + "': " + found->name + " takes " +
                             std::to_string(found->params.size()) + " parameter(s)");
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string key = found->params[i], value = parts[i];
      const size_t eq = parts[i].find('=');
      if (eq != std::string::npos) {
        key = parts[i].substr(0, eq);
        value = parts[i].substr(eq + 1);
      }
      bool known = false;
      for (const char* p : found->params) known = known || key == p;
      if (!known) {
        return InvalidArgument("algorithm '" + text + "': " + found->name + " has no parameter '" + key + "'");
      }
      double v = 0;
      if (!ParseNumber(value, &v)) {
        return InvalidArgument("algorithm '" + text + "': '" + value + "' is not a number");
      }
      if (values.count(key) != 0) {
        return InvalidArgument("algorithm '" + text + "': '" + key + "' given twice");
      }
      values[key] = v;
    }
  }
  auto integer = [&](const std::string& key, int32_t* out) -> Status {
    auto it = values.find(key);
    if (it == values.end()) return Status::OK();
    if (it->second != std::floor(it->second) || std::fabs(it->second) > 1e9) {
      return InvalidArgument("algorithm '" + text + "': " + key + " must be an integer");
    }
    *out = static_cast<int32_t>(it->second);
    return Status::OK();
  };
  auto real = [&](const std::string& key, float* out) {
    auto it = values.find(key);
    if (it != values.end()) *out = static_cast<float>(it->second);
  };
  Status st = integer("s", &spec.staleness);
  if (st.ok()) st = integer("tau", &spec.tau);
  if (!st.ok()) return st;
  real("alpha", &spec.alpha);
  real("p", &spec.p);
  st = spec.Validate();
  if (!st.ok()) return st;
  return spec;
}

Status LocalOptimizer::Validate() const {
  if (!std::isfinite(learning_rate) || learning_rate <= 0.0f) {
    return InvalidArgument("learning_rate must be finite and > 0, got " + FormatFloat(learning_rate));
  }
  if (!(momentum >= 0.0f && momentum < 1.0f)) {
    return InvalidArgument("momentum must lie in [0, 1), got " + FormatFloat(momentum));
  }
  if (nesterov && momentum <= 0.0f) return InvalidArgument("nesterov needs momentum > 0");
  if (warmup_steps < 0) return InvalidArgument("warmup_steps must be >= 0");
  switch (decay) {
    case Decay::kNone:
      break;
    case Decay::kStep:
    case Decay::kExponential:
      if (!(gamma > 0.0f && gamma <= 1.0f)) {
        return InvalidArgument("decay gamma must lie in (0, 1], got " + FormatFloat(gamma));
      }
      if (decay == Decay::kStep && decay_every < 1) return InvalidArgument("step decay needs decay_every >= 1");
      break;
    case Decay::kCosine:
      if (decay_every < 1) return InvalidArgument("cosine decay needs decay_every >= 1");
      break;
    default:
      return InvalidArgument("unknown decay " + std::to_string(static_cast<int>(decay)));
  }
  return Status::OK();
}

float LocalOptimizer::LearningRateAt(uint64_t step) const {
  double lr = learning_rate;
  if (warmup_steps > 0 && step < static_cast<uint64_t>(warmup_steps)) {
    lr *= static_cast<double>(step + 1) / warmup_steps;
  }
  switch (decay) {
    case Decay::kNone:
      break;
    case Decay::kStep:
      lr *= std::pow(static_cast<double>(gamma), static_cast<double>(step / decay_every));
      break;
    case Decay::kExponential:
      lr *= std::pow(static_cast<double>(gamma), static_cast<double>(step));
      break;
    case Decay::kCosine: {
      const double t = std::min<double>(static_cast<double>(step), decay_every);
      lr *= 0.5 * (1.0 + std::cos(M_PI * t / decay_every));
      break;
    }
  }
  return static_cast<float>(lr);
}

}  // namespace ps
