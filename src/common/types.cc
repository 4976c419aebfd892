// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/types.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "common/hash.h"

namespace ps {

uint64_t TrafficStats::bytes_sent() const {
  uint64_t n = 0;
  for (const auto& kv : peers) n += kv.second.bytes_sent;
  return n;
}

uint64_t TrafficStats::bytes_received() const {
  uint64_t n = 0;
  for (const auto& kv : peers) n += kv.second.bytes_received;
  return n;
}

std::string TrafficStats::ToString() const {
  std::string out;
  for (const auto& kv : peers) {
    out += "node " + std::to_string(kv.first) + ": sent " + std::to_string(kv.second.bytes_sent) +
           " bytes in " + std::to_string(kv.second.messages_sent) + " messages, received " +
           std::to_string(kv.second.bytes_received) + " bytes in " +
           std::to_string(kv.second.messages_received) + " messages\n";
  }
  for (const auto& kv : tables) {
    out += "table " + std::to_string(kv.first) + ": sent " + std::to_string(kv.second.bytes_sent) +
           " payload bytes, received " + std::to_string(kv.second.bytes_received) + "\n";
  }
  return out;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "unknown";
}

TableSpec TableSpec::Dense(std::string name, uint64_t size, UpdateRule rule) {
  TableSpec s;
  s.name = std::move(name);
  s.kind = TableKind::kDense;
  s.size = size;
  s.rule = rule;
  return s;
}

TableSpec TableSpec::Sparse(std::string name, uint32_t dim, UpdateRule rule) {
  TableSpec s;
  s.name = std::move(name);
  s.kind = TableKind::kSparse;
  s.dim = dim;
  s.rule = rule;
  return s;
}

Status TableSpec::Validate() const {
  const std::string where = "table '" + name + "'";
  if (name.empty()) return InvalidArgument("table name is empty");
  if (name.size() > 256) return InvalidArgument(where + ": name longer than 256 bytes");
  if (kind != TableKind::kDense && kind != TableKind::kSparse) {
    return InvalidArgument(where + ": unknown kind " + std::to_string(static_cast<int>(kind)));
  }
  if (kind == TableKind::kDense) {
    if (size == 0) return InvalidArgument(where + ": dense size must be >= 1");
    if (size > (uint64_t{1} << 40)) return InvalidArgument(where + ": dense size above 2^40");
  } else {
    if (dim == 0) return InvalidArgument(where + ": sparse dim must be >= 1");
    if (dim > (1u << 20)) return InvalidArgument(where + ": sparse dim above 2^20");
  }
  if (dtype != DType::kFloat32) {
    return InvalidArgument(where + ": only dtype float32 is supported");
  }
  if (static_cast<int>(rule) < 0 ||
      static_cast<int>(rule) > static_cast<int>(UpdateRule::kRowwiseAdagrad)) {
    return InvalidArgument(where + ": unknown update rule " +
                           std::to_string(static_cast<int>(rule)));
  }
  const std::string r = std::string(" (rule ") + UpdateRuleName(rule) + ")";
  if (rule != UpdateRule::kSum && rule != UpdateRule::kElastic &&
      !(std::isfinite(learning_rate) && learning_rate > 0)) {
    return InvalidArgument(where + ": needs a finite learning_rate > 0" + r);
  }
  auto in_unit = [](float v) { return std::isfinite(v) && v >= 0 && v < 1; };
  if ((rule == UpdateRule::kMomentum || rule == UpdateRule::kNesterov) && !in_unit(momentum)) {
    return InvalidArgument(where + ": momentum must be in [0, 1)" + r);
  }
  if (rule == UpdateRule::kAdam && (!in_unit(beta1) || !in_unit(beta2))) {
    return InvalidArgument(where + ": beta1 and beta2 must be in [0, 1)" + r);
  }
  if (rule == UpdateRule::kRowwiseAdagrad && kind == TableKind::kDense) {
    return InvalidArgument(where + ": rule rowwise_adagrad is for sparse tables (one accumulator "
                           "per row; a dense table has no rows: use adagrad)");
  }
  if ((rule == UpdateRule::kAdam || rule == UpdateRule::kAdagrad ||
       rule == UpdateRule::kRowwiseAdagrad) &&
      !(std::isfinite(epsilon) && epsilon > 0)) {
    return InvalidArgument(where + ": epsilon must be finite and > 0" + r);
  }
  if (rule == UpdateRule::kFtrl && !(std::isfinite(l1) && l1 >= 0 && std::isfinite(l2) && l2 >= 0 &&
                                     std::isfinite(ftrl_beta) && ftrl_beta >= 0)) {
    return InvalidArgument(where + ": l1, l2 and ftrl_beta must be finite and >= 0" + r);
  }
  if (rule == UpdateRule::kElastic && !(std::isfinite(elastic_alpha) && elastic_alpha > 0 &&
                                        elastic_alpha < 1)) {
    return InvalidArgument(where + ": elastic_alpha must be in (0, 1)" + r);
  }
  if (static_cast<int>(sync) < 0 || static_cast<int>(sync) > static_cast<int>(SyncMode::kSsp)) {
    return InvalidArgument(where + ": unknown sync mode " + std::to_string(static_cast<int>(sync)));
  }
  if (staleness < 0) {
    return InvalidArgument(where + ": staleness must be >= 0 (got " + std::to_string(staleness) +
                           ")");
  }
  if (sync != SyncMode::kSsp && staleness != 0) {
    return InvalidArgument(where + ": staleness is for sync ssp only (sync " +
                           SyncModeName(sync) + " needs staleness 0)");
  }
  if (rule == UpdateRule::kElastic && sync != SyncMode::kAsync) {
    return InvalidArgument(where + ": the elastic rule needs sync async (an exchange is "
                           "answered at once), not " + SyncModeName(sync));
  }
  switch (init) {
    case Initializer::kZeros:
      break;
    case Initializer::kUniform:
      if (!(std::isfinite(init_a) && std::isfinite(init_b) && init_a < init_b)) {
        return InvalidArgument(where + ": uniform init needs finite init_a < init_b");
      }
      break;
    case Initializer::kNormal:
      if (!(std::isfinite(init_a) && std::isfinite(init_b) && init_b >= 0)) {
        return InvalidArgument(where + ": normal init needs finite mean and stddev >= 0");
      }
      break;
    default:
      return InvalidArgument(where + ": unknown initializer");
  }
  if (layer.size() > 256) return InvalidArgument(where + ": layer name longer than 256 bytes");
  // Bounded sparse tables (docs/sparse.md).
  if (static_cast<int>(eviction) < 0 ||
      static_cast<int>(eviction) > static_cast<int>(Eviction::kDecayed)) {
    return InvalidArgument(where + ": unknown eviction " +
                           std::to_string(static_cast<int>(eviction)));
  }
  if (kind == TableKind::kDense) {
    const char* field = capacity != 0                 ? "capacity"
                        : capacity_bytes != 0         ? "capacity_bytes"
                        : eviction != Eviction::kNone ? "eviction"
                        : expiry_steps != 0           ? "expiry_steps"
                        : expiry_seconds != 0         ? "expiry_seconds"
                        : admit_after != 0            ? "admit_after"
                        : admit_probability != 1.0f   ? "admit_probability"
                        : cold_tier                   ? "cold_tier"
                        : cache_rows != 0             ? "cache_rows"
                        : cache_staleness != 0        ? "cache_staleness"
                                                      : nullptr;
    if (field) return InvalidArgument(where + ": " + field + " is for sparse tables only");
  }
  if (capacity > (uint64_t{1} << 40)) return InvalidArgument(where + ": capacity above 2^40");
  if (!(std::isfinite(score_decay) && score_decay > 0 && score_decay <= 1)) {
    return InvalidArgument(where + ": score_decay must be in (0, 1]");
  }
  if (capacity_bytes > (uint64_t{1} << 50))
    return InvalidArgument(where + ": capacity_bytes above 2^50");
  if (capacity > 0 && capacity_bytes > 0) {
    return InvalidArgument(where + ": give capacity (rows) or capacity_bytes, not both");
  }
  if (capacity > 0 && eviction == Eviction::kNone) {
    return InvalidArgument(where + ": capacity " + std::to_string(capacity) +
                           " needs an eviction (lru or lfu)");
  }
  if (capacity_bytes > 0 && eviction == Eviction::kNone) {
    return InvalidArgument(where + ": capacity_bytes " + std::to_string(capacity_bytes) +
                           " needs an eviction (lru or lfu)");
  }
  if (capacity == 0 && capacity_bytes == 0 && eviction != Eviction::kNone) {
    return InvalidArgument(where + ": eviction " + EvictionName(eviction) +
                           " needs a capacity > 0");
  }
  if (expiry_steps > (uint64_t{1} << 62))
    return InvalidArgument(where + ": expiry_steps above 2^62");
  if (expiry_seconds > uint64_t{315360000})
    return InvalidArgument(where + ": expiry_seconds above 315360000 (10 years)");
  if (!(std::isfinite(admit_probability) && admit_probability > 0 && admit_probability <= 1)) {
    return InvalidArgument(where + ": admit_probability must be in (0, 1]");
  }
  if (cold_tier && capacity == 0 && capacity_bytes == 0)
    return InvalidArgument(where + ": cold_tier needs a capacity > 0");
  if (admit_after > 65535) return InvalidArgument(where + ": admit_after above 65535");
  if ((cache_rows == 0) != (cache_staleness == 0)) {
    return InvalidArgument(where + ": a worker cache needs both cache_rows and cache_staleness > 0 "
                           "(cache_rows " + std::to_string(cache_rows) + ", cache_staleness " +
                           std::to_string(cache_staleness) + ")");
  }
  if (cache_rows > 0 && sync != SyncMode::kAsync) {
    return InvalidArgument(where + ": sync " + std::string(SyncModeName(sync)) +
                           " forbids a worker cache (every pull must see its step's updates)");
  }
  if (cache_rows > (uint64_t{1} << 32)) return InvalidArgument(where + ": cache_rows above 2^32");
  if (cache_staleness > 1000000) return InvalidArgument(where + ": cache_staleness above 10^6");
  if (wire_dtype != WireDType::kFloat32 && wire_dtype != WireDType::kFloat16 &&
      wire_dtype != WireDType::kBFloat16) {
    return InvalidArgument(where + ": unknown wire_dtype " +
                           std::to_string(static_cast<int>(wire_dtype)) +
                           " (fp32, fp16 or bf16)");
  }
  return Status::OK();
}

bool TableSpec::SameAs(const TableSpec& o) const {
  return name == o.name && kind == o.kind && size == o.size && dim == o.dim && dtype == o.dtype &&
         rule == o.rule && learning_rate == o.learning_rate && init == o.init &&
         init_a == o.init_a && init_b == o.init_b && seed == o.seed && layer == o.layer &&
         momentum == o.momentum && beta1 == o.beta1 && beta2 == o.beta2 && epsilon == o.epsilon &&
         l1 == o.l1 && l2 == o.l2 && ftrl_beta == o.ftrl_beta && elastic_alpha == o.elastic_alpha &&
         sync == o.sync && staleness == o.staleness && capacity == o.capacity &&
         capacity_bytes == o.capacity_bytes && score_decay == o.score_decay &&
         eviction == o.eviction && expiry_steps == o.expiry_steps &&
         expiry_seconds == o.expiry_seconds && admit_after == o.admit_after &&
         admit_probability == o.admit_probability && cold_tier == o.cold_tier && wire_dtype == o.wire_dtype &&
         cache_rows == o.cache_rows && cache_staleness == o.cache_staleness;
}

std::string TableSpec::Difference(const TableSpec& o) const {
  auto f = [](double v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  struct Field {
    const char* name;
    std::string mine, theirs;
  };
  const Field fields[] = {
      {"name", name, o.name},
      {"kind", kind == TableKind::kDense ? "dense" : "sparse",
       o.kind == TableKind::kDense ? "dense" : "sparse"},
      {"size", std::to_string(size), std::to_string(o.size)},
      {"dim", std::to_string(dim), std::to_string(o.dim)},
      {"dtype", std::to_string(static_cast<int>(dtype)), std::to_string(static_cast<int>(o.dtype))},
      {"rule", UpdateRuleName(rule), UpdateRuleName(o.rule)},
      {"learning_rate", f(learning_rate), f(o.learning_rate)},
      {"momentum", f(momentum), f(o.momentum)},
      {"beta1", f(beta1), f(o.beta1)},
      {"beta2", f(beta2), f(o.beta2)},
      {"epsilon", f(epsilon), f(o.epsilon)},
      {"l1", f(l1), f(o.l1)},
      {"l2", f(l2), f(o.l2)},
      {"ftrl_beta", f(ftrl_beta), f(o.ftrl_beta)},
      {"elastic_alpha", f(elastic_alpha), f(o.elastic_alpha)},
      {"init", std::to_string(static_cast<int>(init)), std::to_string(static_cast<int>(o.init))},
      {"init_a", f(init_a), f(o.init_a)},
      {"init_b", f(init_b), f(o.init_b)},
      {"seed", std::to_string(seed), std::to_string(o.seed)},
      {"layer", "'" + layer + "'", "'" + o.layer + "'"},
      {"sync", SyncModeName(sync), SyncModeName(o.sync)},
      {"staleness", std::to_string(staleness), std::to_string(o.staleness)},
      {"capacity", std::to_string(capacity), std::to_string(o.capacity)},
      {"capacity_bytes", std::to_string(capacity_bytes), std::to_string(o.capacity_bytes)},
      {"eviction", EvictionName(eviction), EvictionName(o.eviction)},
      {"score_decay", f(score_decay), f(o.score_decay)},
      {"expiry_steps", std::to_string(expiry_steps), std::to_string(o.expiry_steps)},
      {"expiry_seconds", std::to_string(expiry_seconds), std::to_string(o.expiry_seconds)},
      {"admit_after", std::to_string(admit_after), std::to_string(o.admit_after)},
      {"admit_probability", f(admit_probability), f(o.admit_probability)},
      {"cold_tier", cold_tier ? "true" : "false", o.cold_tier ? "true" : "false"},
      {"wire_dtype", WireDTypeName(wire_dtype), WireDTypeName(o.wire_dtype)},
      {"cache_rows", std::to_string(cache_rows), std::to_string(o.cache_rows)},
      {"cache_staleness", std::to_string(cache_staleness), std::to_string(o.cache_staleness)},
  };
  for (const Field& x : fields) {
    if (x.mine != x.theirs) return std::string(x.name) + ": " + x.mine + " declared, " + x.theirs + " asked";
  }
  // Fields equal as printed but not bitwise (a float differing past %g's digits).
  return SameAs(o) ? std::string() : std::string("a floating-point field differs past 6 digits");
}

const char* WireDTypeName(WireDType type) {
  switch (type) {
    case WireDType::kFloat32:
      return "fp32";
    case WireDType::kFloat16:
      return "fp16";
    case WireDType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

StatusOr<WireDType> ParseWireDType(const std::string& name) {
  if (name == "fp32" || name == "float32") return WireDType::kFloat32;
  if (name == "fp16" || name == "float16" || name == "half") return WireDType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return WireDType::kBFloat16;
  return InvalidArgument("unknown wire dtype '" + name + "' (fp32, fp16 or bf16)");
}

const char* UpdateRuleName(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kSum:
      return "sum";
    case UpdateRule::kSgd:
      return "sgd";
    case UpdateRule::kMomentum:
      return "momentum";
    case UpdateRule::kNesterov:
      return "nesterov";
    case UpdateRule::kAdagrad:
      return "adagrad";
    case UpdateRule::kAdam:
      return "adam";
    case UpdateRule::kFtrl:
      return "ftrl";
    case UpdateRule::kElastic:
      return "elastic";
    case UpdateRule::kRowwiseAdagrad:
      return "rowwise_adagrad";
  }
  return "unknown";
}

const char* SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kAsync:
      return "async";
    case SyncMode::kBsp:
      return "bsp";
    case SyncMode::kSsp:
      return "ssp";
  }
  return "unknown";
}

const char* EvictionName(Eviction eviction) {
  switch (eviction) {
    case Eviction::kNone:
      return "none";
    case Eviction::kLru:
      return "lru";
    case Eviction::kLfu:
      return "lfu";
    case Eviction::kDecayed:
      return "decayed";
  }
  return "unknown";
}

StatusOr<Eviction> ParseEviction(const std::string& name) {
  for (int e = 0; e <= static_cast<int>(Eviction::kDecayed); ++e) {
    if (name == EvictionName(static_cast<Eviction>(e))) return static_cast<Eviction>(e);
  }
  return InvalidArgument("unknown eviction '" + name + "' (none, lru, lfu, decayed)");
}

StatusOr<SyncMode> ParseSyncMode(const std::string& name) {
  for (int m = 0; m <= static_cast<int>(SyncMode::kSsp); ++m) {
    if (name == SyncModeName(static_cast<SyncMode>(m))) return static_cast<SyncMode>(m);
  }
  return InvalidArgument("unknown sync mode '" + name + "' (async, bsp, ssp)");
}

StatusOr<UpdateRule> ParseUpdateRule(const std::string& name) {
  for (int r = 0; r <= static_cast<int>(UpdateRule::kRowwiseAdagrad); ++r) {
    if (name == UpdateRuleName(static_cast<UpdateRule>(r))) return static_cast<UpdateRule>(r);
  }
  return InvalidArgument("unknown update rule '" + name +
                         "' (sum, sgd, momentum, nesterov, adagrad, adam, ftrl, elastic, "
                         "rowwise_adagrad)");
}

std::string RandomHex(size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::random_device rd;  // the OS's entropy source
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xFFu;
    out.push_back(kDigits[v >> 4]);
    out.push_back(kDigits[v & 15]);
  }
  return out;
}

}  // namespace ps
