// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What the two halves of the sparse row store share (store.cc: unbounded tables;
// store_bounded.cc: bounded ones): per-thread scratch and the loop that runs a request's
// keys stripe by stripe under each stripe's lock. Internal to server/store*.cc.
#ifndef PS_SERVER_STORE_STRIPES_H_
#define PS_SERVER_STORE_STRIPES_H_

#include <tbb/parallel_for.h>

#include <cstring>
#include <vector>

#include "common/hash.h"
#include "common/mutex.h"
#include "server/store.h"

namespace ps {
namespace store_internal {

// Below this many keys a request's stripes run on the calling thread.
constexpr size_t kSparseParallelKeys = 4096;
// How far ahead the sparse loops prefetch index slots and rows (each loop also prefetches
// its first ones before it starts, so that a stripe's few keys are prefetched too).
// 32 rather than 16: a read of 100k keys in random order from 400k rows
// (BM_SparseReadShuffled, one core) was faster in three of four alternating rounds,
// 0.76-0.85x the time (bench/results/sparse-pull-2026-12-02/microbench-read-one-core.txt).
constexpr size_t kPrefetchSlots = 32;
constexpr size_t kPrefetchRows = 32;

// Per-thread scratch for the sparse paths (no allocation per request once warm).
struct SparseScratch {
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> order;  // key positions grouped by stripe
  std::vector<uint32_t> rows;   // resolved row numbers (per stripe, on the stripe's thread)
};
inline SparseScratch& Scratch() {
  thread_local SparseScratch s;
  return s;
}

}  // namespace store_internal

// Checks a sparse request's width and keys (every key routes to a range held) and points
// *hashes at their MixKey values, in the thread's scratch.
inline Status Store::HashKeys(const Table& t, const Key* keys, size_t n, uint32_t dim,
                              const uint64_t** hashes) const {
  if (dim != t.spec.dim) return InvalidArgument("row width " + std::to_string(dim) + " != table dim");
  store_internal::SparseScratch& sc = store_internal::Scratch();
  sc.hashes.resize(n);
  uint64_t* h = sc.hashes.data();
  for (size_t i = 0; i < n; ++i) h[i] = MixKey(keys[i]);
  PS_RETURN_IF_ERROR(CheckKeys(t, keys, h, n));
  *hashes = h;
  return Status::OK();
}

template <typename Fn>
void Store::ForEachStripe(Table& t, const uint64_t* hashes, size_t n, Fn fn) {
  // Counting sort of the key positions by stripe (stable: input order inside a stripe).
  store_internal::SparseScratch& sc = store_internal::Scratch();
  sc.order.resize(n);
  size_t start[kStripes + 1] = {0};
  for (size_t i = 0; i < n; ++i) ++start[(hashes[i] & (kStripes - 1)) + 1];
  for (size_t s = 0; s < kStripes; ++s) start[s + 1] += start[s];
  size_t cursor[kStripes];
  std::memcpy(cursor, start, sizeof(cursor));
  for (size_t i = 0; i < n; ++i)
    sc.order[cursor[hashes[i] & (kStripes - 1)]++] = static_cast<uint32_t>(i);
  const uint32_t* order = sc.order.data();
  auto body = [&](size_t s) {
    const size_t count = start[s + 1] - start[s];
    if (count == 0) return;
    Stripe& st = t.stripes[s];
    MutexLock lock(&st.mu);
    fn(st, order + start[s], count);
  };
  if (n < store_internal::kSparseParallelKeys) {
    for (size_t s = 0; s < kStripes; ++s) body(s);
  } else {
    tbb::parallel_for(size_t{0}, kStripes, body);
  }
}

}  // namespace ps

#endif  // PS_SERVER_STORE_STRIPES_H_
