// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/ps_requests.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "common/wire_type.h"
#include "worker/packing.h"

namespace ps {
namespace {

// Slices below this size travel fused with the other small slices for the same server.
constexpr uint64_t kFuseBelowBytes = 256 << 10;

// The wire element type of table t's values (pack::WireType's value).
uint8_t WireOf(const TableInfo& t) { return static_cast<uint8_t>(t.spec.wire_dtype); }

// n pushed values narrowed to `wire` (fp16 or bf16) in a fresh buffer the frame owns.
Frame Narrowed(const float* src, size_t n, uint8_t wire) {
  std::shared_ptr<uint16_t[]> buf(new uint16_t[n == 0 ? 1 : n]);
  pack::ToWire(src, n, static_cast<pack::WireType>(wire), buf.get());
  return Frame::Borrow(buf.get(), n * sizeof(uint16_t),
                       std::shared_ptr<const void>(buf, buf.get()));
}

// The part that moves range r of dense table t; a pull's values land at out + its first
// element (out null: nothing comes back).
Part DensePart(const TableInfo& t, const KeyRange& r, float* out) {
  Part p;
  p.server = r.server;
  p.table = t.id;
  p.offset = t.RangeFirstElem(r);
  p.count = t.RangeEndElem(r) - p.offset;
  p.wire = WireOf(t);
  if (out != nullptr) {
    p.dst = out + p.offset;
    p.value_count = p.count;
  }
  return p;
}

}  // namespace

size_t PsRequests::AddDenseParts(std::vector<Part>* parts, const TableInfo& t, const KeyRange& r,
                                 float* out, uint32_t clock) const {
  Part whole = DensePart(t, r, out);
  whole.clock = clock;
  // Lanes: a share small enough to be fused (Many) takes lane 0 as fused messages do, so
  // that its pushes and pulls stay in order whichever call sends them; a bigger one's
  // k-th part takes DataLane + k (the same part of every request on the share, since the
  // split depends on the share alone).
  const bool fusable = whole.count * sizeof(float) < kFuseBelowBytes;
  whole.lane = fusable ? 0 : DataLane(t.id, whole.offset);
  const uint64_t wire_bytes = whole.count * t.spec.WireElementBytes();
  // bsp/ssp servers count one push per (worker, clock) and range: those never split.
  if (part_bytes_ == 0 || wire_bytes <= part_bytes_ || t.spec.sync != SyncMode::kAsync) {
    parts->push_back(std::move(whole));
    return 1;
  }
  const uint64_t n = (wire_bytes + part_bytes_ - 1) / part_bytes_;  // parts
  const uint64_t per = (whole.count + n - 1) / n;                   // elements per part
  size_t added = 0;
  for (uint64_t first = 0; first < whole.count; first += per) {
    Part p = whole;
    p.offset = whole.offset + first;
    p.count = std::min(per, whole.count - first);
    if (out != nullptr) {
      p.dst = out + p.offset;
      p.value_count = p.count;
    }
    p.split = true;
    if (!fusable) p.lane = whole.lane + static_cast<uint32_t>(added);
    parts->push_back(std::move(p));
    ++added;
  }
  return added;
}

const TableInfo* PsRequests::Lookup(TableId table, TableKind kind,
                                    std::shared_ptr<const ClusterMap>* map, Status* error) const {
  if (!*map) *map = map_();  // one snapshot for the whole request
  if (!*map) {
    *error = FailedPrecondition("the worker is not started (call Start first)");
    return nullptr;
  }
  const TableInfo* t = *map ? (*map)->FindTable(table) : nullptr;
  if (!t) {
    *error = NotFound("unknown table id " + std::to_string(table) + " (declare it first)");
    return nullptr;
  }
  if (t->spec.kind != kind) {
    *error =
        InvalidArgument("table '" + t->spec.name + "' is " +
                        (t->spec.kind == TableKind::kDense ? "dense" : "sparse") + ": use the " +
                        (t->spec.kind == TableKind::kDense ? "dense" : "sparse") + " calls");
    return nullptr;
  }
  return t;
}

Ticket PsRequests::Dense(MsgType type, TableId table, const float* in, float* out, size_t n,
                         Callback cb, std::shared_ptr<const void> keep,
                         std::function<Status(Request&)> finish, bool in_is_wire) {
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kDense, &map, &err);
  if (!t) return tracker_->Failed(err, std::move(cb));
  if (n != t->spec.size) {
    return tracker_->Failed(
        InvalidArgument("table '" + t->spec.name + "' has " + std::to_string(t->spec.size) +
                        " elements, the request has " + std::to_string(n)),
        std::move(cb));
  }
  const bool pushes = type != MsgType::kPull;
  if ((pushes && in == nullptr) ||
      ((type == MsgType::kPull || type == MsgType::kPushPull) && out == nullptr)) {
    return tracker_->Failed(InvalidArgument("null buffer"), std::move(cb));
  }
  auto req = tracker_->New(type, table, std::move(cb));
  req->out = out;
  req->keep = keep;
  req->finish = std::move(finish);
  const uint32_t clock = TakeClock(*t, type);
  for (const KeyRange& r : t->ranges) {
    AddDenseParts(&req->parts, *t, r, req->pulls() ? out : nullptr, clock);
  }
  // Values narrowed for the wire go from a copy: the caller's memory is not lent.
  const uint8_t wire = WireOf(*t);
  const size_t wire_bytes = t->spec.WireElementBytes();
  return tracker_->Submit(
      req, map->epoch, /*borrows=*/pushes && (wire == 0 || in_is_wire),
      [&](size_t i, const std::shared_ptr<const void>& borrow) {
        std::vector<Frame> frames;
        if (pushes) {
          const Part& p = req->parts[i];
          if (in_is_wire) {
            frames.push_back(
                Frame::Borrow(reinterpret_cast<const uint8_t*>(in) + p.offset * wire_bytes,
                              p.count * wire_bytes, borrow));
          } else if (wire != 0) {
            frames.push_back(Narrowed(in + p.offset, p.count, wire));
            if (i == 0) ++tracker_->stats().copies;  // one copied push, whatever its parts
          } else {
            frames.push_back(Frame::Borrow(in + p.offset, p.count * sizeof(float), borrow));
          }
        }
        return frames;
      });
}

