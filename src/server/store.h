// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Store: the shards of tables one server holds, and the update rules (server/optimizer.h)
// applied to them. Dense ranges are contiguous float arrays (with the rule's state planes
// beside them); sparse rows live in striped hash maps, each row followed by its state,
// and are created on first touch by the table's deterministic initializer.
//
// Bounded sparse tables (TableSpec::bounded(): capacity, expiry, admission; docs/sparse.md)
// take a separate path that keeps per-row metadata (an LRU list or an LFU heap, the push
// step of the last update) beside each stripe; rows are found, evicted, expired and
// admitted under the stripe's lock, one key at a time, and a push's deferred row updates
// are applied before any eviction, so a row is never dropped while a request reads or
// writes it. Unbounded tables never enter that path.
//
// Thread-safety: Install* must not run concurrently with anything else. Apply/Read on
// different tables, or on the same sparse table, may run concurrently (stripes are
// locked); Apply/Read of disjoint elements of one dense range may run concurrently while
// the range is not lent (DenseLent; server/apply_lanes.h), and of the same elements
// never (the server applies requests that share elements one after the other).
#ifndef PS_SERVER_STORE_H_
#define PS_SERVER_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/cluster_map.h"
#include "common/mutex.h"
#include "server/admission.h"
#include "server/row_index.h"
#include "server/row_policy.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class Optimizer;
class ColdTier;

// What to do with pushed values: the table's rule, or overwrite.
enum class ApplyOp { kRule, kAssign };

// The deterministic initial value of column `col` of `key` in a table (dense tables use
// the element index as key and column 0).
float InitialValue(const TableSpec& spec, uint64_t name_hash, Key key, uint32_t col);

class Store {
 public:
  // cold_dir: where tables with TableSpec::cold_tier keep their RocksDB stores
  // (<cold_dir>/<table name>); empty: such tables are refused at install.
  explicit Store(NodeId self, std::string cold_dir = std::string());
  // Tests: the clock expiry_seconds reads (milliseconds, never going back). Call before
  // any request.
  void SetClockForTesting(std::function<int64_t()> clock_ms) { clock_ms_ = std::move(clock_ms); }
  // Writes the rows in memory of every cold-tier table to its store (a clean shutdown:
  // a store installed later on the same directory finds every row).
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Allocates (and initializes) this server's ranges of a table. Idempotent. Out of
  // memory: kResourceExhausted, and the table is not installed.
  Status Install(const TableInfo& table);
  bool Has(TableId table) const { return tables_.count(table) != 0; }
  // Frees the tables this server holds that `keep` does not list (dropped from the
  // cluster map). Rows a cold-tier table already wrote to disk stay in its directory.
  // The caller holds no request on them (the server's store lock, exclusive).
  void DropAllBut(const std::map<TableId, TableInfo>& keep);
  // Frees one table (a failed restore). The caller holds no request on it.
  void Drop(TableId table) { tables_.erase(table); }
  // A table this server holds whose learning rate the map changed gets its rule rebuilt
  // with the new rate (the rule's per-element state lives in the store and is kept).
  // The caller holds no request on it (the server's store lock, exclusive).
  Status UpdateLearningRate(const TableInfo& table);
  // The spec of a table this server holds, or null.
  const TableSpec* Spec(TableId table) const {
    auto it = tables_.find(table);
    return it == tables_.end() ? nullptr : &it->second.spec;
  }

  // Dense: elements [offset, offset + count) must lie inside one range this server holds.
  Status ApplyDense(TableId table, uint64_t offset, uint64_t count, const float* values,
                    ApplyOp op);
  Status ReadDense(TableId table, uint64_t offset, uint64_t count, float* out) const;
  // OK when ApplyDense/ReadDense would accept [offset, offset + count) of the table.
  // True when the range holding [offset, offset + count) is lent to a reply still being
  // sent (ReadDenseFrame of a whole range): an ApplyDense on it copies the range on write,
  // which must not run beside another update of the same range (server/apply_lanes.h).
  bool DenseLent(TableId table, uint64_t offset, uint64_t count) const;
  Status CheckDense(TableId table, uint64_t offset, uint64_t count) const;
  // ReadDense into a Frame ready to be sent as a reply (count * 4 bytes): a read of a
  // whole range lends the range's own memory (no copy; a later update of the range
  // copies on write while the Frame is alive); a partial read copies into a pooled buffer
  // that goes back to the pool when the Frame's owner is released.
  Status ReadDenseFrame(TableId table, uint64_t offset, uint64_t count, Frame* out) const;

