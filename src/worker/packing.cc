// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/packing.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/hash.h"

namespace ps {
namespace pack {
namespace {

// A key and its input position. Sorting these (stably) is the core of coalescing.
struct KeyPos {
  Key key;
  uint32_t pos;
};

// Below this size a comparison sort beats the radix sort's fixed cost.
constexpr size_t kRadixThreshold = 2048;

// Returns (keys[i], i) sorted by key, stable (duplicates keep input order).
// LSD radix sort on 8-bit digits; digits on which all keys agree are skipped, so small
// key spaces (e.g. ids < 2^32) cost fewer passes.
std::vector<KeyPos> SortByKey(const Key* keys, size_t n) {
  std::vector<KeyPos> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = KeyPos{keys[i], static_cast<uint32_t>(i)};
  if (n < kRadixThreshold) {
    std::stable_sort(a.begin(), a.end(),
                     [](const KeyPos& x, const KeyPos& y) { return x.key < y.key; });
    return a;
  }
  constexpr int kDigits = 8;
  std::vector<std::array<size_t, 256>> hist(kDigits);
  for (auto& h : hist) h.fill(0);
  for (size_t i = 0; i < n; ++i) {
    Key k = keys[i];
    for (int d = 0; d < kDigits; ++d) ++hist[d][(k >> (8 * d)) & 0xFF];
  }
  std::vector<KeyPos> b(n);
  for (int d = 0; d < kDigits; ++d) {
    const size_t first_digit = (a[0].key >> (8 * d)) & 0xFF;
    if (hist[d][first_digit] == n) continue;  // every key has this digit: order unchanged
    std::array<size_t, 256> cursor;
    size_t sum = 0;
    for (int v = 0; v < 256; ++v) {
      cursor[v] = sum;
      sum += hist[d][v];
    }
    for (size_t i = 0; i < n; ++i) b[cursor[(a[i].key >> (8 * d)) & 0xFF]++] = a[i];
    a.swap(b);
  }
  return a;
}

// Coalesces into out_keys/out_rows (m entries in key order); inverse (optional) gets the
// unique index of every input key. Returns m.
size_t CoalesceSorted(const std::vector<KeyPos>& sorted, const float* rows, uint32_t dim,
                      Key* out_keys, float* out_rows, uint32_t* inverse) {
  const bool with_rows = rows != nullptr && out_rows != nullptr && dim > 0;
  size_t m = 0;
  for (const KeyPos& kp : sorted) {
    const bool new_key = (m == 0 || out_keys[m - 1] != kp.key);
    if (new_key) {
      out_keys[m] = kp.key;
      if (with_rows) {
        std::memcpy(out_rows + m * dim, rows + size_t{kp.pos} * dim, dim * sizeof(float));
      }
      ++m;
    } else if (with_rows) {
      float* dst = out_rows + (m - 1) * dim;
      const float* r = rows + size_t{kp.pos} * dim;
      for (uint32_t j = 0; j < dim; ++j) dst[j] += r[j];
    }
    if (inverse) inverse[kp.pos] = static_cast<uint32_t>(m - 1);
  }
  return m;
}

}  // namespace

size_t Coalesce(const Key* keys, const float* rows, size_t n, uint32_t dim, Key* out_keys,
                float* out_rows, uint32_t* inverse) {
  if (n == 0) return 0;
  return CoalesceSorted(SortByKey(keys, n), rows, dim, out_keys, out_rows, inverse);
}

size_t UniqueKeys(const Key* keys, size_t n, Key* out_keys, uint32_t* inverse) {
  return Coalesce(keys, nullptr, n, 0, out_keys, nullptr, inverse);
}

size_t BucketOf(Key key, const uint64_t* bucket_begin, size_t num_buckets) {
  return LastAtOrBelow(bucket_begin, num_buckets, MixKey(key));  // the last begin <= h
}

void Bucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
            const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys, float* out_rows,
            size_t* offsets) {
  BucketWithInverse(keys, rows, n, dim, bucket_begin, num_buckets, out_keys, out_rows, nullptr,
                    offsets);
}

size_t CoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                         const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                         float* out_rows, uint32_t* inverse, size_t* offsets) {
  std::fill(offsets, offsets + num_buckets + 1, size_t{0});
  if (n == 0) return 0;
  const bool with_rows = rows != nullptr && out_rows != nullptr && dim > 0;
  const std::vector<KeyPos> sorted = SortByKey(keys, n);
  // Unique keys and, per unique key, its first sorted position (its run starts there).
  std::vector<size_t> run_begin;
  run_begin.reserve(n);
  for (size_t p = 0; p < n; ++p) {
    if (p == 0 || sorted[p].key != sorted[p - 1].key) run_begin.push_back(p);
  }
  const size_t m = run_begin.size();
  run_begin.push_back(n);
  // Destination of every unique key: stable counting sort by bucket.
  std::vector<uint32_t> bucket(m);
  for (size_t u = 0; u < m; ++u) {
    bucket[u] =
        static_cast<uint32_t>(BucketOf(sorted[run_begin[u]].key, bucket_begin, num_buckets));
    ++offsets[bucket[u] + 1];
  }
  for (size_t b = 0; b < num_buckets; ++b) offsets[b + 1] += offsets[b];
  std::vector<size_t> cursor(offsets, offsets + num_buckets);
  for (size_t u = 0; u < m; ++u) {
    const size_t dst = cursor[bucket[u]]++;
    out_keys[dst] = sorted[run_begin[u]].key;
    for (size_t p = run_begin[u]; p < run_begin[u + 1]; ++p) {
      const uint32_t src = sorted[p].pos;
      if (with_rows) {
        float* d = out_rows + dst * dim;
        const float* r = rows + size_t{src} * dim;
        if (p == run_begin[u]) {
          std::memcpy(d, r, dim * sizeof(float));
        } else {
          for (uint32_t j = 0; j < dim; ++j) d[j] += r[j];
        }
      }
      if (inverse) inverse[src] = static_cast<uint32_t>(dst);
    }
  }
  return m;
}

