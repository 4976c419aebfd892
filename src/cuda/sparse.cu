// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Sparse packing on the GPU: coalescing (sort by key + segmented sum), bucketing by
// server, and both fused. See packing_cuda.h for the contracts.
//
// Coalescing, step by step (all on the caller's stream):
//   1. stable radix sort of (key, input position)                    cub, key_bits bits
//   2. seg[p] = 1-based run number of sorted position p               flags + cub scan
//   3. (bucketing) bucket of every unique key; stable radix sort of the unique indices by
//      bucket gives each unique key its output slot dest[u] and the bucket offsets
//   4. out_keys[dest[u]] and inverse[input position] = dest[u]
//   5. row sums: the sorted positions are cut into tiles of kTile rows; one thread per
//      (tile, column) sums the rows of each run in input order. A run that fits in a tile
//      is written out directly; a run crossing tiles leaves partial sums (its "tail" in
//      the tile where it starts, "heads" in the following tiles), which one warp per
//      starting tile then adds in a fixed order. No atomics: the result is deterministic.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "cuda/cuda_util.cuh"
#include "cuda/mix_key.h"

namespace ps {
namespace pack {
namespace gpu {

using detail::AsStream;
using detail::Blocks;
using detail::Carver;
using detail::kThreads;

// ---- Errors, device, workspace --------------------------------------------------------------

const char* ErrorString(Error error) {
  if (error == kOk) return "ok";
  if (error == kInvalidArgument) return "invalid argument";
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

bool DeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the non-sticky error
    return false;
  }
  return count > 0;
}

Workspace::~Workspace() {
  if (data_ == nullptr) return;
  if (cudaFreeAsync(data_, AsStream(stream_)) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(data_);
  }
}

Error Workspace::Reserve(size_t bytes, void* stream) {
  if (bytes <= capacity_ && data_ != nullptr) {
    stream_ = stream;
    return kOk;
  }
  if (bytes == 0) bytes = 1;
  // Round up so that slowly growing requests do not reallocate every call.
  bytes = std::max(bytes, capacity_ + capacity_ / 2);
  if (data_ != nullptr) {
    PS_CUDA_TRY(cudaFreeAsync(data_, AsStream(stream_)));
    data_ = nullptr;
    capacity_ = 0;
  }
  PS_CUDA_TRY(cudaMallocAsync(&data_, bytes, AsStream(stream)));
  capacity_ = bytes;
  stream_ = stream;
  return kOk;
}

namespace {

constexpr uint32_t kTile = 32;  // rows per tile of the segmented sum

// Number of bits needed to represent v (at least 1).
int BitWidth(uint64_t v) {
  int bits = 1;
  while (bits < 64 && (v >> bits) != 0) ++bits;
  return bits;
}

// The bucket of key: the last b with begin[b] <= MixKey(key) (upper bound - 1).
__device__ __forceinline__ uint32_t BucketOfDevice(Key key, const uint64_t* begin,
                                                   uint32_t num_buckets) {
  const uint64_t h = MixKeyHD(key);
  uint32_t lo = 0, hi = num_buckets;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (begin[mid] <= h) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo == 0 ? 0 : lo - 1;  // lo == 0 only if begin[0] != 0 (contract violation)
}

// First index in sorted[0..n) whose value is >= v.
__device__ __forceinline__ size_t LowerBound(const uint32_t* sorted, size_t n, uint32_t v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (sorted[mid] < v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

__device__ __forceinline__ bool RunStart(const uint32_t* seg, size_t p) {
  return p == 0 || seg[p] != seg[p - 1];
}

__global__ void IotaKernel(uint32_t* out, size_t n) {
  PS_GRID_LOOP(i, n) { out[i] = static_cast<uint32_t>(i); }
}

__global__ void RunFlagKernel(const Key* sorted_keys, size_t n, uint32_t* seg) {
  PS_GRID_LOOP(p, n) { seg[p] = (p == 0 || sorted_keys[p] != sorted_keys[p - 1]) ? 1u : 0u; }
}

// m = number of runs. Also fills the user's count and, without bucketing, offsets {0, m}.
__global__ void CountKernel(const uint32_t* seg, size_t n, size_t* m, size_t* user_count,
                            size_t* offsets01) {
  const size_t count = seg[n - 1];
  *m = count;
  if (user_count) *user_count = count;
  if (offsets01) {
    offsets01[0] = 0;
    offsets01[1] = count;
  }
}

// For every unique key u: its bucket; slots past m get the sentinel num_buckets so that
// they sort last. Also writes the identity permutation into iota.
__global__ void UniqueBucketKernel(const Key* sorted_keys, const uint32_t* seg, size_t n,
                                   const size_t* m, const uint64_t* begin, uint32_t num_buckets,
                                   uint32_t* bucket, uint32_t* iota) {
  const size_t count = *m;
  PS_GRID_LOOP(i, n) {
    if (RunStart(seg, i)) {
      bucket[seg[i] - 1] = BucketOfDevice(sorted_keys[i], begin, num_buckets);
    }
    if (i >= count) bucket[i] = num_buckets;
    iota[i] = static_cast<uint32_t>(i);
  }
}

// dest[u] = output slot of unique key u; offsets[b] = first slot of bucket b.
__global__ void DestKernel(const uint32_t* sorted_unique, const uint32_t* sorted_bucket, size_t n,
                           const size_t* m, uint32_t num_buckets, uint32_t* dest, size_t* offsets) {
  const size_t count = *m;
  const size_t work = n > num_buckets ? n : size_t{num_buckets} + 1;
  PS_GRID_LOOP(i, work) {
    if (i < count) dest[sorted_unique[i]] = static_cast<uint32_t>(i);
    if (i <= num_buckets) offsets[i] = LowerBound(sorted_bucket, n, static_cast<uint32_t>(i));
  }
}

// Unique keys to their slots, and the inverse map of every input position.
__global__ void KeysKernel(const Key* sorted_keys, const uint32_t* seg, const uint32_t* perm,
                           size_t n, const uint32_t* dest, Key* out_keys, uint32_t* inverse) {
  PS_GRID_LOOP(p, n) {
    const uint32_t u = seg[p] - 1;
    const uint32_t d = dest ? dest[u] : u;
    if (RunStart(seg, p)) out_keys[d] = sorted_keys[p];
    if (inverse) inverse[perm[p]] = d;
  }
}

// One thread per (tile, column): sums the rows of each run inside the tile, in input
// order. Starting from -0.0f makes a single row come out bit-identical (x + -0 == x).
__global__ void TileSumKernel(const uint32_t* seg, const uint32_t* perm, const float* rows,
                              uint32_t dim, size_t n, const uint32_t* dest, float* out_rows,
                              float* head, float* tail) {
  const size_t num_tiles = (n + kTile - 1) / kTile;
  PS_GRID_LOOP(t, num_tiles * dim) {
    const size_t k = t / dim;
    const uint32_t j = static_cast<uint32_t>(t - k * dim);
    const size_t a = k * kTile;
    const size_t b = a + kTile < n ? a + kTile : n;
    uint32_t cur = seg[a];
    bool is_head = a > 0 && seg[a - 1] == cur;  // the run started in an earlier tile
    float acc = -0.0f;
    for (size_t p = a; p < b; ++p) {
      const uint32_t s = seg[p];
      if (s != cur) {  // the run `cur` ends inside this tile
        if (is_head) {
          head[k * dim + j] = acc;
        } else {
          out_rows[size_t{dest ? dest[cur - 1] : cur - 1} * dim + j] = acc;
        }
        cur = s;
        is_head = false;
        acc = -0.0f;
      }
      acc += rows[size_t{perm[p]} * dim + j];
    }
    const bool continues = b < n && seg[b] == cur;
    if (is_head) {
      head[k * dim + j] = acc;
    } else if (continues) {
      tail[k * dim + j] = acc;
    } else {
      out_rows[size_t{dest ? dest[cur - 1] : cur - 1} * dim + j] = acc;
    }
  }
}

// One warp per tile whose last run starts in it and continues past it: adds the tail of
// that tile and the heads of the following tiles of the run, in a fixed order.
__global__ void FixupKernel(const uint32_t* seg, uint32_t dim, size_t n, const uint32_t* dest,
                            const float* head, const float* tail, float* out_rows) {
  const size_t num_tiles = (n + kTile - 1) / kTile;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps_total = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t k = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32; k < num_tiles;
       k += warps_total) {
    const size_t a = k * kTile;
    const size_t b = a + kTile < n ? a + kTile : n;
    const uint32_t run = seg[b - 1];
    if (!(b < n && seg[b] == run)) continue;   // the last run ends in this tile
    if (a > 0 && seg[a - 1] == run) continue;  // ... or started before it: not the owner
    // End of the run: first position past b whose run number is larger.
    size_t lo = b, hi = n;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (seg[mid] <= run) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const size_t last_tile = (lo - 1) / kTile;
    const size_t parts = last_tile - k + 1;  // tail of k, then heads of k+1..last_tile
    const size_t out = size_t{dest ? dest[run - 1] : run - 1} * dim;
    // Lanes: C columns at a time, R lanes per column splitting the parts.
    const unsigned cols = dim < 32 ? dim : 32;
    const unsigned reps = 32 / cols;
    const unsigned c = lane % cols, r = lane / cols;
    for (uint32_t j0 = 0; j0 < dim; j0 += cols) {
      const uint32_t j = j0 + c;
      float acc = -0.0f;
      if (r < reps && j < dim) {
        for (size_t q = r; q < parts; q += reps) {
          acc += q == 0 ? tail[k * dim + j] : head[(k + q) * dim + j];
        }
      }
      for (unsigned off = cols; off < 32; off *= 2) {
        const float v = __shfl_down_sync(0xFFFFFFFFu, acc, off);
        if (lane + off < 32) acc += v;
      }
      if (r == 0 && j < dim) out_rows[out + j] = acc;
    }
  }
}

// Per-key bucket and identity permutation, for Bucket.
__global__ void KeyBucketKernel(const Key* keys, size_t n, const uint64_t* begin,
                                uint32_t num_buckets, uint32_t* bucket, uint32_t* iota) {
  PS_GRID_LOOP(i, n) {
    bucket[i] = BucketOfDevice(keys[i], begin, num_buckets);
    iota[i] = static_cast<uint32_t>(i);
  }
}

__global__ void GatherKeysKernel(const Key* keys, const uint32_t* perm, size_t n, Key* out_keys) {
  PS_GRID_LOOP(p, n) { out_keys[p] = keys[perm[p]]; }
}

// out_rows[p] = rows[perm[p]]: `lanes` threads per row (a power of two <= 32).
__global__ void GatherRowsKernel(const float* rows, const uint32_t* perm, size_t n, uint32_t dim,
                                 unsigned lanes, float* out_rows) {
  const size_t rows_per_grid = static_cast<size_t>(gridDim.x) * blockDim.x / lanes;
  const unsigned c = threadIdx.x % lanes;
  for (size_t p = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / lanes; p < n;
       p += rows_per_grid) {
    const float* src = rows + size_t{perm[p]} * dim;
    float* dst = out_rows + p * dim;
    for (uint32_t j = c; j < dim; j += lanes) dst[j] = src[j];
  }
}

__global__ void OffsetsKernel(const uint32_t* sorted_bucket, size_t n, uint32_t num_buckets,
                              size_t* offsets) {
  PS_GRID_LOOP(b, size_t{num_buckets} + 1) {
    offsets[b] = LowerBound(sorted_bucket, n, static_cast<uint32_t>(b));
  }
}

unsigned LanesPerRow(uint32_t dim) {
  unsigned lanes = 1;
  while (lanes < 32 && lanes < dim) lanes *= 2;
  return lanes;
}

// The scratch arrays of one coalescing call.
struct CoalescePlan {
  Key* sorted_keys;
  uint32_t* iota;  // input positions, then (bucketing) unique indices
  uint32_t* perm;  // sorted position -> input position
  uint32_t* seg;   // sorted position -> 1-based run number
  size_t* m;
  uint32_t* bucket;         // per unique key (bucketing)
  uint32_t* sorted_bucket;  // (bucketing)
  uint32_t* sorted_unique;  // (bucketing)
  uint32_t* dest;           // unique index -> output slot (bucketing)
  float* head;              // per (tile, column) partial sums
  float* tail;
  void* temp;
  size_t temp_bytes;
};

size_t Carve(Carver& c, CoalescePlan* p, size_t n, uint32_t dim, bool bucketing, bool sums,
             size_t temp_bytes) {
  p->sorted_keys = c.Take<Key>(n);
  p->iota = c.Take<uint32_t>(n);
  p->perm = c.Take<uint32_t>(n);
  p->seg = c.Take<uint32_t>(n);
  p->m = c.Take<size_t>(1);
  const size_t nb = bucketing ? n : 0;
  p->bucket = c.Take<uint32_t>(nb);
  p->sorted_bucket = c.Take<uint32_t>(nb);
  p->sorted_unique = c.Take<uint32_t>(nb);
  p->dest = c.Take<uint32_t>(nb);
  const size_t partials = sums ? (n + kTile - 1) / kTile * dim : 0;
  p->head = c.Take<float>(partials);
  p->tail = c.Take<float>(partials);
  p->temp = c.Take<char>(temp_bytes);
  p->temp_bytes = temp_bytes;
  return c.size();
}

// The shared implementation of Coalesce, UniqueKeys and CoalesceAndBucket.
// bucket_begin == nullptr: no bucketing. offsets may be null only without bucketing.
Error CoalesceImpl(const Key* keys, const float* rows, size_t n, uint32_t dim,
                   const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys, float* out_rows,
                   uint32_t* inverse, size_t* num_unique, size_t* offsets, Workspace* ws,
                   void* stream_ptr, int key_bits) {
  const bool bucketing = bucket_begin != nullptr;
  const bool sums = rows != nullptr && out_rows != nullptr && dim > 0;
  if (ws == nullptr || key_bits < 1 || key_bits > 64 || n >= (size_t{1} << 32)) {
    return kInvalidArgument;
  }
  if (n > 0 && (keys == nullptr || out_keys == nullptr)) return kInvalidArgument;
  if (bucketing && (num_buckets == 0 || num_buckets >= (size_t{1} << 31) || offsets == nullptr)) {
    return kInvalidArgument;
  }
  cudaStream_t stream = AsStream(stream_ptr);
  if (n == 0) {
    if (num_unique) PS_CUDA_TRY(cudaMemsetAsync(num_unique, 0, sizeof(size_t), stream));
    if (bucketing) {
      PS_CUDA_TRY(cudaMemsetAsync(offsets, 0, (num_buckets + 1) * sizeof(size_t), stream));
    }
    return kOk;
  }
  const bool sort_buckets = bucketing && num_buckets > 1;
  const uint32_t nb = static_cast<uint32_t>(num_buckets);
  const uint32_t n32 = static_cast<uint32_t>(n);

  // Temporary storage of the cub calls (sizes only: nothing runs).
  size_t temp_sort = 0, temp_scan = 0, temp_bucket_sort = 0;
  PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_sort, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n32, 0, key_bits,
      stream));
  PS_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, temp_scan, static_cast<uint32_t*>(nullptr),
                                            static_cast<uint32_t*>(nullptr), n32, stream));
  const int bucket_bits = BitWidth(num_buckets);  // values 0..num_buckets (sentinel)
  if (sort_buckets) {
    PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bucket_sort, static_cast<const uint32_t*>(nullptr),
        static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
        static_cast<uint32_t*>(nullptr), n32, 0, bucket_bits, stream));
  }
  const size_t temp_bytes = std::max({temp_sort, temp_scan, temp_bucket_sort});

  CoalescePlan plan;
  Carver measure(nullptr);
  const size_t total = Carve(measure, &plan, n, dim, sort_buckets, sums, temp_bytes);
  if (const Error e = ws->Reserve(total, stream_ptr); e != kOk) return e;
  Carver carver(ws->data());
  Carve(carver, &plan, n, dim, sort_buckets, sums, temp_bytes);

  // 1. Stable sort of (key, position).
  IotaKernel<<<Blocks(n), kThreads, 0, stream>>>(plan.iota, n);
  PS_CUDA_TRY_LAUNCH();
  size_t bytes = plan.temp_bytes;
  PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(plan.temp, bytes, keys, plan.sorted_keys, plan.iota,
                                              plan.perm, n32, 0, key_bits, stream));
  // 2. Run numbers.
  RunFlagKernel<<<Blocks(n), kThreads, 0, stream>>>(plan.sorted_keys, n, plan.seg);
  PS_CUDA_TRY_LAUNCH();
  bytes = plan.temp_bytes;
  PS_CUDA_TRY(cub::DeviceScan::InclusiveSum(plan.temp, bytes, plan.seg, plan.seg, n32, stream));
  CountKernel<<<1, 1, 0, stream>>>(plan.seg, n, plan.m, num_unique,
                                   bucketing && !sort_buckets ? offsets : nullptr);
  PS_CUDA_TRY_LAUNCH();
  // 3. Output slots by bucket.
  const uint32_t* dest = nullptr;
  if (sort_buckets) {
    UniqueBucketKernel<<<Blocks(n), kThreads, 0, stream>>>(
        plan.sorted_keys, plan.seg, n, plan.m, bucket_begin, nb, plan.bucket, plan.iota);
    PS_CUDA_TRY_LAUNCH();
    bytes = plan.temp_bytes;
    PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(plan.temp, bytes, plan.bucket, plan.sorted_bucket,
                                                plan.iota, plan.sorted_unique, n32, 0, bucket_bits,
                                                stream));
    DestKernel<<<Blocks(std::max<size_t>(n, num_buckets + 1)), kThreads, 0, stream>>>(
        plan.sorted_unique, plan.sorted_bucket, n, plan.m, nb, plan.dest, offsets);
    PS_CUDA_TRY_LAUNCH();
    dest = plan.dest;
  }
  // 4. Keys and inverse.
  KeysKernel<<<Blocks(n), kThreads, 0, stream>>>(plan.sorted_keys, plan.seg, plan.perm, n, dest,
                                                 out_keys, inverse);
  PS_CUDA_TRY_LAUNCH();
  // 5. Row sums.
  if (sums) {
    const size_t num_tiles = (n + kTile - 1) / kTile;
    TileSumKernel<<<Blocks(num_tiles * dim), kThreads, 0, stream>>>(
        plan.seg, plan.perm, rows, dim, n, dest, out_rows, plan.head, plan.tail);
    PS_CUDA_TRY_LAUNCH();
    FixupKernel<<<Blocks(num_tiles * 32), kThreads, 0, stream>>>(plan.seg, dim, n, dest, plan.head,
                                                                 plan.tail, out_rows);
    PS_CUDA_TRY_LAUNCH();
  }
  return kOk;
}

}  // namespace