Ticket PsRequests::Many(MsgType type, const std::vector<TableId>& tables,
                        const std::vector<const float*>& ins, const std::vector<float*>& outs,
                        const std::vector<size_t>& sizes, Callback cb) {
  const bool pushes = type != MsgType::kPull;
  const bool pulls = type == MsgType::kPull || type == MsgType::kPushPull;
  std::shared_ptr<const ClusterMap> map = map_();
  if (!map)
    return tracker_->Failed(FailedPrecondition("the worker is not started (call Start first)"),
                            std::move(cb));
  std::vector<const TableInfo*> infos;
  for (size_t i = 0; i < tables.size(); ++i) {
    Status err;
    const TableInfo* t = Lookup(tables[i], TableKind::kDense, &map, &err);
    if (!t) return tracker_->Failed(err.WithContext("tensor " + std::to_string(i)), std::move(cb));
    if (sizes[i] != t->spec.size) {
      return tracker_->Failed(
          InvalidArgument("tensor " + std::to_string(i) + ": table '" + t->spec.name + "' has " +
                          std::to_string(t->spec.size) + " elements, got " +
                          std::to_string(sizes[i])),
          std::move(cb));
    }
    if ((pushes && ins[i] == nullptr) || (pulls && outs[i] == nullptr)) {
      return tracker_->Failed(InvalidArgument("tensor " + std::to_string(i) + ": null buffer"),
                              std::move(cb));
    }
    infos.push_back(t);
  }
  auto req = tracker_->New(type, kInvalidTable, std::move(cb));
  std::vector<const float*> part_src;  // regular parts: pushed values
  struct Fusion {
    std::vector<FusedSegment> segments;
    std::vector<const float*> srcs;
    Part part;
  };
  std::map<NodeId, Fusion> fusions;  // small slices, per server
  for (size_t i = 0; i < infos.size(); ++i) {
    const TableInfo* t = infos[i];
    const bool synced = t->spec.sync != SyncMode::kAsync;  // its own parts, with its clock
    const bool narrowed = WireOf(*t) != 0;                 // fused messages carry float32 only
    const uint32_t clock = TakeClock(*t, type);
    for (const KeyRange& r : t->ranges) {
      const uint64_t first = t->RangeFirstElem(r);
      const uint64_t count = t->RangeEndElem(r) - first;
      if (synced || narrowed || count * sizeof(float) >= kFuseBelowBytes) {
        const size_t added = AddDenseParts(&req->parts, *t, r, pulls ? outs[i] : nullptr, clock);
        for (size_t k = req->parts.size() - added; k < req->parts.size(); ++k) {
          part_src.push_back(pushes ? ins[i] + req->parts[k].offset : nullptr);
        }
      } else {
        Fusion& f = fusions[r.server];
        FusedSegment seg;
        seg.table = t->id;
        seg.offset = first;
        seg.count = count;
        f.segments.push_back(seg);
        f.srcs.push_back(pushes ? ins[i] + first : nullptr);
        if (pulls) {
          f.part.pieces.emplace_back(outs[i] + first, count);
          f.part.value_count += count;
        }
      }
    }
  }
  const size_t regular = req->parts.size();
  std::vector<Fusion*> fused_of_part;
  for (auto& kv : fusions) {
    Part& p = kv.second.part;
    p.server = kv.first;
    p.table = 0;
    p.fused = true;
    p.count = kv.second.segments.size();
    req->parts.push_back(p);
    fused_of_part.push_back(&kv.second);
  }
  return tracker_->Submit(
      req, map->epoch, /*borrows=*/pushes,
      [&](size_t i, const std::shared_ptr<const void>& borrow) {
        std::vector<Frame> frames;
        const Part& p = req->parts[i];
        if (i < regular) {
          if (pushes && p.wire != 0) {
            frames.push_back(Narrowed(part_src[i], p.count, p.wire));
            ++tracker_->stats().copies;
          } else if (pushes) {
            frames.push_back(Frame::Borrow(part_src[i], p.count * sizeof(float), borrow));
          }
          return frames;
        }
        const Fusion& f = *fused_of_part[i - regular];
        frames.push_back(Frame::Copy(f.segments.data(), f.segments.size() * sizeof(FusedSegment)));
        if (pushes) {  // fusion: the small slices copied once into one buffer
          uint64_t total = 0;
          for (const auto& seg : f.segments) total += seg.count;
          std::shared_ptr<float[]> values(new float[total == 0 ? 1 : total]);
          uint64_t at = 0;
          for (size_t k = 0; k < f.segments.size(); ++k) {
            std::memcpy(values.get() + at, f.srcs[k], f.segments[k].count * sizeof(float));
            at += f.segments[k].count;
          }
          frames.push_back(Frame::Borrow(values.get(), total * sizeof(float),
                                         std::shared_ptr<const void>(values, values.get())));
          ++tracker_->stats().copies;
        }
        return frames;
      });
}

