// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PsRequests::SparseMany (Worker::PushSparseMany/PullSparseMany): several sparse tables
// of one step in one request. Every entry is checked before anything is touched. The
// entries of one table are merged and coalesced as one request's keys would be
// (PrepareSparse, or the table's worker cache). Then the unique keys of every async
// float32 table bound for one server are packed into fused sparse messages
// (docs/wire-format.md, "Fused sparse messages") of at most part_bytes_ each, while the
// other tables (bsp/ssp: their clocks and one part per range; fp16/bf16 on the wire) get
// the single-table parts PushSparse would send, in the same request. A pull's rows land
// in one staging buffer, table after table, and are scattered to every entry's output
// once every part arrived.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "worker/packing.h"
#include "worker/ps_requests.h"

namespace ps {
namespace {

// One table of the request: its entries merged.
struct TableGroup {
  const TableInfo* t = nullptr;
  std::vector<size_t> entries;  // indices of its entries, in the caller's order
  uint64_t keys = 0;            // their keys, in all
  SparseBatch send;             // the unique keys to send, grouped by range (pushes: rows)
  // Pulls: every position of the entries' keys (concatenated) -> its unique key, and the
  // unique rows given the pulled ones (null: the pulled rows are the unique rows).
  std::vector<uint32_t> inverse;
  std::function<const float*(const float*)> unique_rows;
  size_t staged = 0;   // pulls: its first float in the request's staging
  bool fused = false;  // its keys travel in fused messages
};

// Unique keys [first, first + count) of a group's send batch, for one server.
struct Run {
  size_t group = 0;
  uint64_t first = 0;
  uint64_t count = 0;
};

// One fused sparse message: a segment per run.
struct Fusion {
  NodeId server = kUnassignedId;
  std::vector<FusedSparseSegment> segments;
  std::vector<Run> runs;
  uint64_t bytes = 0;  // keys and rows, on the wire
};

// Where a pull's rows go once every part arrived: one per table.
struct Delivery {
  std::vector<uint32_t> inverse;
  std::function<const float*(const float*)> unique_rows;
  size_t staged = 0;
  uint32_t dim = 0;
  std::vector<std::pair<float*, size_t>> outs;  // (output, keys) per entry, in order
};

}  // namespace

Status PsRequests::CheckSparseEntry(const ClusterMap& map, const SparseEntry& e, size_t i,
                                    bool pushes, const TableInfo** table) const {
  const TableInfo* t = map.FindTable(e.table);
  const std::string what =
      "entry " + std::to_string(i) + " (table " +
      (t != nullptr ? "'" + t->spec.name + "'" : "id " + std::to_string(e.table)) + ")";
  if (t == nullptr) return InvalidArgument(what + ": unknown table (declare it first)");
  if (t->spec.kind != TableKind::kSparse) {
    return InvalidArgument(what + ": the table is dense (PushMany/PullMany take dense tables)");
  }
  *table = t;
  return CheckSparseArgs(*t, e.keys, e.num_keys, pushes ? e.rows : e.out, e.rows_len)
      .WithContext(what);
}

Ticket PsRequests::SparseMany(MsgType type, const std::vector<SparseEntry>& entries, Callback cb,
                              std::function<Status(Request&)> after) {
  const bool pushes = type == MsgType::kPush;
  if (type != MsgType::kPush && type != MsgType::kPull) {
    return tracker_->Failed(InvalidArgument("only pushes and pulls take several sparse tables"),
                            std::move(cb));
  }
  std::shared_ptr<const ClusterMap> map = map_();  // one snapshot for the whole request
  if (!map) {
    return tracker_->Failed(FailedPrecondition("the worker is not started (call Start first)"),
                            std::move(cb));
  }
  // Every entry checked before anything is touched (no clock taken, no cache ticked).
  std::vector<TableGroup> groups;
  std::map<TableId, size_t> group_of;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SparseEntry& e = entries[i];
    const TableInfo* t = nullptr;
    const Status err = CheckSparseEntry(*map, e, i, pushes, &t);
    if (!err.ok()) return tracker_->Failed(err, std::move(cb));
    auto at = group_of.emplace(t->id, groups.size());
    if (at.second) {
      groups.emplace_back();
      groups.back().t = t;
    }
    TableGroup& g = groups[at.first->second];
    g.entries.push_back(i);
    g.keys += e.num_keys;
    if (g.keys > 0xFFFFFFFFull) {
      return tracker_->Failed(
          InvalidArgument("entry " + std::to_string(i) + " (table '" + t->spec.name +
                          "'): more than 2^32 keys of one table in one request"),
          std::move(cb));
    }
  }

