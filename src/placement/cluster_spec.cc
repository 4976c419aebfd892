// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cluster spec's checks and the unit parsers its flags and JSON use.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace {

// Splits "12.5Gbit" into 12.5 and "Gbit". False when there is no leading number or it is
// not finite.
bool SplitNumber(const std::string& text, double* value, std::string* unit) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string s = text.substr(begin, end - begin);
  if (s.empty()) return false;
  // strtod would accept "inf", "nan" and hex; only plain decimals are numbers here.
  if (!(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.' || s[0] == '-' ||
        s[0] == '+')) {
    return false;
  }
  char* stop = nullptr;
  const double v = std::strtod(s.c_str(), &stop);
  if (stop == s.c_str() || !std::isfinite(v)) return false;
  if (s.find_first_of("xXnN") < static_cast<size_t>(stop - s.c_str())) return false;
  *value = v;
  *unit = std::string(stop);
  while (!unit->empty() && std::isspace(static_cast<unsigned char>((*unit)[0]))) unit->erase(0, 1);
  return true;
}

// The SI (k, M, G, T, P) or binary (Ki, Mi, Gi, Ti) multiplier at the start of `unit`;
// removes it. 1 when there is none.
double TakePrefix(std::string* unit) {
  if (unit->empty()) return 1;
  const char c = (*unit)[0];
  double base = 0;
  switch (c) {
    case 'k':
    case 'K':
      base = 1e3;
      break;
    case 'M':
      base = 1e6;
      break;
    case 'G':
    case 'g':
      base = 1e9;
      break;
    case 'T':
    case 't':
      base = 1e12;
      break;
    case 'P':
      base = 1e15;
      break;
    default:
      return 1;
  }
  if (unit->size() >= 2 && (*unit)[1] == 'i') {
    const double binary[] = {1024.0, 1048576.0, 1073741824.0, 1099511627776.0, 1125899906842624.0};
    const int power = base == 1e3 ? 0 : base == 1e6 ? 1 : base == 1e9 ? 2 : base == 1e12 ? 3 : 4;
    unit->erase(0, 2);
    return binary[power];
  }
  unit->erase(0, 1);
  return base;
}

}  // namespace

StatusOr<double> ParseBandwidth(const std::string& text) {
  const std::string bad =
      "bad bandwidth '" + text + "' (expected e.g. 1Gbit, 100Mbit, 25Gbps, 1.25GB/s, or bits/s)";
  double v = 0;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return InvalidArgument(bad);
  const double prefix = TakePrefix(&unit);
  double bits_per_unit = 0;
  if (unit.empty() || unit == "bit" || unit == "bits" || unit == "b" || unit == "bps" ||
      unit == "bit/s" || unit == "b/s") {
    bits_per_unit = 1;
  } else if (unit == "B" || unit == "Bps" || unit == "B/s" || unit == "byte/s" ||
             unit == "bytes/s") {
    bits_per_unit = 8;
  } else {
    return InvalidArgument(bad);
  }
  const double bps = v * prefix * bits_per_unit;
  if (!(bps > 0) || !std::isfinite(bps)) {
    return InvalidArgument("bandwidth '" + text + "' must be > 0");
  }
  return bps;
}

StatusOr<double> ParseDuration(const std::string& text) {
  const std::string bad =
      "bad duration '" + text + "' (expected e.g. 50us, 0.2ms, 1s, 100ns, or seconds)";
  double v = 0;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return InvalidArgument(bad);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "us") {
    scale = 1e-6;
  } else if (unit == "ns") {
    scale = 1e-9;
  } else {
    return InvalidArgument(bad);
  }
  const double s = v * scale;
  if (!(s >= 0) || !std::isfinite(s)) {
    return InvalidArgument("duration '" + text + "' must be >= 0");
  }
  return s;
}

StatusOr<double> ParseSiValue(const std::string& text) {
  const std::string bad = "bad value '" + text + "' (expected e.g. 5T, 900G, 2.5TFLOPS, 5e12)";
  double v = 0;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return InvalidArgument(bad);
  const double prefix = TakePrefix(&unit);
  if (!(unit.empty() || unit == "FLOPS" || unit == "flops" || unit == "FLOP/s" ||
        unit == "flop/s")) {
    return InvalidArgument(bad);
  }
  const double r = v * prefix;
  if (!(r > 0) || !std::isfinite(r)) return InvalidArgument("value '" + text + "' must be > 0");
  return r;
}

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  const std::string bad = "bad size '" + text + "' (expected e.g. 64GiB, 16GB, 512MiB, bytes)";
  double v = 0;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return InvalidArgument(bad);
  const double prefix = TakePrefix(&unit);
  if (!(unit.empty() || unit == "B")) return InvalidArgument(bad);
  const double bytes = v * prefix;
  if (!(bytes >= 1) || bytes > 1.8e19) {
    return InvalidArgument("size '" + text + "' must be >= 1 byte and fit in 64 bits");
  }
  return static_cast<uint64_t>(bytes);
}

Status ClusterSpec::Validate() const {
  constexpr int kMaxNodes = 65536;
  if (servers < 1 || servers > kMaxNodes) {
    return InvalidArgument("cluster: servers must be in [1, 65536], got " +
                           std::to_string(servers));
  }
  if (workers < 1 || workers > kMaxNodes) {
    return InvalidArgument("cluster: workers must be in [1, 65536], got " +
                           std::to_string(workers));
  }
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(server_bandwidth_bps)) {
    return InvalidArgument("cluster: server_bandwidth_bps must be finite and > 0");
  }
  if (!positive(worker_bandwidth_bps)) {
    return InvalidArgument("cluster: worker_bandwidth_bps must be finite and > 0");
  }
  if (!std::isfinite(latency_s) || latency_s < 0) {
    return InvalidArgument("cluster: latency_s must be finite and >= 0");
  }
  if (!positive(worker_flops)) return InvalidArgument("cluster: worker_flops must be > 0");
  if (!positive(server_flops)) return InvalidArgument("cluster: server_flops must be > 0");
  for (auto [name, v] : {std::pair<const char*, double>{"server_loopback_bps", server_loopback_bps},
                         {"worker_loopback_bps", worker_loopback_bps},
                         {"worker_link_bps", worker_link_bps},
                         {"server_link_bps", server_link_bps}}) {
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgument(std::string("cluster: ") + name + " must be finite and >= 0");
    }
  }
  if (server_memory_bytes == 0) return InvalidArgument("cluster: server_memory_bytes must be > 0");
  if (worker_memory_bytes == 0) return InvalidArgument("cluster: worker_memory_bytes must be > 0");
  return Status::OK();
}

}  // namespace placement
}  // namespace ps
