// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/store.h"

#include <cmath>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "common/hash.h"

namespace ps {
namespace {

// Below this many elements an update runs on the calling thread.
constexpr uint64_t kParallelGrain = 1 << 16;
constexpr size_t kSparseParallelKeys = 4096;

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0); }

inline void ApplyRule(const TableSpec& spec, ApplyOp op, float* __restrict x,
                      const float* __restrict g, size_t n) {
  if (op == ApplyOp::kAssign) {
    std::memcpy(x, g, n * sizeof(float));
  } else if (spec.rule == UpdateRule::kSgd) {
    const float lr = spec.learning_rate;
    for (size_t i = 0; i < n; ++i) x[i] -= lr * g[i];
  } else {
    for (size_t i = 0; i < n; ++i) x[i] += g[i];
  }
}

}  // namespace

float InitialValue(const TableSpec& spec, uint64_t name_hash, Key key, uint32_t col) {
  if (spec.init == Initializer::kZeros) return 0.0f;
  const uint64_t base = MixKey(name_hash ^ MixKey(spec.seed)) ^ MixKey(key);
  const uint64_t r1 = MixKey(base + 2 * uint64_t{col});
  if (spec.init == Initializer::kUniform) {
    return static_cast<float>(spec.init_a + (spec.init_b - spec.init_a) * Unit(r1));
  }
  // Normal: Box-Muller on two independent uniforms.
  const uint64_t r2 = MixKey(base + 2 * uint64_t{col} + 1);
  const double u1 = 1.0 - Unit(r1);  // (0, 1]
  const double u2 = Unit(r2);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(spec.init_a + spec.init_b * z);
}

Status Store::Install(const TableInfo& info) {
  if (tables_.count(info.id)) return Status::OK();
  Table t;
  t.spec = info.spec;
  t.name_hash = HashName(info.spec.name);
  for (const KeyRange& r : info.ranges) {
    if (r.server != self_) continue;
    if (info.dense()) {
      DenseRange d;
      d.first = info.RangeFirstElem(r);
      const uint64_t n = info.RangeEndElem(r) - d.first;
      d.values.resize(n);
      if (t.spec.init != Initializer::kZeros) {
        float* v = d.values.data();
        const uint64_t first = d.first;
        const TableSpec& spec = t.spec;
        const uint64_t nh = t.name_hash;
        tbb::parallel_for(tbb::blocked_range<uint64_t>(0, n, kParallelGrain),
                          [&](const tbb::blocked_range<uint64_t>& br) {
                            for (uint64_t i = br.begin(); i < br.end(); ++i) {
                              v[i] = InitialValue(spec, nh, first + i, 0);
                            }
                          });
      }
      t.dense.push_back(std::move(d));
    } else {
      t.hash_ranges.emplace_back(r.begin, r.end);
    }
  }
  if (!info.dense()) t.stripes.reset(new Stripe[kStripes]);
  tables_.emplace(info.id, std::move(t));
  return Status::OK();
}

const Store::Table* Store::Find(TableId id, TableKind kind, Status* error) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) {
    *error = NotFound("table " + std::to_string(id) + " is not held by this server");
    return nullptr;
  }
  if (it->second.spec.kind != kind) {
    *error = InvalidArgument("table " + std::to_string(id) + " is " +
                             (kind == TableKind::kDense ? "sparse" : "dense"));
    return nullptr;
  }
  return &it->second;
}

const Store::DenseRange* Store::FindDense(const Table& t, uint64_t offset, uint64_t count,
                                          Status* error) const {
  for (const auto& d : t.dense) {
    if (offset >= d.first && offset - d.first <= d.values.size() &&
        count <= d.values.size() - (offset - d.first)) {
      return &d;
    }
  }
  *error = NotFound("elements [" + std::to_string(offset) + ", +" + std::to_string(count) +
                    ") of table '" + t.spec.name + "' are not held by this server");
  return nullptr;
}

Status Store::ApplyDense(TableId table, uint64_t offset, uint64_t count, const float* values,
                         ApplyOp op) {
  Status err;
  const Table* t = Find(table, TableKind::kDense, &err);
  if (!t) return err;
  const DenseRange* d = FindDense(*t, offset, count, &err);
  if (!d) return err;
  float* x = const_cast<float*>(d->values.data()) + (offset - d->first);
  const TableSpec& spec = t->spec;
  if (count < 2 * kParallelGrain) {
    ApplyRule(spec, op, x, values, count);
  } else {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, count, kParallelGrain),
                      [&](const tbb::blocked_range<uint64_t>& r) {
                        ApplyRule(spec, op, x + r.begin(), values + r.begin(), r.size());
                      });
  }
  return Status::OK();
}