namespace {

// HashCoalesceAndBucket's scratch, kept per thread between calls: allocating and
// page-faulting fresh tables for every request costs as much as the packing. A thread
// drops them after a request larger than kKeepScratchKeys keys.
constexpr size_t kKeepScratchKeys = size_t{1} << 21;

struct HashScratch {
  // Open addressing, linear probing: a slot is (tag << 32) | unique index, or kEmptySlot.
  // The tag (the hash's top 32 bits) settles almost every probe of an occupied slot
  // without reading the unique key it points at (a second random access).
  std::vector<uint64_t> slots;
  std::vector<Key> uniq;         // unique keys, in first-occurrence order
  std::vector<uint32_t> bucket;  // per unique key: its bucket
  std::vector<uint32_t> dest;    // per unique key: its position in out_keys
  std::vector<uint32_t> which;   // per input key: its unique key (when inverse is null)
  std::vector<size_t> cursor;
  void Trim() {
    if (slots.capacity() > 2 * kKeepScratchKeys) *this = HashScratch();
  }
};
// No real slot equals it: a unique index is below 2^32 - 1 (n < 2^32).
constexpr uint64_t kEmptySlot = ~uint64_t{0};
// How many keys ahead pass 1 prefetches its home slot (the table is larger than L2 from
// about 30k keys, and a key is new in almost every probe of a pull's batch).
constexpr size_t kHashPrefetch = 16;

}  // namespace

size_t HashCoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                             const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                             float* out_rows, uint32_t* inverse, size_t* offsets) {
  std::fill(offsets, offsets + num_buckets + 1, size_t{0});
  if (n == 0) return 0;
  const bool with_rows = rows != nullptr && out_rows != nullptr && dim > 0;
  thread_local HashScratch sc;
  auto bucket_of = [&](uint64_t h) { return LastAtOrBelow(bucket_begin, num_buckets, h); };
  // Keys in strictly increasing order (a caller that sorted and deduplicated them, as
  // ps-lite requires of its callers) are all unique, in first-occurrence order: no hash
  // table, only the buckets. The same result as below, bit for bit (a row is copied,
  // never summed).
  bool increasing = true;
  for (size_t i = 1; i < n && increasing; ++i) increasing = keys[i - 1] < keys[i];
  if (increasing) {
    BucketWithInverse(keys, with_rows ? rows : nullptr, n, with_rows ? dim : 0, bucket_begin,
                      num_buckets, out_keys, with_rows ? out_rows : nullptr, inverse, offsets);
    return n;
  }
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;  // load factor <= 1/2
  const size_t mask = cap - 1;
  // The low bits of the hash also pick the bucket: the home slot uses others.
  auto home = [mask](uint64_t h) { return static_cast<size_t>(h >> 7) & mask; };
  sc.slots.assign(cap, kEmptySlot);
  uint64_t* slots = sc.slots.data();
  // With one bucket every unique key's place is its index: keys go straight to out_keys.
  const bool one_bucket = num_buckets == 1;
  sc.uniq.resize(one_bucket ? 0 : n);
  Key* uniq = one_bucket ? out_keys : sc.uniq.data();
  if (!one_bucket) sc.bucket.resize(n);
  uint32_t* bucket = sc.bucket.data();
  uint32_t* which = inverse;
  if (which == nullptr) {
    sc.which.resize(n);
    which = sc.which.data();
  }
  // Pass 1: every key's unique index; a new key's bucket is found once.
  uint32_t m32 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kHashPrefetch < n) __builtin_prefetch(slots + home(MixKey(keys[i + kHashPrefetch])));
    const Key k = keys[i];
    const uint64_t h = MixKey(k);
    const uint64_t tag = h >> 32;
    size_t j = home(h);
    for (;;) {
      const uint64_t s = slots[j];
      if (s == kEmptySlot) {
        const uint32_t u = m32++;
        slots[j] = (tag << 32) | u;
        uniq[u] = k;
        if (!one_bucket) {
          const size_t b = bucket_of(h);
          bucket[u] = static_cast<uint32_t>(b);
          ++offsets[b + 1];
        }
        which[i] = u;
        break;
      }
      if ((s >> 32) == tag && uniq[static_cast<uint32_t>(s)] == k) {
        which[i] = static_cast<uint32_t>(s);
        break;
      }
      j = (j + 1) & mask;
    }
  }
  const size_t m = m32;
  // Destinations. One bucket: out_keys holds the unique keys in place, and a unique key's
  // place is its index (which[i] is already the place of key i). Several: a stable
  // counting sort of the unique keys by bucket.
  const uint32_t* dest = nullptr;
  if (one_bucket) {
    offsets[1] = m;
    if (!with_rows) {  // nothing left to place
      if (n > kKeepScratchKeys) sc.Trim();
      return m;
    }
  } else {
    for (size_t b = 0; b < num_buckets; ++b) offsets[b + 1] += offsets[b];
    sc.cursor.assign(offsets, offsets + num_buckets);
    sc.dest.resize(m);
    for (size_t u = 0; u < m; ++u) {
      const size_t d = sc.cursor[bucket[u]]++;
      sc.dest[u] = static_cast<uint32_t>(d);
      out_keys[d] = uniq[u];
    }
    dest = sc.dest.data();
  }
  // Pass 2: rows summed in input order. Unique indices were handed out in order of first
  // occurrence, so a key is new exactly when its index is the next one not seen yet.
  uint32_t next_new = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = which[i];
    const uint32_t d = dest != nullptr ? dest[u] : u;
    if (with_rows) {
      float* dst = out_rows + size_t{d} * dim;
      const float* src = rows + i * dim;
      if (u == next_new) {
        std::memcpy(dst, src, dim * sizeof(float));
      } else {
        for (uint32_t c = 0; c < dim; ++c) dst[c] += src[c];
      }
    }
    if (u == next_new) ++next_new;
    if (inverse != nullptr) inverse[i] = d;
  }
  if (n > kKeepScratchKeys) sc.Trim();
  return m;
}