  // Each table's keys coalesced (pushes: the rows of a repeated key summed, across its
  // entries in the caller's order) or deduplicated (pulls), grouped by range.
  for (TableGroup& g : groups) {
    const TableInfo& t = *g.t;
    const SparseEntry& only = entries[g.entries[0]];
    const Key* keys = only.keys;
    const float* rows = only.rows;
    std::vector<Key> merged_keys;
    std::vector<float> merged_rows;
    if (g.entries.size() > 1) {
      merged_keys.reserve(g.keys);
      if (pushes) merged_rows.reserve(g.keys * t.spec.dim);
      for (size_t i : g.entries) {
        const SparseEntry& e = entries[i];
        if (e.num_keys == 0) continue;
        merged_keys.insert(merged_keys.end(), e.keys, e.keys + e.num_keys);
        if (pushes) merged_rows.insert(merged_rows.end(), e.rows, e.rows + e.rows_len);
      }
      keys = merged_keys.data();
      rows = merged_rows.data();
    }
    std::shared_ptr<RowCache> cache = CacheFor(t);
    if (cache && pushes) cache->Tick();
    if (cache && !pushes) {
      CachedPullPlan plan = PlanCachedPull(t, keys, g.keys, cache);
      g.send = std::move(plan.send);
      g.inverse = std::move(plan.inverse);
      g.unique_rows = std::move(plan.unique_rows);
    } else {
      g.send = PrepareSparse(type, t, keys, g.keys, rows);
      g.inverse = std::move(g.send.inverse);
    }
    // Fused messages carry float32 only, and never a table the servers synchronize.
    g.fused = t.spec.sync == SyncMode::kAsync && t.spec.wire_dtype == WireDType::kFloat32;
  }

  auto req = tracker_->New(type, kInvalidTable, std::move(cb));
  req->sparse = true;
  req->dim = 0;  // tables differ: each part says its own (Part::dim)
  float* staging = nullptr;
  if (!pushes) {
    size_t total = 0;
    for (TableGroup& g : groups) {
      g.staged = total;
      total += g.send.offsets.back() * size_t{g.t->spec.dim};
    }
    req->staging.Reset(sparse_pool_, total);
    staging = req->staging.data();
  }

