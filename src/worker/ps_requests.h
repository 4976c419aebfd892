// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PsRequests: a worker's requests to the parameter servers. Each call checks its
// arguments against one snapshot of the cluster map, slices the request into parts by
// the table's key ranges (dense: one part per range, or several when the range's share is
// above Options::part_bytes; small slices of a multi-tensor request fused per server;
// sparse: keys coalesced and bucketed per range), and hands the parts to the
// RequestTracker. GPU-memory variants (device_path.cc) pack on the GPU first.
//
// Sparse tables with a worker cache (TableSpec::cache_rows): pulls go through the
// table's RowCache (only the ids it cannot answer are sent), pushes tick its clock.
//
// Several sparse tables in one request (SparseMany, sparse_many.cc): each table's entries
// merged and coalesced as one request's keys, then the unique keys of every async float32
// table bound for one server packed into fused sparse messages (docs/wire-format.md);
// the other tables' parts travel as single-table parts of the same request.
//
// Tables synchronized by the servers (TableSpec::sync bsp or ssp): every request carries
// this worker's clock for the table (TakeClock); their tensors are never fused, and a
// sparse push sends a part to every range, empty or not, so that every server counts it.
//
// Thread-safety: every member may be called from any thread.
#ifndef PS_WORKER_PS_REQUESTS_H_
#define PS_WORKER_PS_REQUESTS_H_

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/cluster_map.h"
#include "common/mutex.h"
#include "ps/worker.h"
#include "worker/request_tracker.h"
#include "worker/row_cache.h"

namespace ps {

// The unique keys of a sparse request grouped by server range, ready to send. Built on
// the host by PrepareSparse, or by the GPU packing path into pinned memory.
struct SparseBatch {
  const Key* keys = nullptr;          // m keys, grouped by range, unique
  const float* rows = nullptr;        // pushes: m x dim rows in the same order
  // rows already hold the table's wire type (m x dim elements of 2 bytes; the device
  // path narrows on the GPU), sent as they are.
  bool rows_in_wire = false;
  std::shared_ptr<const void> owner;  // keeps keys and rows alive while frames are in flight
  std::vector<size_t> offsets;        // one more than the table's ranges; range b is [b, b+1)
  std::vector<uint32_t> inverse;      // pulls: caller position -> position in keys
  // Pulls: keys[i] is the caller's key i (sent as they came, one range): the reply rows
  // land in the caller's `out` at once, and `inverse` is empty.
  bool in_caller_order = false;
  // Pulls: where the unique rows land, at least m x dim floats (null: a buffer of the
  // worker's pool; the device path gives pinned memory, which goes up to the GPU as it is).
  std::shared_ptr<uint8_t> staging;
};

class PsRequests {
 public:
  // `map` returns the current cluster map, or null while the worker is not running.
  using MapSource = std::function<std::shared_ptr<const ClusterMap>()>;
  using Callback = Worker::Callback;

  // part_bytes: Options::part_bytes (0: a server's share always goes as one message).
  PsRequests(RequestTracker* tracker, MapSource map, int64_t part_bytes = 0)
      : tracker_(tracker), map_(std::move(map)), part_bytes_(static_cast<uint64_t>(part_bytes)) {}

  // `keep` holds the memory `in`/`out` live in; `finish` runs when every part succeeded.
  // `in_is_wire`: `in` holds n values already in the table's wire type (the device path
  // narrows on the GPU), sent as they are.
  Ticket Dense(MsgType type, TableId table, const float* in, float* out, size_t n, Callback cb,
               std::shared_ptr<const void> keep = nullptr,
               std::function<Status(Request&)> finish = nullptr, bool in_is_wire = false);
  // Several dense tensors in one request (PushMany/PullMany): small slices fused.
  Ticket Many(MsgType type, const std::vector<TableId>& tables,
              const std::vector<const float*>& ins, const std::vector<float*>& outs,
              const std::vector<size_t>& sizes, Callback cb);
  Ticket Sparse(MsgType type, TableId table, const Key* keys, size_t num_keys, const float* rows,
                float* out, size_t rows_len, Callback cb);
  // Several sparse tables in one request (PushSparseMany/PullSparseMany): type kPush or
  // kPull; an entry's `rows` (push) or `out` (pull) holds rows_len floats.
  struct SparseEntry {
    TableId table = kInvalidTable;
    const Key* keys = nullptr;
    size_t num_keys = 0;
    const float* rows = nullptr;
    float* out = nullptr;
    size_t rows_len = 0;
  };
  // `after` (pulls): runs once every entry's rows are in its `out`, before the request
  // completes; its error becomes the request's.
  Ticket SparseMany(MsgType type, const std::vector<SparseEntry>& entries, Callback cb,
                    std::function<Status(Request&)> after = nullptr);
  // The checks SparseMany makes of entry `i` before anything is touched (the table known
  // and sparse, rows_len == num_keys * dim, no null pointer with keys); `*table` is its
  // table when they pass.
  Status CheckSparseEntry(const ClusterMap& map, const SparseEntry& e, size_t i, bool pushes,
                          const TableInfo** table) const;
  Ticket SparseManyDevice(MsgType type, const std::vector<SparseEntry>& entries, void* stream,
                          Callback cb);

  // GPU memory (device_path.cc); without CUDA they fail with FailedPrecondition.
  Ticket PushDevice(TableId table, const float* grad, size_t n, void* stream, Callback cb);
  Ticket PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb);
  Ticket SparseDevice(MsgType type, TableId table, const Key* keys, size_t num_keys,
                      const float* rows, float* out, size_t rows_len, void* stream, Callback cb);

