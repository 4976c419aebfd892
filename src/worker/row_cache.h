// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RowCache: a worker's cache of the rows it pulled from one sparse table
// (TableSpec::cache_rows, cache_staleness; docs/sparse.md "Worker cache"). It holds at most
// `capacity` rows, dropping the least recently used one, and answers for a row while the
// table's clock on this worker (its pushes to the table) moved fewer than `staleness`
// ticks since the row was fetched. Pushes go to the servers as always and do not change
// cached rows; an assign from this worker drops the rows it assigns.
//
// Layout: entries in one array (their rows in another, same index), linked in LRU order
// by index, found through an open-addressing index (linear probing on the mixed key, at
// most half full, backward-shift deletion): no allocation per row once warm.
//
// Thread-safety: every member may be called from any thread (one mutex).
#ifndef PS_WORKER_ROW_CACHE_H_
#define PS_WORKER_ROW_CACHE_H_

#include <cstdint>
#include <vector>

#include "common/mutex.h"
#include "ps/types.h"

namespace ps {

class RowCache {
 public:
  RowCache(uint64_t capacity, uint32_t dim, uint32_t staleness)
      : capacity_(capacity), dim_(dim), staleness_(staleness) {}

  // One push of this worker to the table.
  void Tick();
  // For each of the n keys: copies its row into out + i * dim and sets hit[i] when it is
  // cached and fresh (a hit touches it); clears hit[i] otherwise (a stale row is dropped).
  // Returns the number of hits.
  size_t Get(const Key* keys, size_t n, float* out, std::vector<bool>* hit);
  // Caches rows[i] (dim values) as keys[i]'s row, fetched at `clock` (the Tick count when
  // its pull was issued).
  void Put(const Key* keys, size_t n, const float* rows, uint64_t clock);
  // Drops the rows of these keys (an assign from this worker).
  void Drop(const Key* keys, size_t n);
  uint64_t clock() const;
  uint64_t size() const;

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  struct Entry {
    Key key = 0;
    uint64_t clock = 0;  // fetched at
    uint32_t prev = kNone, next = kNone;  // LRU list (head: most recent)
  };
  uint32_t Find(Key key) const REQUIRES(mu_);  // entry index, or kNone
  void Insert(uint32_t e) REQUIRES(mu_);        // into the index (entries_[e].key)
  void Unindex(uint32_t e) REQUIRES(mu_);       // from the index
  void Unlink(uint32_t e) REQUIRES(mu_);        // from the LRU list
  void PushFront(uint32_t e) REQUIRES(mu_);
  void Remove(uint32_t e) REQUIRES(mu_);        // both, and onto the free list

  const uint64_t capacity_;
  const uint32_t dim_;
  const uint32_t staleness_;
  mutable Mutex mu_;
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  std::vector<Entry> entries_ GUARDED_BY(mu_);
  std::vector<float> rows_ GUARDED_BY(mu_);         // entry e's row at rows_[e * dim]
  std::vector<uint32_t> free_ GUARDED_BY(mu_);      // entries to reuse
  std::vector<uint32_t> index_ GUARDED_BY(mu_);     // entry indices; size a power of two (or 0)
  uint64_t live_ GUARDED_BY(mu_) = 0;
  uint32_t head_ GUARDED_BY(mu_) = kNone;
  uint32_t tail_ GUARDED_BY(mu_) = kNone;
};

}  // namespace ps

#endif  // PS_WORKER_ROW_CACHE_H_
