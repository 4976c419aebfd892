// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/store.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/tsan.h"
#include "server/cold_tier.h"
#include "server/optimizer.h"
#include "server/store_stripes.h"

namespace ps {

using store_internal::kPrefetchRows;
using store_internal::kPrefetchSlots;
using store_internal::Scratch;
using store_internal::SparseScratch;

namespace {

// Below this many elements an update runs on the calling thread.
constexpr uint64_t kParallelGrain = 1 << 16;

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0); }

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

Store::Store(NodeId self, std::string cold_dir)
    : clock_ms_([] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
      }),
      self_(self),
      cold_dir_(std::move(cold_dir)) {}

Store::~Store() {
  for (auto& kv : tables_) {
    Table& t = kv.second;
    if (!t.cold) continue;
    size_t failed = 0;
    Status first;
    for (size_t i = 0; i < t.bounded->stripes; ++i) {
      Stripe& st = t.stripes[i];
      MutexLock lock(&st.mu);
      st.index.ForEach([&](Key key, uint32_t row) {
        st.mu.AssertHeld();  // held around the ForEach
        Status e = t.cold->Put(key, RowPtr(st, row, t), t.row_width);
        if (!e.ok() && failed++ == 0) first = e;
      });
    }
    if (failed) {
      LOG(ERROR) << "table " << t.spec.name << ": " << failed
                 << " rows in memory could not be written to the cold tier at shutdown: "
                 << first;
    }
    Status closed = t.cold->Close();
    if (!closed.ok()) LOG(ERROR) << "table " << t.spec.name << ": " << closed;
  }
}

void Store::DropAllBut(const std::map<TableId, TableInfo>& keep) {
  for (auto it = tables_.begin(); it != tables_.end();) {
    if (keep.count(it->first)) {
      ++it;
      continue;
    }
    LOG(INFO) << "server " << self_ << ": table '" << it->second.spec.name << "' (id "
              << it->first << ") dropped";
    it = tables_.erase(it);
  }
}

Status Store::UpdateLearningRate(const TableInfo& info) {
  auto it = tables_.find(info.id);
  if (it == tables_.end() || it->second.spec.learning_rate == info.spec.learning_rate) {
    return Status::OK();
  }
  Table& t = it->second;
  TableSpec spec = t.spec;
  spec.learning_rate = info.spec.learning_rate;
  StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(spec);
  if (!opt.ok()) return opt.status();
  if ((*opt)->state_width() != t.state_width ||
      (t.spec.kind == TableKind::kSparse &&
       t.spec.dim + (*opt)->row_state_floats(t.spec.dim) != t.row_width)) {
    return Internal("table '" + spec.name + "': its rule's state changed with the learning rate");
  }
  t.optimizer = std::shared_ptr<const Optimizer>(std::move(*opt));
  t.spec = spec;
  return Status::OK();
}

Status Store::Install(const TableInfo& info) {
  try {
    return InstallUnguarded(info);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("not enough memory for this server's share of table '" +
                             info.spec.name + "'");
  }
}