Ticket PsRequests::Sparse(MsgType type, TableId table, const Key* keys, size_t num_keys,
                          const float* rows, float* out, size_t rows_len, Callback cb) {
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kSparse, &map, &err);
  if (!t) return tracker_->Failed(err, std::move(cb));
  const bool pushes = type != MsgType::kPull;
  err = CheckSparseArgs(*t, keys, num_keys, pushes ? rows : out, rows_len);
  if (!err.ok()) return tracker_->Failed(err, std::move(cb));
  if (std::shared_ptr<RowCache> cache = CacheFor(*t)) {
    if (type == MsgType::kPush || type == MsgType::kPushPull) cache->Tick();
    if (type == MsgType::kAssign) cache->Drop(keys, num_keys);
    if (type == MsgType::kPull) return CachedPull(map, *t, keys, num_keys, out, cache, std::move(cb));
  }
  SparseBatch batch;
  if (type == MsgType::kPull && !PullDedups(*t, num_keys)) {
    batch = PreparePullAsIs(*t, keys, num_keys);
  } else {
    batch = PrepareSparse(type, *t, keys, num_keys, rows);
    if (type == MsgType::kPull) PullDeduplicated(*t, num_keys, batch.offsets.back());
  }
  if (pushes) ++tracker_->stats().copies;
  // SendSparse picks how a pull's rows reach `out`.
  return SendSparse(type, map, *t, std::move(batch), out, nullptr, std::move(cb));
}