void BucketWithInverse(const Key* keys, const float* rows, size_t n, uint32_t dim,
                       const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                       float* out_rows, uint32_t* inverse, size_t* offsets) {
  std::fill(offsets, offsets + num_buckets + 1, size_t{0});
  if (n == 0) return;
  const bool with_rows = rows != nullptr && out_rows != nullptr && dim > 0;
  if (num_buckets == 1) {  // every key in place
    offsets[1] = n;
    std::memcpy(out_keys, keys, n * sizeof(Key));
    if (with_rows) std::memcpy(out_rows, rows, n * size_t{dim} * sizeof(float));
    if (inverse != nullptr) {
      for (size_t i = 0; i < n; ++i) inverse[i] = static_cast<uint32_t>(i);
    }
    return;
  }
  thread_local std::vector<uint32_t> bucket;
  bucket.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = LastAtOrBelow(bucket_begin, num_buckets, MixKey(keys[i]));
    bucket[i] = static_cast<uint32_t>(b);
    ++offsets[b + 1];
  }
  for (size_t b = 0; b < num_buckets; ++b) offsets[b + 1] += offsets[b];
  std::vector<size_t> cursor(offsets, offsets + num_buckets);
  for (size_t i = 0; i < n; ++i) {
    const size_t d = cursor[bucket[i]]++;
    out_keys[d] = keys[i];
    if (with_rows) std::memcpy(out_rows + d * dim, rows + i * dim, dim * sizeof(float));
    if (inverse != nullptr) inverse[i] = static_cast<uint32_t>(d);
  }
  if (n > kKeepScratchKeys) std::vector<uint32_t>().swap(bucket);
}

void ScatterRows(const uint32_t* inverse, size_t n, const float* uniq_rows, uint32_t dim,
                 float* out) {
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim, uniq_rows + size_t{inverse[i]} * dim, dim * sizeof(float));
  }
}

// ---- Dense fusion ---------------------------------------------------------------------------

size_t FuseOffsets(const size_t* lens, size_t count, size_t* offsets) {
  offsets[0] = 0;
  for (size_t i = 0; i < count; ++i) offsets[i + 1] = offsets[i] + lens[i];
  return offsets[count];
}

void Fuse(const float* const* srcs, const size_t* lens, size_t count, WireType type, void* out) {
  const size_t bytes = WireBytes(type);
  char* o = static_cast<char*>(out);
  for (size_t i = 0; i < count; ++i) {
    ToWire(srcs[i], lens[i], type, o);
    o += lens[i] * bytes;
  }
}

void Unfuse(const void* in, WireType type, float* const* dsts, const size_t* lens, size_t count) {
  const size_t bytes = WireBytes(type);
  const char* p = static_cast<const char*>(in);
  for (size_t i = 0; i < count; ++i) {
    FromWire(p, lens[i], type, dsts[i]);
    p += lens[i] * bytes;
  }
}

}  // namespace pack
}  // namespace ps
