// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Packing of gradients into wire-ready buffers: the CPU reference. src/cuda/ has GPU
// kernels with the same contracts (src/cuda/packing_cuda.h); these functions are what the
// worker uses for host data and what the GPU results are checked against.
//
// All functions take raw pointers; outputs are caller-allocated with the capacities
// stated. None throws. Coalesce, UniqueKeys, CoalesceAndBucket and Bucket allocate
// temporary buffers (O(n)); the others allocate nothing.
//
// Limits: n < 2^32 (positions are stored as uint32_t).
//
// Thread-safety: every function is pure with respect to its arguments; concurrent calls
// on distinct outputs are safe.
#ifndef PS_WORKER_PACKING_H_
#define PS_WORKER_PACKING_H_

#include <cstddef>
#include <cstdint>

#include "common/wire_type.h"
#include "ps/types.h"

namespace ps {
namespace pack {

// Sparse coalescing: sorts (keys[n], rows[n x dim]) by key and sums the rows of equal
// keys. Writes the m unique keys in ascending order to out_keys[0..m) and their summed
// rows to out_rows[0..m*dim); returns m. Capacities: out_keys n, out_rows n*dim.
// If inverse is not null, inverse[i] receives the position in out_keys of keys[i]
// (capacity n): what ScatterRows needs to undo the coalescing on pull.
// Sums are accumulated in the order the duplicates appear in the input.
size_t Coalesce(const Key* keys, const float* rows, size_t n, uint32_t dim, Key* out_keys,
                float* out_rows, uint32_t* inverse);

// Unique sorted keys without rows (for pulls): same as Coalesce with dim 0.
size_t UniqueKeys(const Key* keys, size_t n, Key* out_keys, uint32_t* inverse);

// Bucketing by server: splits (keys[n], rows[n x dim]) into num_buckets contiguous
// segments, where key k goes to the bucket b with
//   bucket_begin[b] <= MixKey(k) < bucket_begin[b+1]   (bucket_begin[num_buckets] = 2^64)
// bucket_begin must be ascending with bucket_begin[0] == 0. Keeps the input order inside
// each bucket. Writes offsets[0..num_buckets] (offsets[b]..offsets[b+1] is bucket b).
// rows/out_rows may be null (keys only). Capacities: out_keys n, out_rows n*dim.
void Bucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
            const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys, float* out_rows,
            size_t* offsets);

// The bucket of one key under the same rule as Bucket.
size_t BucketOf(Key key, const uint64_t* bucket_begin, size_t num_buckets);

// The index of the last of begins[0..n) that is <= v (begins ascending, begins[0] <= v):
// a key's bucket (v its MixKey), or the part that holds a unique key. For n <= 16 the
// begins at or below v are counted without a branch (for random values a scan's exit
// branch is mispredicted about once a value); beyond, a binary search.
inline size_t LastAtOrBelow(const uint64_t* begins, size_t n, uint64_t v) {
  if (n <= 16) {
    size_t k = 0;
    for (size_t j = 1; j < n; ++j) k += static_cast<size_t>(v >= begins[j]);
    return k;
  }
  size_t lo = 0, hi = n;  // begins[lo] <= v < begins[hi] (begins[n] as infinity)
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (begins[mid] <= v) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Coalesce followed by Bucket, in one call and without the intermediate copy: the m
// unique keys are split into num_buckets segments (rule of Bucket), each segment sorted
// by key, with the summed rows beside them. Writes offsets[0..num_buckets]
// (offsets[num_buckets] == m) and returns m. If inverse is not null, inverse[i] receives
// the position in out_keys of keys[i], so ScatterRows undoes the whole packing on pull.
// rows/out_rows may be null or dim 0 (keys only). Capacities: out_keys n, out_rows n*dim,
// inverse n. Sums are accumulated in input order, as in Coalesce: the result equals
// Coalesce then Bucket bit for bit.
size_t CoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                         const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                         float* out_rows, uint32_t* inverse, size_t* offsets);

// CoalesceAndBucket's contract, except that inside each bucket the unique keys are in the
// order of their first occurrence in the input instead of ascending: a hash table instead
// of a sort (bench/PROPOSALS.md P3). The number of unique keys, the offsets, the set of
// keys in each bucket, every key's summed row (bit for bit: the same summation order) and
// the inverse agree with CoalesceAndBucket's up to that order. The worker's host path
// packs with it; CoalesceAndBucket stays the CPU reference of the CUDA kernels.
size_t HashCoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                             const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                             float* out_rows, uint32_t* inverse, size_t* offsets);

// Bucketing without coalescing, for keys taken as they are (distinct or not): splits
// keys[n] (and rows[n x dim], if given) into num_buckets segments by Bucket's rule,
// keeping the input order inside each bucket, and writes inverse[i], the place of key i
// in out_keys. Writes offsets[0..num_buckets]. rows/out_rows may be null (keys only);
// inverse may be null. Capacities: out_keys n, out_rows n*dim, inverse n.
void BucketWithInverse(const Key* keys, const float* rows, size_t n, uint32_t dim,
                       const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                       float* out_rows, uint32_t* inverse, size_t* offsets);

// Pull-side scatter: out[i*dim..] = uniq_rows[inverse[i]*dim..] for i < n. Repeated keys
// each get their row, in the original order.
void ScatterRows(const uint32_t* inverse, size_t n, const float* uniq_rows, uint32_t dim,
                 float* out);

// ---- Dense fusion -----------------------------------------------------------------------

// Layout of a fused buffer: tensor i occupies elements [offsets[i], offsets[i+1]) where
// offsets[0] = 0 and offsets[i+1] = offsets[i] + lens[i] (tightly packed, in order).
// Writes offsets[0..count] and returns the total element count.
size_t FuseOffsets(const size_t* lens, size_t count, size_t* offsets);

// Dense fusion: packs count tensors (srcs[i] with lens[i] floats) into one buffer of
// FuseOffsets(...) elements of the given wire type. A tensor with lens[i] == 0 may have
// a null pointer.
void Fuse(const float* const* srcs, const size_t* lens, size_t count, WireType type, void* out);

// The reverse on pull: unpacks a fused buffer of the given wire type into dsts[i]
// (lens[i] floats each).
void Unfuse(const void* in, WireType type, float* const* dsts, const size_t* lens, size_t count);

}  // namespace pack
}  // namespace ps

#endif  // PS_WORKER_PACKING_H_