// Pull deduplication. Sending a key once per request saves a row on the wire per repeat
// but costs the worker a hash table over every key and a scatter of the rows; when a
// table's pulls hardly repeat keys, sending them as they are is cheaper for both ends.
// Every kDedupEvery-th pull of a table (and its first) deduplicates and measures: at most
// kAsIsRepeats of its keys repeated, the next kDedupEvery - 1 go as they are (a wrong
// guess costs at most those pulls' extra rows). Only async tables with parts
// (part_bytes > 0) go as they are: a server's share then travels in parts of at most
// part_bytes however many repeats a request has, as a deduplicated one would (a bsp/ssp
// share is one message, which repeats could push past max_message_bytes). Tables whose
// rows count their reads (bounded: eviction scores, expiry) always deduplicate, as do
// requests below kDedupMeasureKeys keys (cheap either way).
namespace {
constexpr uint32_t kDedupEvery = 16;
constexpr double kAsIsRepeats = 0.02;
constexpr size_t kDedupMeasureKeys = 256;
bool AlwaysDedups(const TableSpec& s, uint64_t part_bytes) {
  return s.sync != SyncMode::kAsync || part_bytes == 0 || s.capacity != 0 ||
         s.capacity_bytes != 0 || s.eviction != Eviction::kNone || s.expiry_steps != 0 ||
         s.expiry_seconds != 0;
}
// A host pull keeps its replies (Part::keep_reply) up to this many bytes of rows; a larger
// one copies each reply into a buffer of unique rows as it arrives instead, so that it
// never holds much of a same-host peer's shared-memory ring (128 MiB).
constexpr size_t kKeepRepliesBytes = size_t{32} << 20;
}  // namespace

bool PsRequests::PullDedups(const TableInfo& t, size_t num_keys) {
  if (num_keys < kDedupMeasureKeys || AlwaysDedups(t.spec, part_bytes_)) return true;
  MutexLock lock(&dedup_mu_);
  auto it = pulls_as_is_.find(t.id);
  if (it == pulls_as_is_.end() || it->second == 0) return true;
  --it->second;
  return false;
}

void PsRequests::PullDeduplicated(const TableInfo& t, size_t num_keys, size_t unique) {
  if (num_keys < kDedupMeasureKeys || AlwaysDedups(t.spec, part_bytes_)) return;
  const bool rare = static_cast<double>(num_keys - unique) <= kAsIsRepeats * num_keys;
  MutexLock lock(&dedup_mu_);
  pulls_as_is_[t.id] = rare ? kDedupEvery - 1 : 0;
}

SparseBatch PsRequests::PreparePullAsIs(const TableInfo& t, const Key* keys,
                                        size_t num_keys) const {
  std::vector<uint64_t> begins;
  for (const KeyRange& r : t.ranges) begins.push_back(r.begin);
  SparseBatch batch;
  batch.offsets.assign(begins.size() + 1, 0);
  std::shared_ptr<uint8_t> kbuf = sparse_pool_.Get(std::max<size_t>(num_keys, 1) * sizeof(Key));
  Key* bkeys = reinterpret_cast<Key*>(kbuf.get());
  batch.in_caller_order = begins.size() == 1;
  if (!batch.in_caller_order) batch.inverse.resize(num_keys);
  pack::BucketWithInverse(keys, nullptr, num_keys, 0, begins.data(), begins.size(), bkeys, nullptr,
                          batch.in_caller_order ? nullptr : batch.inverse.data(),
                          batch.offsets.data());
  batch.keys = bkeys;
  batch.owner = std::move(kbuf);
  return batch;
}

std::shared_ptr<RowCache> PsRequests::CacheFor(const TableInfo& t) {
  if (t.spec.cache_rows == 0 || t.spec.cache_staleness == 0) return nullptr;
  MutexLock lock(&cache_mu_);
  std::shared_ptr<RowCache>& c = caches_[t.id];
  if (!c) c = std::make_shared<RowCache>(t.spec.cache_rows, t.spec.dim, t.spec.cache_staleness);
  return c;
}

Ticket PsRequests::CachedPull(const std::shared_ptr<const ClusterMap>& map, const TableInfo& t,
                              const Key* keys, size_t num_keys, float* out,
                              const std::shared_ptr<RowCache>& cache, Callback cb) {
  const uint32_t dim = t.spec.dim;
  CachedPullPlan plan = PlanCachedPull(t, keys, num_keys, cache);
  if (plan.send.offsets.back() == 0) {
    pack::ScatterRows(plan.inverse.data(), plan.inverse.size(), plan.unique_rows(nullptr), dim,
                      out);
    return tracker_->Failed(Status::OK(), std::move(cb));  // complete at once, nothing sent
  }
  auto finish = [inverse = std::move(plan.inverse), unique_rows = std::move(plan.unique_rows),
                 dim](Request& r) {
    pack::ScatterRows(inverse.data(), inverse.size(), unique_rows(r.staging.data()), dim, r.out);
    return Status::OK();
  };
  return SendSparse(MsgType::kPull, map, t, std::move(plan.send), out, std::move(finish),
                    std::move(cb));
}