 private:
  // Checks common to every request; returns the table or sets *error. Takes the current
  // map into *map if it is null, else looks up in the snapshot given (so that several
  // lookups of one request see the same map and the returned pointers stay valid).
  const TableInfo* Lookup(TableId table, TableKind kind, std::shared_ptr<const ClusterMap>* map,
                          Status* error) const;
  Status CheckSparseArgs(const TableInfo& t, const Key* keys, size_t num_keys, const float* rows,
                         size_t rows_len) const;
  // Host path: coalesces (pushes) or deduplicates (pulls) and groups keys by server.
  SparseBatch PrepareSparse(MsgType type, const TableInfo& t, const Key* keys, size_t num_keys,
                            const float* rows) const;
  // Host path of a pull whose keys are sent as they are, repeats included: grouped by
  // server only (pack::BucketWithInverse), or, over one range, in the caller's order.
  SparseBatch PreparePullAsIs(const TableInfo& t, const Key* keys, size_t num_keys) const;
  // Whether this pull of table t deduplicates its keys (PullDedupPolicy), and what a
  // deduplicated one found (num_keys keys, unique of them distinct).
  bool PullDedups(const TableInfo& t, size_t num_keys);
  void PullDeduplicated(const TableInfo& t, size_t num_keys, size_t unique);
  // Sends a prepared batch; `finish` runs when every part succeeded (pulls).
  Ticket SendSparse(MsgType type, const std::shared_ptr<const ClusterMap>& map, const TableInfo& t,
                    SparseBatch batch, float* out, std::function<Status(Request&)> finish,
                    Callback cb);
  // A host sparse pull's `finish`: every caller position's row, from the reply of the
  // part that carries its unique key (Part::keep_reply), to r.out through r.inverse.
  static Status ScatterReplies(Request& r);
  // The frames of single-table sparse part p of `batch`: its keys, and a push's rows (in
  // the table's wire type), lent from the batch.
  static std::vector<Frame> SparsePartFrames(const Part& p, const TableInfo& t,
                                             const SparseBatch& batch, bool pushes);
  // Appends the parts that move `batch` of table t, all carrying `clock`: one per range
  // with keys (every range for a bsp/ssp push), or several of at most part_bytes_ on the
  // wire each for an async table's larger share. Part i's keys are batch.keys +
  // parts[i].offset; a pull's rows land at staging + offset * dim (staging null: pushes).
  // Returns how many were added.
  size_t AddSparseParts(std::vector<Part>* parts, const TableInfo& t, const SparseBatch& batch,
                        bool pushes, float* staging, uint32_t clock) const;

  // The clock a request on table t carries (header.clock): on a bsp/ssp table the number
  // of pushes (push, pushpull) this worker made to it before; a push or pushpull counts
  // one more. 0 on async tables and for assigns. Call once the request is valid.
  uint32_t TakeClock(const TableInfo& t, MsgType type);

  // Appends the parts that move range r of dense table t (one, or several of at most
  // part_bytes_ on the wire each when the table is async and the share larger), all
  // carrying `clock`; a pull's values land at out + their first element (out null:
  // nothing comes back). Returns how many were added.
  size_t AddDenseParts(std::vector<Part>* parts, const TableInfo& t, const KeyRange& r, float* out,
                       uint32_t clock) const;

  // The worker cache of a table that has one (TableSpec::cache_rows), made on first use;
  // null for the others.
  std::shared_ptr<RowCache> CacheFor(const TableInfo& t);
  // A pull through the cache: fresh cached rows are copied, the other ids pulled; a pull
  // the cache answers whole completes at once.
  Ticket CachedPull(const std::shared_ptr<const ClusterMap>& map, const TableInfo& t,
                    const Key* keys, size_t num_keys, float* out,
                    const std::shared_ptr<RowCache>& cache, Callback cb);
  // What a pull through a cache sends, and how its answer becomes rows: `send` holds the
  // unique ids the cache could not answer (grouped by range), `inverse` maps every caller
  // position to its unique id, and unique_rows(pulled), given send's rows as pulled (in
  // send's order; null when nothing was sent), caches them and returns every unique id's
  // row, which ScatterRows through `inverse` delivers.
  struct CachedPullPlan {
    SparseBatch send;
    std::vector<uint32_t> inverse;
    std::function<const float*(const float* pulled)> unique_rows;
  };
  CachedPullPlan PlanCachedPull(const TableInfo& t, const Key* keys, size_t num_keys,
                                const std::shared_ptr<RowCache>& cache) const;

  RequestTracker* const tracker_;
  const MapSource map_;
  const uint64_t part_bytes_;
  // The coalesced keys and rows of sparse requests: recycled, already faulted-in buffers
  // (a fresh vector per request was zero-filled and page-faulted in every time).
  mutable BufferPool sparse_pool_{size_t{128} << 20};
  Mutex clock_mu_;
  std::unordered_map<TableId, uint32_t> clocks_ GUARDED_BY(clock_mu_);
  Mutex cache_mu_;
  std::unordered_map<TableId, std::shared_ptr<RowCache>> caches_ GUARDED_BY(cache_mu_);
  // Per table: how many more pulls send their keys as they are (PullDedups).
  Mutex dedup_mu_;
  std::unordered_map<TableId, uint32_t> pulls_as_is_ GUARDED_BY(dedup_mu_);
};

}  // namespace ps

#endif  // PS_WORKER_PS_REQUESTS_H_