Status Store::InstallUnguarded(const TableInfo& info) {
  if (tables_.count(info.id)) return Status::OK();
  Table t;
  t.spec = info.spec;
  t.name_hash = HashName(info.spec.name);
  StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(info.spec);
  if (!opt.ok()) return opt.status();
  t.optimizer = std::shared_ptr<const Optimizer>(std::move(*opt));
  t.state_width = t.optimizer->state_width();
  for (const KeyRange& r : info.ranges) {
    if (r.server != self_) continue;
    if (info.dense()) {
      DenseRange d;
      d.first = info.RangeFirstElem(r);
      const uint64_t n = info.RangeEndElem(r) - d.first;
      d.size = n;
      d.values = std::shared_ptr<float>(new float[n](), std::default_delete<float[]>());
      if (t.state_width > 0) d.state.reset(new float[n * t.state_width]());
      if (t.spec.init != Initializer::kZeros) {
        float* v = d.data();
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
  if (!info.dense()) {
    t.stripes.reset(new Stripe[kStripes]);
    // Blocks of about 64 KiB of rows (at least one row).
    t.row_width = t.spec.dim + t.optimizer->row_state_floats(t.spec.dim);  // values, state
    const uint64_t row_bytes = uint64_t{t.row_width} * sizeof(float);
    while (t.block_shift < 16 && (row_bytes << (t.block_shift + 1)) <= (uint64_t{64} << 10))
      ++t.block_shift;
    t.holds_all =
        t.hash_ranges.size() == 1 && t.hash_ranges[0].first == 0 && t.hash_ranges[0].second == 0;
    if (t.spec.capacity_bytes > 0) {  // in rows, from here on
      t.spec.capacity = std::max<uint64_t>(
          1, t.spec.capacity_bytes / BoundedRowBytes(t.row_width));
    }
    if (t.spec.bounded()) PS_RETURN_IF_ERROR(InstallBounds(t));
    if (t.spec.cold_tier) {
      if (!t.bounded || t.spec.capacity == 0)
        return InvalidArgument("table '" + t.spec.name + "': cold_tier needs a capacity > 0");
      StatusOr<std::shared_ptr<ColdTier>> cold = ColdTier::Open(cold_dir_, t.spec.name);
      if (!cold.ok()) return cold.status();
      t.cold = std::move(*cold);
    }
  }
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
    if (offset >= d.first && offset - d.first <= d.size && count <= d.size - (offset - d.first)) {
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
  DenseRange* d = const_cast<DenseRange*>(FindDense(*t, offset, count, &err));
  if (!d) return err;
  if (count == 0) return Status::OK();  // nothing to apply (and `values` may be null)
  const uint64_t at = offset - d->first;
  const Optimizer& opt = *t->optimizer;
  float* x = d->data() + at;
  float* state = d->state ? d->state.get() + at : nullptr;
  const float* src = x;  // values the update starts from
  std::shared_ptr<float> fresh;
  if (d->values.use_count() == 1) {
    // Not lent (any more): the last reader's lease ended before this (use_count is a
    // relaxed load; the fence orders this thread's writes after the reader's reads).
    std::atomic_thread_fence(std::memory_order_acquire);
    TsanAcquire(d->data());
  } else {
    // Lent to a reply in flight: write the result into another buffer (the elements
    // outside the update are copied; those inside are read once, by the update itself).
    std::shared_ptr<uint8_t> buf = pool_.Get(d->size * sizeof(float));
    fresh = std::shared_ptr<float>(buf, reinterpret_cast<float*>(buf.get()));
    std::memcpy(fresh.get(), d->data(), at * sizeof(float));
    std::memcpy(fresh.get() + at + count, d->data() + at + count,
                (d->size - at - count) * sizeof(float));
    x = fresh.get() + at;
  }
  auto apply = [&](uint64_t b, uint64_t n) {
    if (n == 0) return;  // an empty request: nothing to read (values may be null)
    float* st = state ? state + b : nullptr;
    if (op == ApplyOp::kAssign)
      std::memcpy(x + b, values + b, n * sizeof(float));
    else if (src == x)
      opt.Apply(x + b, st, d->size, values + b, n);
    else
      opt.ApplyTo(x + b, src + b, st, d->size, values + b, n);
  };
  if (count < 2 * kParallelGrain) {
    apply(0, count);
  } else {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, count, kParallelGrain),
                      [&](const tbb::blocked_range<uint64_t>& r) { apply(r.begin(), r.size()); });
  }
  if (fresh) d->values = std::move(fresh);  // the reply keeps the old buffer alive
  return Status::OK();
}

Status Store::CheckDense(TableId table, uint64_t offset, uint64_t count) const {
  Status err;
  const Table* t = Find(table, TableKind::kDense, &err);
  if (!t) return err;
  return FindDense(*t, offset, count, &err) ? Status::OK() : err;
}

bool Store::DenseLent(TableId table, uint64_t offset, uint64_t count) const {
  Status err;
  const Table* t = Find(table, TableKind::kDense, &err);
  const DenseRange* d = t ? FindDense(*t, offset, count, &err) : nullptr;
  return d != nullptr && d->values.use_count() > 1;
}

Status Store::ReadDense(TableId table, uint64_t offset, uint64_t count, float* out) const {
  Status err;
  const Table* t = Find(table, TableKind::kDense, &err);
  if (!t) return err;
  const DenseRange* d = FindDense(*t, offset, count, &err);
  if (!d) return err;
  std::memcpy(out, d->data() + (offset - d->first), count * sizeof(float));
  return Status::OK();
}

Status Store::CheckKeys(const Table& t, const Key* keys, const uint64_t* hashes, size_t n) const {
  if (t.holds_all) return Status::OK();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = hashes[i];
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

uint32_t Store::FindOrCreate(const Table& t, Stripe& s, Key key, uint64_t h) {
  size_t slot;
  uint32_t row = s.index.Find(key, h, &slot);
  if (row != kNoRow) return row;
  row = s.rows++;
  s.index.Insert(key, h, row, slot, s.rows);
  InitRow(t, s, key, row);
  return row;
}

void Store::InitRow(const Table& t, Stripe& s, Key key, uint32_t row) {
  if ((row >> t.block_shift) >= s.blocks.size()) {
    s.blocks.emplace_back(new float[(size_t{1} << t.block_shift) * t.row_width]);
  }
  float* r = RowPtr(s, row, t);
  const uint32_t dim = t.spec.dim;
  if (t.spec.init == Initializer::kZeros) {
    std::memset(r, 0, size_t{dim} * sizeof(float));
  } else {
    for (uint32_t j = 0; j < dim; ++j) r[j] = InitialValue(t.spec, t.name_hash, key, j);
  }
  if (t.row_width > dim) std::memset(r + dim, 0, size_t{t.row_width - dim} * sizeof(float));
}

template <typename Fn>
Status Store::ForEachRow(Table& t, const Key* keys, size_t n, uint32_t dim, Fn fn) {
  const uint64_t* h = nullptr;
  PS_RETURN_IF_ERROR(HashKeys(t, keys, n, dim, &h));
  ForEachStripe(t, h, n, [&](Stripe& st, const uint32_t* pos, size_t count) {
    st.mu.AssertHeld();  // ForEachStripe holds it
    std::vector<uint32_t>& rid = Scratch().rows;
    rid.resize(count);
    for (size_t j = 0; j < std::min(count, kPrefetchSlots); ++j) st.index.Prefetch(h[pos[j]]);
    for (size_t j = 0; j < count; ++j) {
      if (j + kPrefetchSlots < count) st.index.Prefetch(h[pos[j + kPrefetchSlots]]);
      rid[j] = FindOrCreate(t, st, keys[pos[j]], h[pos[j]]);
    }
    fn(st, pos, rid.data(), count);
  });
  return Status::OK();
}

Status Store::ApplySparse(TableId table, const Key* keys, size_t n, uint32_t dim, const float* rows,
                          ApplyOp op) {
  Status err;
  const Table* ct = Find(table, TableKind::kSparse, &err);
  if (!ct) return err;
  Table& t = const_cast<Table&>(*ct);
  if (t.bounded) return ApplyBounded(t, keys, n, dim, rows, op);
  const Optimizer& opt = *t.optimizer;
  return ForEachRow(
      t, keys, n, dim, [&](Stripe& st, const uint32_t* pos, const uint32_t* rid, size_t count) {
        st.mu.AssertHeld();  // ForEachStripe holds it
        if (op == ApplyOp::kAssign) {
          for (size_t j = 0; j < count; ++j) {
            std::memcpy(RowPtr(st, rid[j], t), rows + size_t{pos[j]} * dim, dim * sizeof(float));
          }
          return;
        }
        // One call per stripe: the rule's row loop stays a plain inlined loop.
        thread_local std::vector<float*> xs;
        thread_local std::vector<const float*> gs;
        xs.resize(count);
        gs.resize(count);
        for (size_t j = 0; j < count; ++j) {
          xs[j] = RowPtr(st, rid[j], t);
          gs[j] = rows + size_t{pos[j]} * dim;
        }
        opt.ApplyRows(xs.data(), gs.data(), count, dim);
      });
}

Status Store::ReadSparse(TableId table, const Key* keys, size_t n, uint32_t dim, float* out) {
  Status err;
  const Table* ct = Find(table, TableKind::kSparse, &err);
  if (!ct) return err;
  Table& t = const_cast<Table&>(*ct);
  if (t.bounded) return ReadBounded(t, keys, n, dim, out);
  return ForEachRow(
      t, keys, n, dim, [&](Stripe& st, const uint32_t* pos, const uint32_t* rid, size_t count) {
        st.mu.AssertHeld();  // ForEachStripe holds it
        for (size_t j = 0; j < std::min(count, kPrefetchRows); ++j)
          __builtin_prefetch(RowPtr(st, rid[j], t));
        for (size_t j = 0; j < count; ++j) {
          if (j + kPrefetchRows < count) __builtin_prefetch(RowPtr(st, rid[j + kPrefetchRows], t));
          std::memcpy(out + size_t{pos[j]} * dim, RowPtr(st, rid[j], t), dim * sizeof(float));
        }
      });
  return Status::OK();
}

Status Store::ReadDenseFrame(TableId table, uint64_t offset, uint64_t count, Frame* out) const {
  const size_t bytes = count * sizeof(float);
  if (count > (uint64_t{1} << 40))
    return InvalidArgument("read of " + std::to_string(count) + " elements");
  {
    Status err;
    const Table* t = Find(table, TableKind::kDense, &err);
    if (!t) return err;
    const DenseRange* d = FindDense(*t, offset, count, &err);
    if (!d) return err;
    if (offset == d->first && count == d->size && count > 0) {
      // The whole range: lend it (see DenseRange). The lease holds the buffer (so that
      // ApplyDense sees it lent) and marks, when it ends, that the reader is done with it.
      const float* data = d->data();
      std::shared_ptr<const void> lease(data, [keep = d->values](const void* p) { TsanRelease(p); });
      *out = Frame::Borrow(data, bytes, std::move(lease));
      return Status::OK();
    }
  }
  std::shared_ptr<uint8_t> buf = pool_.Get(bytes);
  PS_RETURN_IF_ERROR(ReadDense(table, offset, count, reinterpret_cast<float*>(buf.get())));
  const void* data = buf.get();
  *out = Frame::Borrow(data, bytes, std::shared_ptr<const void>(std::move(buf), data));
  return Status::OK();
}

Status Store::ReadSparseFrame(TableId table, const Key* keys, size_t n, uint32_t dim, Frame* out) {
  if (n > (uint64_t{1} << 32) || dim > (1u << 20)) return InvalidArgument("sparse read too large");
  const size_t bytes = n * size_t{dim} * sizeof(float);
  std::shared_ptr<uint8_t> buf = pool_.Get(bytes);
  PS_RETURN_IF_ERROR(ReadSparse(table, keys, n, dim, reinterpret_cast<float*>(buf.get())));
  const void* data = buf.get();
  *out = Frame::Borrow(data, bytes, std::shared_ptr<const void>(std::move(buf), data));
  return Status::OK();
}

Status Store::CheckSparse(TableId table, const Key* keys, size_t n, uint32_t dim) const {
  Status err;
  const Table* t = Find(table, TableKind::kSparse, &err);
  if (!t) return err;
  if (dim != t->spec.dim) {
    return InvalidArgument("table '" + t->spec.name + "' has dim " + std::to_string(t->spec.dim) +
                           ", the request " + std::to_string(dim));
  }
  if (t->holds_all) return Status::OK();
  std::vector<uint64_t> hashes(n);
  for (size_t i = 0; i < n; ++i) hashes[i] = MixKey(keys[i]);
  return CheckKeys(*t, keys, hashes.data(), n);
}

uint64_t Store::sparse_rows() const {
  uint64_t rows = 0;
  for (const auto& kv : tables_) {
    if (kv.second.spec.kind != TableKind::kSparse) continue;
    for (size_t s = 0; s < kStripes; ++s) {
      Stripe& st = kv.second.stripes[s];
      MutexLock lock(&st.mu);
      rows += st.bounds ? st.bounds->policy.live() : st.rows;
    }
  }
  return rows;
}

std::map<TableId, Store::SparseCounters> Store::SparseStats() const {
  std::map<TableId, SparseCounters> out;
  for (const auto& kv : tables_) {
    if (kv.second.spec.kind != TableKind::kSparse) continue;
    SparseCounters& c = out[kv.first];
    for (size_t s = 0; s < kStripes; ++s) {
      Stripe& st = kv.second.stripes[s];
      MutexLock lock(&st.mu);
      if (!st.bounds) {
        c.rows_live += st.rows;
        c.admitted += st.rows;
        continue;
      }
      c.rows_live += st.bounds->policy.live();
      c.evicted += st.bounds->evicted;
      c.expired += st.bounds->expired;
      c.admitted += st.bounds->admitted;
      c.refused += st.bounds->refused;
      c.spilled += st.bounds->spilled;
      c.reloaded += st.bounds->reloaded;
      c.capacity += st.bounds->capacity;
    }
  }
  return out;
}

// --- checkpoints ---------------------------------------------------------------------

std::vector<TableId> Store::TableIds() const {
  std::vector<TableId> ids;
  for (const auto& kv : tables_) ids.push_back(kv.first);
  return ids;
}

uint32_t Store::StateWidth(TableId table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? 0 : it->second.state_width;
}

uint32_t Store::RowWidth(TableId table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? 0 : it->second.row_width;
}

std::vector<Store::DenseView> Store::DenseRanges(TableId table) {
  std::vector<DenseView> out;
  auto it = tables_.find(table);
  if (it == tables_.end()) return out;
  for (DenseRange& d : it->second.dense) {
    out.push_back(DenseView{d.first, d.size, d.data(), d.state.get()});
  }
  return out;
}

uint64_t Store::PayloadBytes() {
  uint64_t bytes = 0;
  const std::map<TableId, SparseCounters> sparse = SparseStats();
  for (TableId id : TableIds()) {
    for (const DenseView& d : DenseRanges(id)) {
      bytes += d.size * (1 + uint64_t{StateWidth(id)}) * sizeof(float);
    }
    auto it = sparse.find(id);
    if (it != sparse.end()) {
      bytes += it->second.rows_live * (sizeof(Key) + uint64_t{RowWidth(id)} * sizeof(float));
    }
  }
  return bytes;
}

std::vector<std::pair<uint64_t, uint64_t>> Store::HashRanges(TableId table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) return {};
  return it->second.hash_ranges;
}

Status Store::VisitRows(TableId table, const std::function<Status(Key, const float*)>& fn) {
  Status error;
  Table* t = const_cast<Table*>(Find(table, TableKind::kSparse, &error));
  if (t == nullptr) return error;
  for (size_t i = 0; i < kStripes; ++i) {
    Stripe& st = t->stripes[i];
    MutexLock lock(&st.mu);
    Status visited;
    st.index.ForEach([&](Key key, uint32_t row) {
      st.mu.AssertHeld();  // held around the ForEach
      if (visited.ok()) visited = fn(key, RowPtr(st, row, *t));
    });
    PS_RETURN_IF_ERROR(visited);
  }
  if (!t->cold) return Status::OK();
  // Rows only on disk: those not in memory (a row in memory is the current copy).
  const size_t stripes = t->bounded->stripes;
  return t->cold->ForEach(t->row_width, [&](Key key, const float* row) -> Status {
    const uint64_t h = MixKey(key);
    Stripe& st = t->stripes[stripes == 1 ? 0 : (h & (kStripes - 1))];
    MutexLock lock(&st.mu);
    if (st.index.Find(key, h) != kNoRow) return Status::OK();
    return fn(key, row);
  });
}

uint64_t Store::BoundedRowBytes(uint32_t row_floats) {
  return uint64_t{row_floats} * sizeof(float) + sizeof(RowMeta) + 2 * sizeof(RowIndex::Slot);
}

Status Store::Adopt(Store& from, TableId table) {
  auto src = from.tables_.find(table);
  if (src == from.tables_.end()) return Status::OK();
  auto dst = tables_.find(table);
  if (dst == tables_.end()) return NotFound("table " + std::to_string(table) + " is not held here");
  Table& s = src->second;
  Table& d = dst->second;
  if (s.spec.kind != d.spec.kind || s.state_width != d.state_width ||
      s.row_width != d.row_width) {
    return FailedPrecondition("table '" + d.spec.name + "' differs from the copy to adopt");
  }
  if (d.spec.kind == TableKind::kDense) {
    for (auto& r : s.dense) d.dense.push_back(std::move(r));
    std::sort(d.dense.begin(), d.dense.end(),
              [](const DenseRange& a, const DenseRange& b) { return a.first < b.first; });
  } else {
    for (const auto& r : s.hash_ranges) d.hash_ranges.push_back(r);
    std::sort(d.hash_ranges.begin(), d.hash_ranges.end());
    d.holds_all = false;
    Status visited = from.VisitRows(table, [&](Key id, const float* row) -> Status {
      bool held = false;
      PS_RETURN_IF_ERROR(RestoreRow(table, id, row, &held));
      if (!held) return Internal("an adopted row routes to no range held");
      return Status::OK();
    });
    PS_RETURN_IF_ERROR(visited);
  }
  from.tables_.erase(src);
  return Status::OK();
}

Status Store::ClearColdTier(TableId table) {
  auto it = tables_.find(table);
  if (it == tables_.end() || !it->second.cold) return Status::OK();
  return it->second.cold->Clear();
}

}  // namespace ps