PsRequests::CachedPullPlan PsRequests::PlanCachedPull(
    const TableInfo& t, const Key* keys, size_t num_keys,
    const std::shared_ptr<RowCache>& cache) const {
  const uint32_t dim = t.spec.dim;
  // The unique ids, grouped by range; the rows of those the cache has are filled in here.
  SparseBatch all = PrepareSparse(MsgType::kPull, t, keys, num_keys, nullptr);
  const size_t m = all.offsets.back();
  auto unique_rows = std::make_shared<std::vector<float>>(m * size_t{dim});
  const uint64_t clock = cache->clock();
  std::vector<bool> hit;
  const size_t hits = cache->Get(all.keys, m, unique_rows->data(), &hit);
  tracker_->stats().cache_hits += hits;
  tracker_->stats().cache_misses += m - hits;
  // The misses, still grouped by range, go to the servers.
  auto miss_keys = std::make_shared<std::vector<Key>>();
  miss_keys->reserve(m - hits);
  std::vector<uint32_t> miss_pos;
  miss_pos.reserve(m - hits);
  CachedPullPlan plan;
  plan.send.offsets.assign(all.offsets.size(), 0);
  for (size_t b = 0; b + 1 < all.offsets.size(); ++b) {
    for (size_t u = all.offsets[b]; u < all.offsets[b + 1]; ++u) {
      if (hit[u]) continue;
      miss_keys->push_back(all.keys[u]);
      miss_pos.push_back(static_cast<uint32_t>(u));
    }
    plan.send.offsets[b + 1] = miss_keys->size();
  }
  plan.send.keys = miss_keys->data();
  plan.send.owner = miss_keys;
  plan.inverse = std::move(all.inverse);
  plan.unique_rows = [unique_rows, miss_keys, miss_pos = std::move(miss_pos), cache, clock,
                      dim](const float* pulled) -> const float* {
    if (!miss_pos.empty()) {
      for (size_t j = 0; j < miss_pos.size(); ++j) {
        std::memcpy(unique_rows->data() + size_t{miss_pos[j]} * dim, pulled + j * dim,
                    dim * sizeof(float));
      }
      cache->Put(miss_keys->data(), miss_keys->size(), pulled, clock);
    }
    return unique_rows->data();
  };
  return plan;
}

Status PsRequests::CheckSparseArgs(const TableInfo& t, const Key* keys, size_t num_keys,
                                   const float* rows, size_t rows_len) const {
  const uint32_t dim = t.spec.dim;
  if (rows_len != num_keys * dim) {
    return InvalidArgument("table '" + t.spec.name + "' has dim " + std::to_string(dim) + ": " +
                           std::to_string(num_keys) + " keys need " +
                           std::to_string(num_keys * dim) + " values, got " +
                           std::to_string(rows_len));
  }
  if (num_keys > 0xFFFFFFFFull) return InvalidArgument("more than 2^32 keys in one request");
  if (num_keys > 0 && (keys == nullptr || rows == nullptr)) return InvalidArgument("null buffer");
  return Status::OK();
}