  // Sparse: every key must route to a range this server holds; rows are n x dim.
  Status ApplySparse(TableId table, const Key* keys, size_t n, uint32_t dim, const float* rows,
                     ApplyOp op);
  Status ReadSparse(TableId table, const Key* keys, size_t n, uint32_t dim, float* out);
  // ReadSparse into a pooled buffer returned as a Frame (n * dim * 4 bytes).
  Status ReadSparseFrame(TableId table, const Key* keys, size_t n, uint32_t dim, Frame* out);

  // OK when ApplySparse/ReadSparse would accept these keys (dim agrees, every key held).
  Status CheckSparse(TableId table, const Key* keys, size_t n, uint32_t dim) const;

  uint64_t sparse_rows() const;

  // Counters of one sparse table on this server (docs/sparse.md). Unbounded tables:
  // rows_live == admitted, the others 0.
  struct SparseCounters {
    uint64_t rows_live = 0;
    uint64_t evicted = 0;   // rows dropped to make room (capacity)
    uint64_t expired = 0;   // rows dropped by expiry_steps
    uint64_t admitted = 0;  // rows created (rows_live = admitted - evicted - expired)
    uint64_t refused = 0;   // pushed rows of ids not admitted (dropped)
    uint64_t spilled = 0;   // cold tier: evicted rows written to RocksDB
    uint64_t reloaded = 0;  // cold tier: rows read back from RocksDB (counted in admitted)
    uint64_t capacity = 0;  // rows held at most (TableSpec capacity or capacity_bytes); 0: none
  };
  // The bytes one row of a bounded sparse table takes on a server: values and rule state
  // (row_floats: RowWidth), its policy metadata and two index slots (the index is kept at
  // most half full). What capacity_bytes is divided by.
  static uint64_t BoundedRowBytes(uint32_t row_floats);
  // Every sparse table this server holds, by id.
  std::map<TableId, SparseCounters> SparseStats() const;

  // --- Checkpoints (server/checkpoint.h reads and writes the files) ---------------------
  // The caller holds no request on the store (the server's store lock, exclusive): nothing
  // changes while these run.
  std::vector<TableId> TableIds() const;
  // The rule's state floats per element of a held table (a dense range's state planes;
  // a sparse row's size is RowWidth). 0 for an unknown table.
  uint32_t StateWidth(TableId table) const;
  // Floats per row of a held sparse table: dim values, then the rule's state
  // (Optimizer::row_state_floats(dim)); 0 for an unknown or dense table. Every copy of a
  // row (VisitRows, RestoreRow, the cold tier) has this many.
  uint32_t RowWidth(TableId table) const;
  // One dense range held: `size` values from element `first`, then state_width planes of
  // `size` floats each (plane k of element i at state[k * size + i]).
  struct DenseView {
    uint64_t first = 0;
    uint64_t size = 0;
    float* values = nullptr;
    float* state = nullptr;  // null when the rule is stateless
  };
  // A dense table's ranges held, ascending. The values may be written only while no reply
  // lends them (restore, right after Install).
  std::vector<DenseView> DenseRanges(TableId table);
  // About the bytes a checkpoint or a replica copy moves for what this store holds now:
  // dense values and state, and per sparse row in memory its key and RowWidth floats
  // (rows only in a cold tier are not counted). For progress reports, not for limits.
  uint64_t PayloadBytes();
  // A sparse table's mixed-hash ranges held: [begin, end), end 0 = 2^64.
  std::vector<std::pair<uint64_t, uint64_t>> HashRanges(TableId table) const;
  // Calls fn(id, row) for every row of a sparse table (row: dim values then the rule's
  // state, RowWidth floats): those in memory, and for a cold-tier table
  // those only on disk. Stops at fn's first error.
  Status VisitRows(TableId table, const std::function<Status(Key, const float*)>& fn);
  // Restore: sets the row of `id` (a whole row, as VisitRows gives it), created if absent
  // (past admission; a bounded table at capacity evicts as a push would). *held: false
  // (and nothing done) when the id routes to another server.
  Status RestoreRow(TableId table, Key id, const float* row, bool* held);
  // Restore of a cold-tier table: empties its RocksDB store first, so that rows written
  // there after the checkpoint do not come back.
  Status ClearColdTier(TableId table);