  // Single-table parts first; the fused tables' keys collected per server, table after
  // table and range after range.
  std::vector<size_t> part_group;
  std::map<NodeId, std::vector<Run>> runs;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const TableGroup& g = groups[gi];
    const TableInfo& t = *g.t;
    const uint32_t clock = TakeClock(t, type);
    if (!g.fused) {
      const size_t added = AddSparseParts(&req->parts, t, g.send, pushes,
                                          pushes ? nullptr : staging + g.staged, clock);
      part_group.insert(part_group.end(), added, gi);
      continue;
    }
    for (size_t b = 0; b + 1 < g.send.offsets.size(); ++b) {
      const uint64_t count = g.send.offsets[b + 1] - g.send.offsets[b];
      if (count > 0) runs[t.ranges[b].server].push_back(Run{gi, g.send.offsets[b], count});
    }
  }
  const size_t regular = req->parts.size();

  // Each server's runs packed into fused messages of at most part_bytes_ on the wire (a
  // run cut where a message fills up; one key always fits) and kMaxFusedSegments segments.
  std::vector<Fusion> fusions;
  for (const auto& kv : runs) {
    Fusion cur;
    cur.server = kv.first;
    const auto close = [&] {
      if (cur.segments.empty()) return;
      fusions.push_back(std::move(cur));
      cur = Fusion();
      cur.server = kv.first;
    };
    for (const Run& r : kv.second) {
      const TableInfo& t = *groups[r.group].t;
      const uint64_t key_bytes = sizeof(Key) + uint64_t{t.spec.dim} * sizeof(float);
      uint64_t first = r.first;
      uint64_t left = r.count;
      while (left > 0) {
        uint64_t room = left;
        if (part_bytes_ > 0)
          room = cur.bytes < part_bytes_ ? (part_bytes_ - cur.bytes) / key_bytes : 0;
        if ((room == 0 && !cur.segments.empty()) || cur.segments.size() >= kMaxFusedSegments) {
          close();
          continue;
        }
        const uint64_t take = std::min(left, std::max<uint64_t>(room, 1));
        FusedSparseSegment seg;
        seg.table = t.id;
        seg.dim = t.spec.dim;
        seg.keys = take;
        cur.segments.push_back(seg);
        cur.runs.push_back(Run{r.group, first, take});
        cur.bytes += take * key_bytes;
        first += take;
        left -= take;
      }
    }
    close();
  }
  for (const Fusion& f : fusions) {
    Part p;
    p.server = f.server;
    p.table = 0;
    p.fused = true;
    p.count = f.segments.size();
    p.lane = 0;     // as every fused message: the first stream
    if (!pushes) {  // the reply's rows, segment after segment, to their tables' staging
      for (const Run& r : f.runs) {
        const uint32_t dim = groups[r.group].t->spec.dim;
        p.pieces.emplace_back(staging + groups[r.group].staged + r.first * dim, r.count * dim);
        p.value_count += r.count * dim;
      }
    }
    req->parts.push_back(std::move(p));
  }

  if (!pushes) {
    auto deliveries = std::make_shared<std::vector<Delivery>>();
    for (TableGroup& g : groups) {
      Delivery d;
      d.inverse = std::move(g.inverse);
      d.unique_rows = g.unique_rows;
      d.staged = g.staged;
      d.dim = g.t->spec.dim;
      for (size_t i : g.entries) d.outs.emplace_back(entries[i].out, entries[i].num_keys);
      deliveries->push_back(std::move(d));
    }
    req->finish = [deliveries, after = std::move(after)](Request& r) {
      for (const Delivery& d : *deliveries) {
        const float* pulled = r.staging.data() + d.staged;
        const float* unique = d.unique_rows ? d.unique_rows(pulled) : pulled;
        const uint32_t* inverse = d.inverse.data();
        for (const auto& out : d.outs) {
          pack::ScatterRows(inverse, out.second, unique, d.dim, out.first);
          inverse += out.second;
        }
      }
      return after ? after(r) : Status::OK();
    };
  } else {
    ++tracker_->stats().copies;
  }

  // Every frame lends the request's own buffers (the batches, or the fused copies), never
  // the caller's memory: nothing to wait for after sending.
  return tracker_->Submit(
      req, map->epoch, /*borrows=*/false, [&](size_t i, const std::shared_ptr<const void>&) {
        if (i < regular) {
          const TableGroup& g = groups[part_group[i]];
          return SparsePartFrames(req->parts[i], *g.t, g.send, pushes);
        }
        const Fusion& f = fusions[i - regular];
        uint64_t keys = 0;
        uint64_t floats = 0;
        for (const Run& r : f.runs) {
          keys += r.count;
          floats += r.count * groups[r.group].t->spec.dim;
        }
        std::vector<Frame> frames;
        frames.push_back(
            Frame::Copy(f.segments.data(), f.segments.size() * sizeof(FusedSparseSegment)));
        std::shared_ptr<uint8_t> kbuf = sparse_pool_.Get(keys * sizeof(Key));
        std::shared_ptr<uint8_t> rbuf = pushes ? sparse_pool_.Get(floats * sizeof(float)) : nullptr;
        Key* kat = reinterpret_cast<Key*>(kbuf.get());
        float* rat = pushes ? reinterpret_cast<float*>(rbuf.get()) : nullptr;
        for (const Run& r : f.runs) {
          const TableGroup& g = groups[r.group];
          std::memcpy(kat, g.send.keys + r.first, r.count * sizeof(Key));
          kat += r.count;
          if (pushes) {
            const size_t dim = g.t->spec.dim;
            std::memcpy(rat, g.send.rows + r.first * dim, r.count * dim * sizeof(float));
            rat += r.count * dim;
          }
        }
        frames.push_back(Frame::Borrow(kbuf.get(), keys * sizeof(Key), kbuf));
        if (pushes) frames.push_back(Frame::Borrow(rbuf.get(), floats * sizeof(float), rbuf));
        return frames;
      });
}

}  // namespace ps