SparseBatch PsRequests::PrepareSparse(MsgType type, const TableInfo& t, const Key* keys,
                                      size_t num_keys, const float* rows) const {
  const uint32_t dim = t.spec.dim;
  const bool sums = type == MsgType::kPush || type == MsgType::kPushPull;
  std::vector<uint64_t> begins;
  for (const KeyRange& r : t.ranges) begins.push_back(r.begin);
  SparseBatch batch;
  batch.offsets.assign(begins.size() + 1, 0);
  // Uninitialized: every unique key's slot and row is written before it is sent.
  std::shared_ptr<uint8_t> kbuf = sparse_pool_.Get(std::max<size_t>(num_keys, 1) * sizeof(Key));
  const bool with_rows = type != MsgType::kPull;
  std::shared_ptr<uint8_t> rbuf =
      with_rows ? sparse_pool_.Get(std::max<size_t>(num_keys * size_t{dim}, 1) * sizeof(float))
                : nullptr;
  Key* bkeys = reinterpret_cast<Key*>(kbuf.get());
  float* brows = with_rows ? reinterpret_cast<float*>(rbuf.get()) : nullptr;
  std::vector<uint32_t> inverse(sums ? 0 : num_keys);
  // Unique keys grouped by server range (in order of first occurrence within each: a
  // hash table, no sort), duplicates summed for pushes; the inverse maps every caller
  // position to its unique key.
  // (The unique count it returns is batch.offsets.back().)
  pack::HashCoalesceAndBucket(keys, sums ? rows : nullptr, num_keys, sums ? dim : 0, begins.data(),
                              begins.size(), bkeys, sums ? brows : nullptr,
                              sums ? nullptr : inverse.data(), batch.offsets.data());
  if (type == MsgType::kAssign) {  // the last row of a duplicated key wins
    for (size_t i = 0; i < num_keys; ++i) {
      std::memcpy(brows + size_t{inverse[i]} * dim, rows + i * dim, dim * sizeof(float));
    }
  }
  if (type == MsgType::kPull) batch.inverse = std::move(inverse);
  batch.keys = bkeys;
  batch.rows = brows;
  batch.owner = std::make_shared<std::pair<std::shared_ptr<uint8_t>, std::shared_ptr<uint8_t>>>(
      std::move(kbuf), std::move(rbuf));
  return batch;
}

Ticket PsRequests::SendSparse(MsgType type, const std::shared_ptr<const ClusterMap>& map,
                              const TableInfo& t, SparseBatch batch, float* out,
                              std::function<Status(Request&)> finish, Callback cb) {
  const uint32_t dim = t.spec.dim;
  const bool pushes = type != MsgType::kPull;
  auto req = tracker_->New(type, t.id, std::move(cb));
  req->sparse = true;
  req->dim = dim;
  req->out = out;
  // How a host pull (no staging given, nothing else to finish) brings its rows to `out`:
  // - keys in the caller's order: every part's rows go straight to their place (direct);
  // - up to kKeepRepliesBytes of rows: each reply is kept, and `finish` copies every
  //   caller position's row from it (scatter: no buffer of unique rows, no copy into it);
  // - larger: each reply is copied into a buffer of unique rows as it arrives, and
  //   `finish` scatters from there.
  const bool host_pull = type == MsgType::kPull && !batch.staging && !finish;
  const bool direct = host_pull && batch.in_caller_order;
  const bool by_inverse = host_pull && !direct && !batch.inverse.empty();
  const bool scatter =
      by_inverse && batch.offsets.back() * size_t{dim} * sizeof(float) <= kKeepRepliesBytes;
  if (scatter) {
    finish = &PsRequests::ScatterReplies;
  } else if (by_inverse) {
    finish = [](Request& r) {
      pack::ScatterRows(r.inverse.data(), r.inverse.size(), r.staging.data(), r.dim, r.out);
      return Status::OK();
    };
  }
  req->finish = std::move(finish);
  if (req->pulls()) {
    req->inverse = std::move(batch.inverse);
    if (batch.staging) {
      req->staging.Adopt(std::move(batch.staging), batch.offsets.back() * size_t{dim});
    } else if (!scatter && !direct) {
      req->staging.Reset(sparse_pool_, batch.offsets.back() * size_t{dim});
    }
  }
  float* dst = nullptr;
  if (req->pulls()) dst = direct ? out : scatter ? nullptr : req->staging.data();
  AddSparseParts(&req->parts, t, batch, pushes, dst, TakeClock(t, type));
  if (scatter) {
    for (Part& p : req->parts) {
      p.keep_reply = true;
      p.value_count = p.count * dim;
    }
  }
  // The batch owns its buffers (no borrowed caller memory): nothing to wait for after send.
  return tracker_->Submit(req, map->epoch, /*borrows=*/false,
                          [&](size_t i, const std::shared_ptr<const void>&) {
                            return SparsePartFrames(req->parts[i], t, batch, pushes);
                          });
}