  // Replication: this server takes over the ranges `from` (the copy it kept of a dead
  // server's ranges) holds of `table`: dense ranges move without a copy, sparse rows are
  // copied in (a bounded table evicts past its capacity as a push would). `from` loses
  // the table. The caller holds no request on either store.
  Status Adopt(Store& from, TableId table);

 private:
  Status InstallUnguarded(const TableInfo& table);
  // A contiguous range of a dense table. Its values may be lent to a pull reply still
  // being sent (ReadDenseFrame of the whole range): while values.use_count() > 1, an
  // update writes the new values into a fresh buffer instead (copy on write, fused with
  // the update, so it costs no extra pass) and the reply keeps the old ones.
  struct DenseRange {
    uint64_t first = 0;  // first element held
    uint64_t size = 0;   // elements held
    std::shared_ptr<float> values;
    std::unique_ptr<float[]> state;  // the rule's state planes (size * state_width), or null
    float* data() const { return values.get(); }
  };

  // Sparse rows live in kStripes stripes (by the low bits of MixKey(key)), each with its
  // own lock, index (server/row_index.h) and rows in blocks of 2^Table::block_shift rows
  // (about 64 KiB; never moved once created, so a growing table does not copy its rows).
  static constexpr size_t kStripes = size_t{1} << RowIndex::kStripeBits;
  static constexpr uint32_t kNoRow = RowIndex::kNoRow;
  // What a bounded table keeps per stripe (all guarded by Stripe::mu, through the
  // stripe's PT_GUARDED_BY pointer): the policy's row
  // order (server/row_policy.h), the admission sketch, and the counters.
  struct Bounds {
    Bounds(const TableSpec& spec, double decay_log, AdmissionSketch sketch)
        : policy(spec.eviction, spec.expiry_steps > 0 || spec.expiry_seconds > 0, decay_log),
          sketch(std::move(sketch)) {}
    uint64_t capacity = 0;  // this stripe's share (0: none)
    RowPolicy policy;
    AdmissionSketch sketch;
    uint64_t evicted = 0, expired = 0, admitted = 0, refused = 0;
    uint64_t spilled = 0, reloaded = 0;
    Status cold_error;  // the first cold-tier failure since the last request collected it
  };
  struct Stripe {
    Mutex mu;
    RowIndex index GUARDED_BY(mu);
    uint32_t rows GUARDED_BY(mu) = 0;  // rows numbered (unbounded: all in use;
                                       // bounded: see the policy)
    std::vector<std::unique_ptr<float[]>> blocks GUARDED_BY(mu);
    std::unique_ptr<Bounds> bounds PT_GUARDED_BY(mu);  // bounded tables only
  };
  // A bounded table's shared settings (fixed at install) and its push clock.
  struct BoundedTable {
    size_t stripes = 0;  // 1 (capacity < kSingleStripeCapacity) or kStripes
    Admission admission;
    double decay_log = 0;  // eviction "decayed": ln(1 / score_decay)
    std::atomic<uint64_t> step{0};  // pushes applied to the table on this server
    // The store's clock (ms) when the latest request on the table began: what a row it
    // creates or updates is stamped with (expiry_seconds).
    std::atomic<int64_t> now_ms{0};
  };
  struct Table {
    TableSpec spec;
    uint64_t name_hash = 0;
    std::shared_ptr<const Optimizer> optimizer;  // the table's update rule
    uint32_t state_width = 0;                    // the rule's state floats per element
    uint32_t row_width = 0;  // sparse: floats per row (dim values + row_state_floats(dim))
    std::vector<DenseRange> dense;               // ascending by first
    std::vector<std::pair<uint64_t, uint64_t>>
        hash_ranges;  // sparse: [begin, end) held; end 0 = 2^64
    std::unique_ptr<Stripe[]> stripes;
    uint32_t block_shift = 0;  // sparse: log2(rows per block)
    bool holds_all = false;    // sparse: one range covering the whole hash space
    std::unique_ptr<BoundedTable> bounded;  // sparse with TableSpec::bounded(), else null
    std::shared_ptr<ColdTier> cold;         // TableSpec::cold_tier, else null
  };