Error Coalesce(const Key* keys, const float* rows, size_t n, uint32_t dim, Key* out_keys,
               float* out_rows, uint32_t* inverse, size_t* num_unique, Workspace* ws, void* stream,
               int key_bits) {
  if (dim > 0 && n > 0 && (rows == nullptr || out_rows == nullptr)) return kInvalidArgument;
  return CoalesceImpl(keys, rows, n, dim, nullptr, 0, out_keys, out_rows, inverse, num_unique,
                      nullptr, ws, stream, key_bits);
}

Error UniqueKeys(const Key* keys, size_t n, Key* out_keys, uint32_t* inverse, size_t* num_unique,
                 Workspace* ws, void* stream, int key_bits) {
  return CoalesceImpl(keys, nullptr, n, 0, nullptr, 0, out_keys, nullptr, inverse, num_unique,
                      nullptr, ws, stream, key_bits);
}

Error CoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                        const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                        float* out_rows, uint32_t* inverse, size_t* offsets, Workspace* ws,
                        void* stream, int key_bits) {
  if (bucket_begin == nullptr) return kInvalidArgument;
  return CoalesceImpl(keys, rows, n, dim, bucket_begin, num_buckets, out_keys, out_rows, inverse,
                      nullptr, offsets, ws, stream, key_bits);
}