Status Store::ReadDense(TableId table, uint64_t offset, uint64_t count, float* out) const {
  Status err;
  const Table* t = Find(table, TableKind::kDense, &err);
  if (!t) return err;
  const DenseRange* d = FindDense(*t, offset, count, &err);
  if (!d) return err;
  std::memcpy(out, d->values.data() + (offset - d->first), count * sizeof(float));
  return Status::OK();
}

Status Store::CheckKeys(const Table& t, const Key* keys, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = MixKey(keys[i]);
    bool held = false;
    for (const auto& r : t.hash_ranges) {
      if (h >= r.first && (r.second == 0 || h < r.second)) {
        held = true;
        break;
      }
    }
    if (!held) {
      return NotFound("key " + std::to_string(keys[i]) + " of table '" + t.spec.name +
                      "' is not held by this server");
    }
  }
  return Status::OK();
}

float* Store::Row(Table& t, Stripe& s, Key key) {
  const uint32_t dim = t.spec.dim;
  auto it = s.index.find(key);
  if (it != s.index.end()) return s.rows.data() + size_t{it->second} * dim;
  const uint32_t row = static_cast<uint32_t>(s.index.size());
  s.index.emplace(key, row);
  s.rows.resize(s.rows.size() + dim);
  float* r = s.rows.data() + size_t{row} * dim;
  for (uint32_t j = 0; j < dim; ++j) r[j] = InitialValue(t.spec, t.name_hash, key, j);
  return r;
}

namespace {
inline size_t StripeOf(Key k, size_t stripes) { return MixKey(k) & (stripes - 1); }
}  // namespace

Status Store::ApplySparse(TableId table, const Key* keys, size_t n, uint32_t dim,
                          const float* rows, ApplyOp op) {
  Status err;
  const Table* ct = Find(table, TableKind::kSparse, &err);
  if (!ct) return err;
  Table& t = const_cast<Table&>(*ct);
  if (dim != t.spec.dim) return InvalidArgument("row width " + std::to_string(dim) + " != table dim");
  PS_RETURN_IF_ERROR(CheckKeys(t, keys, n));
  auto apply_stripe = [&](size_t s) {
    Stripe& st = t.stripes[s];
    std::lock_guard<std::mutex> lock(st.mu);
    for (size_t i = 0; i < n; ++i) {
      if (StripeOf(keys[i], kStripes) != s) continue;
      ApplyRule(t.spec, op, Row(t, st, keys[i]), rows + i * dim, dim);
    }
  };
  if (n < kSparseParallelKeys) {
    for (size_t s = 0; s < kStripes; ++s) apply_stripe(s);
  } else {
    tbb::parallel_for(size_t{0}, kStripes, apply_stripe);
  }
  return Status::OK();
}

Status Store::ReadSparse(TableId table, const Key* keys, size_t n, uint32_t dim, float* out) {
  Status err;
  const Table* ct = Find(table, TableKind::kSparse, &err);
  if (!ct) return err;
  Table& t = const_cast<Table&>(*ct);
  if (dim != t.spec.dim) return InvalidArgument("row width " + std::to_string(dim) + " != table dim");
  PS_RETURN_IF_ERROR(CheckKeys(t, keys, n));
  auto read_stripe = [&](size_t s) {
    Stripe& st = t.stripes[s];
    std::lock_guard<std::mutex> lock(st.mu);
    for (size_t i = 0; i < n; ++i) {
      if (StripeOf(keys[i], kStripes) != s) continue;
      std::memcpy(out + i * dim, Row(t, st, keys[i]), dim * sizeof(float));
    }
  };
  if (n < kSparseParallelKeys) {
    for (size_t s = 0; s < kStripes; ++s) read_stripe(s);
  } else {
    tbb::parallel_for(size_t{0}, kStripes, read_stripe);
  }
  return Status::OK();
}

uint64_t Store::sparse_rows() const {
  uint64_t rows = 0;
  for (const auto& kv : tables_) {
    if (kv.second.spec.kind != TableKind::kSparse) continue;
    for (size_t s = 0; s < kStripes; ++s) {
      std::lock_guard<std::mutex> lock(kv.second.stripes[s].mu);
      rows += kv.second.stripes[s].index.size();
    }
  }
  return rows;
}

}  // namespace ps