Status PsRequests::ScatterReplies(Request& r) {
  std::vector<Part>& parts = r.parts;
  const size_t np = parts.size();
  const uint32_t dim = r.dim;
  // The parts cover the unique keys in order (AddSparseParts): the part of unique key u
  // is the last whose offset is <= u.
  std::vector<uint64_t> first(np);
  std::vector<const uint8_t*> rows(np);
  std::vector<size_t> row_bytes(np);
  for (size_t k = 0; k < np; ++k) {
    first[k] = parts[k].offset;
    rows[k] = parts[k].reply.data();
    row_bytes[k] = size_t{dim} * pack::WireBytes(static_cast<pack::WireType>(parts[k].wire));
  }
  const uint8_t wire = np > 0 ? parts[0].wire : 0;  // one table: every part has its type
  const uint32_t* inverse = r.inverse.data();
  const size_t n = r.inverse.size();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = inverse[i];
    const size_t k = pack::LastAtOrBelow(first.data(), np, u);
    const uint8_t* src = rows[k] + (u - first[k]) * row_bytes[k];
    float* dst = r.out + i * dim;
    if (wire != 0) {
      pack::FromWire(src, dim, static_cast<pack::WireType>(wire), dst);
    } else {
      std::memcpy(dst, src, size_t{dim} * sizeof(float));
    }
  }
  return Status::OK();  // Finalize lets the replies go
}

std::vector<Frame> PsRequests::SparsePartFrames(const Part& p, const TableInfo& t,
                                                const SparseBatch& batch, bool pushes) {
  const uint32_t dim = t.spec.dim;
  std::vector<Frame> frames;
  frames.push_back(Frame::Borrow(batch.keys + p.offset, p.count * sizeof(Key), batch.owner));
  if (pushes && batch.rows_in_wire) {
    frames.push_back(Frame::Borrow(
        reinterpret_cast<const uint8_t*>(batch.rows) + p.offset * dim * t.spec.WireElementBytes(),
        p.count * dim * t.spec.WireElementBytes(), batch.owner));
  } else if (pushes && p.wire != 0) {
    frames.push_back(Narrowed(batch.rows + p.offset * dim, p.count * dim, p.wire));
  } else if (pushes) {
    frames.push_back(
        Frame::Borrow(batch.rows + p.offset * dim, p.count * dim * sizeof(float), batch.owner));
  }
  return frames;
}

size_t PsRequests::AddSparseParts(std::vector<Part>* parts, const TableInfo& t,
                                  const SparseBatch& batch, bool pushes, float* staging,
                                  uint32_t clock) const {
  const uint32_t dim = t.spec.dim;
  const size_t before = parts->size();
  // A bsp/ssp server counts every worker's pushes: each range gets one, empty or not.
  const bool every_range = pushes && t.spec.sync != SyncMode::kAsync;
  // A server's share above part_bytes_ on the wire (keys and rows, either direction) goes
  // as several parts of equal key counts, on async tables (a bsp/ssp server counts one
  // push per worker, clock and range).
  const uint64_t key_bytes = sizeof(Key) + uint64_t{dim} * t.spec.WireElementBytes();
  const bool may_split = part_bytes_ > 0 && t.spec.sync == SyncMode::kAsync;
  for (size_t b = 0; b + 1 < batch.offsets.size(); ++b) {
    const uint64_t count = batch.offsets[b + 1] - batch.offsets[b];
    if (count == 0 && !every_range) continue;
    const uint64_t n = may_split && count * key_bytes > part_bytes_
                           ? (count * key_bytes + part_bytes_ - 1) / part_bytes_
                           : 1;
    const uint64_t per = n > 1 ? (count + n - 1) / n : count;
    for (uint64_t first = 0; first < count || (count == 0 && first == 0); first += per) {
      Part p;
      p.server = t.ranges[b].server;
      p.table = t.id;
      p.offset = batch.offsets[b] + first;
      p.count = std::min(per, count - first);
      p.dim = dim;
      p.wire = WireOf(t);
      p.split = n > 1;
      // Parts of different requests may share keys: the whole table keeps one lane.
      p.lane = DataLane(t.id, 0);
      if (staging != nullptr) {
        p.dst = staging + p.offset * dim;
        p.value_count = p.count * dim;
      }
      p.clock = clock;
      parts->push_back(std::move(p));
      if (count == 0) break;
    }
  }
  return parts->size() - before;
}

uint32_t PsRequests::TakeClock(const TableInfo& t, MsgType type) {
  if (t.spec.sync == SyncMode::kAsync || type == MsgType::kAssign) return 0;
  MutexLock lock(&clock_mu_);
  uint32_t& next = clocks_[t.id];
  const uint32_t clock = next;
  if (type == MsgType::kPush || type == MsgType::kPushPull) ++next;
  return clock;
}

}  // namespace ps