Error Bucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
             const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys, float* out_rows,
             size_t* offsets, Workspace* ws, void* stream_ptr) {
  if (ws == nullptr || bucket_begin == nullptr || offsets == nullptr || num_buckets == 0 ||
      num_buckets >= (size_t{1} << 31) || n >= (size_t{1} << 32)) {
    return kInvalidArgument;
  }
  if (n > 0 && (keys == nullptr || out_keys == nullptr)) return kInvalidArgument;
  cudaStream_t stream = AsStream(stream_ptr);
  if (n == 0) {
    PS_CUDA_TRY(cudaMemsetAsync(offsets, 0, (num_buckets + 1) * sizeof(size_t), stream));
    return kOk;
  }
  const bool with_rows = rows != nullptr && out_rows != nullptr && dim > 0;
  const uint32_t n32 = static_cast<uint32_t>(n);
  const int bits = BitWidth(num_buckets - 1);
  size_t temp_bytes = 0;
  PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n32, 0, bits,
      stream));
  auto carve = [&](Carver& c, uint32_t** bucket, uint32_t** sorted_bucket, uint32_t** iota,
                   uint32_t** perm, void** temp) {
    *bucket = c.Take<uint32_t>(n);
    *sorted_bucket = c.Take<uint32_t>(n);
    *iota = c.Take<uint32_t>(n);
    *perm = c.Take<uint32_t>(n);
    *temp = c.Take<char>(temp_bytes);
    return c.size();
  };
  uint32_t *bucket, *sorted_bucket, *iota, *perm;
  void* temp;
  Carver measure(nullptr);
  const size_t total = carve(measure, &bucket, &sorted_bucket, &iota, &perm, &temp);
  if (const Error e = ws->Reserve(total, stream_ptr); e != kOk) return e;
  Carver carver(ws->data());
  carve(carver, &bucket, &sorted_bucket, &iota, &perm, &temp);

  KeyBucketKernel<<<Blocks(n), kThreads, 0, stream>>>(
      keys, n, bucket_begin, static_cast<uint32_t>(num_buckets), bucket, iota);
  PS_CUDA_TRY_LAUNCH();
  size_t bytes = temp_bytes;
  PS_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, bytes, bucket, sorted_bucket, iota, perm, n32,
                                              0, bits, stream));
  GatherKeysKernel<<<Blocks(n), kThreads, 0, stream>>>(keys, perm, n, out_keys);
  PS_CUDA_TRY_LAUNCH();
  if (with_rows) {
    const unsigned lanes = LanesPerRow(dim);
    GatherRowsKernel<<<Blocks(n * lanes), kThreads, 0, stream>>>(rows, perm, n, dim, lanes,
                                                                 out_rows);
    PS_CUDA_TRY_LAUNCH();
  }
  OffsetsKernel<<<Blocks(num_buckets + 1), kThreads, 0, stream>>>(
      sorted_bucket, n, static_cast<uint32_t>(num_buckets), offsets);
  PS_CUDA_TRY_LAUNCH();
  return kOk;
}

Error ScatterRows(const uint32_t* inverse, size_t n, const float* uniq_rows, uint32_t dim,
                  float* out, void* stream) {
  if (n >= (size_t{1} << 32)) return kInvalidArgument;
  if (n == 0 || dim == 0) return kOk;
  if (inverse == nullptr || uniq_rows == nullptr || out == nullptr) return kInvalidArgument;
  const unsigned lanes = LanesPerRow(dim);
  GatherRowsKernel<<<Blocks(n * lanes), kThreads, 0, AsStream(stream)>>>(uniq_rows, inverse, n, dim,
                                                                         lanes, out);
  PS_CUDA_TRY_LAUNCH();
  return kOk;
}

}  // namespace gpu
}  // namespace pack
}  // namespace ps