  const Table* Find(TableId id, TableKind kind, Status* error) const;
  const DenseRange* FindDense(const Table& t, uint64_t offset, uint64_t count, Status* error) const;
  // hashes[i] = MixKey(keys[i]).
  Status CheckKeys(const Table& t, const Key* keys, const uint64_t* hashes, size_t n) const;
  // The width and CheckKeys of a request; *hashes: its keys' MixKey (thread scratch).
  Status HashKeys(const Table& t, const Key* keys, size_t n, uint32_t dim,
                  const uint64_t** hashes) const;
  // Row number of `key` (hash h = MixKey(key)), created if absent.
  uint32_t FindOrCreate(const Table& t, Stripe& s, Key key, uint64_t h) REQUIRES(s.mu);
  // Makes room for row number `row` (a new block when it starts one) and writes its
  // initial values (the initializer's, the rule's state zero).
  void InitRow(const Table& t, Stripe& s, Key key, uint32_t row) REQUIRES(s.mu);
  static float* RowPtr(Stripe& s, uint32_t row, const Table& t) REQUIRES(s.mu) {
    return s.blocks[row >> t.block_shift].get() +
           size_t{row & ((uint32_t{1} << t.block_shift) - 1)} * t.row_width;
  }
  // Runs fn(stripe, positions of its keys, count) for every stripe with keys, under the
  // stripe's lock; stripes in parallel for big requests. Positions are in input order,
  // so duplicate keys apply in order. `hashes` as above.
  template <typename Fn>
  void ForEachStripe(Table& t, const uint64_t* hashes, size_t n, Fn fn);
  // Checks the keys (dim, ranges held), finds or creates their rows, and calls
  // fn(stripe, positions, row ids, count) per stripe under the stripe's lock: positions
  // index `keys`, row ids the stripe's rows.
  template <typename Fn>
  Status ForEachRow(Table& t, const Key* keys, size_t n, uint32_t dim, Fn fn);

  // Sets up a bounded table's stripes (t.spec.bounded()).
  Status InstallBounds(Table& t);
  // The bounded path (see the header comment). op: a push (rule or assign) or a pull.
  Status ApplyBounded(Table& t, const Key* keys, size_t n, uint32_t dim, const float* rows,
                      ApplyOp op);
  Status ReadBounded(Table& t, const Key* keys, size_t n, uint32_t dim, float* out);
  // Runs fn(stripe, positions, count, hashes) per stripe of a bounded table under its lock.
  template <typename Fn>
  Status ForEachBoundedStripe(Table& t, const Key* keys, size_t n, uint32_t dim, Fn fn);
  // The row of `key`, touched (LRU/LFU; `step` > 0: a push of that step, which also
  // refreshes expiry); created (evicting one if the stripe is full) unless admission
  // refuses it: kNoRow, for a push or, in a table with admission, a pull of an absent id.
  // before_evict() runs just before a row is evicted (the caller applies what it deferred:
  // row pointers it holds may then be reused).
  // `restore`: the row is being restored from a checkpoint: created past admission and
  // without a cold-tier lookup (the caller writes its values).
  template <typename BeforeEvict>
  uint32_t TouchBounded(const Table& t, Stripe& s, Key key, uint64_t h, uint64_t step,
                        BeforeEvict&& before_evict, bool restore = false) REQUIRES(s.mu);
  // TouchBounded's path for an id without a row (see there).
  template <typename BeforeEvict>
  uint32_t CreateBounded(const Table& t, Stripe& s, Key key, uint64_t h, uint64_t step,
                         BeforeEvict&& before_evict, bool restore) REQUIRES(s.mu);
  // Drops a row: index slot and policy; its number goes to the free list.
  void DropRow(Stripe& s, uint32_t row) REQUIRES(s.mu);
  // Drops the rows of every stripe last updated more than expiry_steps pushes before
  // `step`, or more than expiry_seconds before `now_ms`.
  void Expire(Table& t, uint64_t step, int64_t now_ms);
  static bool Expires(const TableSpec& s) { return s.expiry_steps > 0 || s.expiry_seconds > 0; }
  // The first cold-tier error any stripe saw since the last call (cleared), or OK.
  Status TakeColdError(Table& t);

  // Milliseconds on a monotonic clock (expiry_seconds); tests may replace it.
  std::function<int64_t()> clock_ms_;
  const NodeId self_;
  const std::string cold_dir_;
  std::map<TableId, Table> tables_;
  mutable BufferPool pool_;  // reply buffers of Read*Frame
};

}  // namespace ps

#endif  // PS_SERVER_STORE_H_
