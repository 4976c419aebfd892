// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The bounded path of the sparse row store (TableSpec::bounded(): capacity, expiry,
// admission, cold tier; docs/sparse.md): rows found, created, evicted, expired and
// admitted one key at a time under the stripe's lock, composed of the stripe's RowIndex,
// RowPolicy and AdmissionSketch and the table's ColdTier. store.cc holds the rest.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/hash.h"
#include "common/mutex.h"
#include "server/cold_tier.h"
#include "server/optimizer.h"
#include "server/store.h"
#include "server/store_stripes.h"

namespace ps {

using store_internal::kPrefetchSlots;
using store_internal::Scratch;
using store_internal::SparseScratch;

namespace {
// Below this capacity a bounded table uses one stripe: its policy is exact over the whole
// server. From it on, 16 stripes each hold their share (capacity / 16, the first
// capacity % 16 stripes one more) with an exact policy inside the stripe.
constexpr uint64_t kSingleStripeCapacity = 65536;
}  // namespace

Status Store::InstallBounds(Table& t) {
  const TableSpec& spec = t.spec;
  if (spec.capacity > 0 && spec.eviction == Eviction::kNone) {
    return InvalidArgument("table '" + spec.name + "': capacity needs an eviction (lru or lfu)");
  }
  t.bounded = std::make_unique<BoundedTable>();
  BoundedTable& bt = *t.bounded;
  bt.stripes = spec.capacity > 0 && spec.capacity < kSingleStripeCapacity ? 1 : kStripes;
  bt.admission = Admission(spec, t.name_hash, bt.stripes);
  bt.decay_log = -std::log(static_cast<double>(spec.score_decay));
  for (size_t i = 0; i < bt.stripes; ++i) {
    auto b = std::make_unique<Bounds>(spec, bt.decay_log, bt.admission.NewSketch());
    b->capacity = spec.capacity / bt.stripes + (i < spec.capacity % bt.stripes ? 1 : 0);
    t.stripes[i].bounds = std::move(b);
  }
  return Status::OK();
}

Status Store::TakeColdError(Table& t) {
  Status out;
  for (size_t i = 0; i < t.bounded->stripes; ++i) {
    Stripe& st = t.stripes[i];
    MutexLock lock(&st.mu);
    Status& e = st.bounds->cold_error;
    if (!e.ok()) {
      if (out.ok()) out = e;
      e = Status::OK();
    }
  }
  return out;
}

// --- bounded tables -----------------------------------------------------------------

template <typename Fn>
Status Store::ForEachBoundedStripe(Table& t, const Key* keys, size_t n, uint32_t dim, Fn fn) {
  const uint64_t* h = nullptr;
  PS_RETURN_IF_ERROR(HashKeys(t, keys, n, dim, &h));
  if (t.bounded->stripes == kStripes) {
    ForEachStripe(t, h, n,
                  [&](Stripe& st, const uint32_t* pos, size_t count) { fn(st, pos, count, h); });
    return Status::OK();
  }
  // One stripe: every key, in input order.
  SparseScratch& sc = Scratch();
  sc.order.resize(n);
  for (size_t i = 0; i < n; ++i) sc.order[i] = static_cast<uint32_t>(i);
  Stripe& st = t.stripes[0];
  MutexLock lock(&st.mu);
  fn(st, sc.order.data(), n, h);
  return Status::OK();
}

Status Store::ApplyBounded(Table& t, const Key* keys, size_t n, uint32_t dim, const float* rows,
                           ApplyOp op) {
  if (dim != t.spec.dim)
    return InvalidArgument("row width " + std::to_string(dim) + " != table dim");
  // Every push applied here is one step of the table's clock (also one whose rows were all
  // refused); expiry runs before the push, so a row pushed at step k lives through the
  // pushes k+1 .. k+expiry_steps and is dropped at the start of the next one.
  const uint64_t step = t.bounded->step.fetch_add(1, std::memory_order_relaxed) + 1;
  if (Expires(t.spec)) {
    const int64_t now = clock_ms_();
    t.bounded->now_ms.store(now, std::memory_order_relaxed);
    Expire(t, step, now);
  }
  const Optimizer& opt = *t.optimizer;
  // Rows are resolved one key at a time and their updates deferred into one ApplyRows
  // call per stripe, as on the unbounded path; but creating a row may evict another,
  // possibly one this request resolved before, so the deferred updates are applied first
  // (the evicted row is then no longer in use, and its memory may be reused).
  Status done = ForEachBoundedStripe(
      t, keys, n, dim, [&](Stripe& st, const uint32_t* pos, size_t count, const uint64_t* h) {
        st.mu.AssertHeld();  // ForEachStripe holds it
        thread_local std::vector<float*> xs;
        thread_local std::vector<const float*> gs;
        xs.clear();
        gs.clear();
        auto flush = [&] {
          if (op == ApplyOp::kAssign) {
            for (size_t i = 0; i < xs.size(); ++i) std::memcpy(xs[i], gs[i], dim * sizeof(float));
          } else if (!xs.empty()) {
            opt.ApplyRows(xs.data(), gs.data(), xs.size(), dim);
          }
          xs.clear();
          gs.clear();
        };
        for (size_t j = 0; j < std::min(count, kPrefetchSlots); ++j) st.index.Prefetch(h[pos[j]]);
        for (size_t j = 0; j < count; ++j) {
          if (j + kPrefetchSlots < count) st.index.Prefetch(h[pos[j + kPrefetchSlots]]);
          const uint32_t row = TouchBounded(t, st, keys[pos[j]], h[pos[j]], step, flush);
          if (row == kNoRow) continue;  // refused by admission: dropped (counted)
          xs.push_back(RowPtr(st, row, t));
          gs.push_back(rows + size_t{pos[j]} * dim);
        }
        flush();
      });
  // A cold-tier failure: the push is not acknowledged (rows it could not place were not
  // applied; none was dropped from memory without being written).
  if (done.ok() && t.cold) done = TakeColdError(t);
  return done;
}

Status Store::ReadBounded(Table& t, const Key* keys, size_t n, uint32_t dim, float* out) {
  if (t.spec.expiry_seconds > 0) t.bounded->now_ms.store(clock_ms_(), std::memory_order_relaxed);
  Status done = ForEachBoundedStripe(
      t, keys, n, dim, [&](Stripe& st, const uint32_t* pos, size_t count, const uint64_t* h) {
        st.mu.AssertHeld();  // ForEachStripe holds it
        for (size_t j = 0; j < std::min(count, kPrefetchSlots); ++j) st.index.Prefetch(h[pos[j]]);
        for (size_t j = 0; j < count; ++j) {
          if (j + kPrefetchSlots < count) st.index.Prefetch(h[pos[j + kPrefetchSlots]]);
          const Key key = keys[pos[j]];
          float* o = out + size_t{pos[j]} * dim;
          const uint32_t row = TouchBounded(t, st, key, h[pos[j]], 0, [] {});
          if (row != kNoRow) {
            std::memcpy(o, RowPtr(st, row, t), dim * sizeof(float));
          } else {
            // Not admitted: the value its row would start from.
            for (uint32_t c = 0; c < dim; ++c) o[c] = InitialValue(t.spec, t.name_hash, key, c);
          }
        }
      });
  if (done.ok() && t.cold) done = TakeColdError(t);
  return done;
}

template <typename BeforeEvict>
uint32_t Store::TouchBounded(const Table& t, Stripe& s, Key key, uint64_t h, uint64_t step,
                             BeforeEvict&& before_evict, bool restore) {
  const uint32_t row = s.index.Find(key, h);
  if (row == kNoRow) return CreateBounded(t, s, key, h, step, before_evict, restore);
  s.bounds->policy.Touch(row, step, t.bounded->now_ms.load(std::memory_order_relaxed));
  return row;
}

template <typename BeforeEvict>
uint32_t Store::CreateBounded(const Table& t, Stripe& s, Key key, uint64_t h, uint64_t step,
                              BeforeEvict&& before_evict, bool restore) {
  Bounds& b = *s.bounds;
  RowPolicy& policy = b.policy;
  // Cold tier: a row spilled before comes back whole (it was admitted then).
  thread_local std::vector<float> cold_row;
  bool reload = false;
  if (t.cold && !restore) {
    cold_row.resize(t.row_width);
    Status e = t.cold->Get(key, cold_row.data(), t.row_width, &reload);
    if (!e.ok()) {
      if (b.cold_error.ok()) b.cold_error = e;
      return kNoRow;
    }
  }
  const Admission& admission = t.bounded->admission;
  if (reload || restore) {
    // admitted when it was first created
  } else if (step == 0) {
    if (admission.enabled()) return kNoRow;  // a pull does not admit
  } else if (admission.enabled() && !admission.Admit(key, h, &b.sketch)) {
    ++b.refused;
    return kNoRow;
  }
  if (b.capacity > 0 && policy.live() >= b.capacity) {
    before_evict();
    const uint32_t victim = policy.Victim();
    if (t.cold) {
      // Written before it leaves memory; a failed write keeps it (and refuses this key).
      Status e = t.cold->Put(policy.meta(victim).key, RowPtr(s, victim, t), t.row_width);
      if (!e.ok()) {
        if (b.cold_error.ok()) b.cold_error = e;
        return kNoRow;
      }
      ++b.spilled;
    }
    DropRow(s, victim);
    ++b.evicted;
  }
  // A row number: a dropped one, else a new one (in a new block when needed).
  if (policy.live() == policy.numbered() && policy.numbered() >= kNoRow - 1) {
    return kNoRow;  // 2^32 rows in one stripe: cannot happen
  }
  bool fresh = false;
  const uint32_t row = policy.Allocate(&fresh);
  if (fresh) s.rows = static_cast<uint32_t>(policy.numbered());
  s.index.Insert(key, h, row, RowIndex::kNoSlot, policy.live());
  // Values from the initializer, the rule's state zero: an evicted id starts afresh.
  if (reload) {
    if ((row >> t.block_shift) >= s.blocks.size()) {
      s.blocks.emplace_back(new float[(size_t{1} << t.block_shift) * t.row_width]);
    }
    std::memcpy(RowPtr(s, row, t), cold_row.data(), size_t{t.row_width} * sizeof(float));
    ++b.reloaded;
  } else {
    InitRow(t, s, key, row);
  }
  const uint64_t table_step = t.bounded->step.load(std::memory_order_relaxed);
  policy.Add(row, key, step, table_step, t.bounded->now_ms.load(std::memory_order_relaxed),
             /*scored=*/step > 0 || restore);
  ++b.admitted;
  return row;
}

void Store::DropRow(Stripe& s, uint32_t row) {
  s.index.Erase(MixKey(s.bounds->policy.meta(row).key), row);
  s.bounds->policy.Remove(row);
}

void Store::Expire(Table& t, uint64_t step, int64_t now_ms) {
  const uint64_t n = t.spec.expiry_steps;
  const int64_t max_age_ms = static_cast<int64_t>(t.spec.expiry_seconds) * 1000;
  const auto expired = [&](const RowMeta& m) {
    return (n > 0 && m.step + n < step) || (max_age_ms > 0 && now_ms - m.update_ms > max_age_ms);
  };
  for (size_t i = 0; i < t.bounded->stripes; ++i) {
    Stripe& s = t.stripes[i];
    MutexLock lock(&s.mu);
    Bounds& b = *s.bounds;
    // The update list is ordered by step and time (newest first), up to pushes in flight
    // together.
    for (uint32_t row = b.policy.Oldest(); row != kNoRow && expired(b.policy.meta(row));
         row = b.policy.Oldest()) {
      if (t.cold) {
        // Expired rows are dropped, not spilled: an older spilled copy must not come back.
        Status e = t.cold->Delete(b.policy.meta(row).key);
        if (!e.ok()) {
          if (b.cold_error.ok()) b.cold_error = e;
          break;
        }
      }
      DropRow(s, row);
      ++b.expired;
    }
  }
}

Status Store::RestoreRow(TableId table, Key id, const float* row, bool* held) {
  *held = false;
  Status error;
  Table* t = const_cast<Table*>(Find(table, TableKind::kSparse, &error));
  if (t == nullptr) return error;
  const uint64_t h = MixKey(id);
  if (!CheckKeys(*t, &id, &h, 1).ok()) return Status::OK();
  *held = true;
  uint32_t r = kNoRow;
  Stripe* st = nullptr;
  if (t->bounded) {
    // A restored row counts as updated now (its expiry clock starts again).
    if (t->spec.expiry_seconds > 0) t->bounded->now_ms.store(clock_ms_(), std::memory_order_relaxed);
    st = &t->stripes[t->bounded->stripes == 1 ? 0 : (h & (kStripes - 1))];
    {
      MutexLock lock(&st->mu);
      r = TouchBounded(*t, *st, id, h, 0, [] {}, /*restore=*/true);
      if (r != kNoRow) {
        std::memcpy(RowPtr(*st, r, *t), row, size_t{t->row_width} * sizeof(float));
        return Status::OK();
      }
    }
    Status cold = t->cold ? TakeColdError(*t) : Status::OK();  // takes the stripes' locks
    return cold.ok() ? Internal("no room to restore id " + std::to_string(id)) : cold;
  }
  st = &t->stripes[h & (kStripes - 1)];
  MutexLock lock(&st->mu);
  r = FindOrCreate(*t, *st, id, h);
  std::memcpy(RowPtr(*st, r, *t), row, size_t{t->row_width} * sizeof(float));
  return Status::OK();
}

}  // namespace ps
