// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// GPU packing kernels: the CUDA counterparts of the CPU reference in worker/packing.h,
// with the same contracts unless stated here. This header has no CUDA types, so code
// compiled by a plain C++ compiler can include it; link layerps::cuda.
//
// Common rules for every function below:
// - Arrays (keys, rows, outputs, inverse, offsets, bucket_begin, counts) are
//   device-accessible pointers: device memory, managed memory, or mapped pinned host
//   memory. Exceptions are named (host arrays of pointers and lengths for fusion).
// - `stream` is a cudaStream_t passed as void*; nullptr is the default stream. Work is
//   enqueued on it and the call returns without waiting: no cudaDeviceSynchronize, no
//   stream synchronization, no cudaMalloc/cudaFree (scratch memory comes from a caller's
//   Workspace, grown with stream-ordered allocation). Results are ready when the stream
//   reaches that point; inputs must stay alive and unchanged until then.
// - Counts that depend on the data (number of unique keys, bucket offsets) are written
//   to device memory; copy them with CopyAsync and synchronize when the host needs them.
// - Return value: kOk, kInvalidArgument for a bad argument (nothing enqueued), or a CUDA
//   error code (a cudaError_t value) from a failed launch or allocation.
// - Sums of duplicate rows are computed in a fixed order that depends only on the input
//   (the same bits on every run and every device of the same architecture); runs of
//   duplicates shorter than a tile (32 rows) are summed in input order, exactly as the
//   CPU reference does, longer runs as tile partial sums: equal to the CPU reference
//   within float rounding. Keys, offsets, inverse, conversions and copies are
//   bit-identical to the CPU reference.
// - Limits: n < 2^32; bucket counts < 2^31.
//
// Thread-safety: functions are reentrant. A Workspace must not be used by two calls in
// flight on different streams at once (one Workspace per stream).
#ifndef PS_CUDA_PACKING_CUDA_H_
#define PS_CUDA_PACKING_CUDA_H_

#include <cstddef>
#include <cstdint>

#include "common/wire_type.h"
#include "ps/types.h"

namespace ps {
namespace pack {
namespace gpu {

// 0 or a cudaError_t value; kInvalidArgument is outside the CUDA range.
using Error = int;
constexpr Error kOk = 0;
constexpr Error kInvalidArgument = -1;

// A readable message for an Error.
const char* ErrorString(Error error);

// True when at least one CUDA device is usable by this process. Never throws or aborts;
// on a machine without a driver or a GPU it returns false.
bool DeviceAvailable();

// Scratch device memory reused across calls. Grows (never shrinks) with
// cudaMallocAsync/cudaFreeAsync on the stream of the call that needs more, so growing
// does not synchronize the device. Destroy it before its stream; the destructor
// releases the memory on that stream and never throws.
class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Makes at least `bytes` available, stream-ordered on `stream`.
  Error Reserve(size_t bytes, void* stream);
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
  void* stream_ = nullptr;
};

// ---- Sparse ---------------------------------------------------------------------------

// Coalesce (see pack::Coalesce): unique sorted keys, summed rows, optional inverse.
// *num_unique (device memory, may be null) receives m. key_bits: the keys are known to
// be < 2^key_bits (1..64); fewer bits make the sort cheaper, 64 is always correct.
Error Coalesce(const Key* keys, const float* rows, size_t n, uint32_t dim, Key* out_keys,
               float* out_rows, uint32_t* inverse, size_t* num_unique, Workspace* ws, void* stream,
               int key_bits = 64);

// Unique sorted keys and the inverse (see pack::UniqueKeys).
Error UniqueKeys(const Key* keys, size_t n, Key* out_keys, uint32_t* inverse, size_t* num_unique,
                 Workspace* ws, void* stream, int key_bits = 64);

// Bucketing by server (see pack::Bucket); bucket_begin (num_buckets entries) and
// offsets (num_buckets + 1 entries) are device memory. Input order is kept per bucket.
Error Bucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
             const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys, float* out_rows,
             size_t* offsets, Workspace* ws, void* stream);

// Coalesce and bucket in one pass over the rows (see pack::CoalesceAndBucket): what a
// sparse push needs. offsets[num_buckets] is the number of unique keys.
Error CoalesceAndBucket(const Key* keys, const float* rows, size_t n, uint32_t dim,
                        const uint64_t* bucket_begin, size_t num_buckets, Key* out_keys,
                        float* out_rows, uint32_t* inverse, size_t* offsets, Workspace* ws,
                        void* stream, int key_bits = 64);

// Pull-side scatter (see pack::ScatterRows).
Error ScatterRows(const uint32_t* inverse, size_t n, const float* uniq_rows, uint32_t dim,
                  float* out, void* stream);

// ---- Dense ----------------------------------------------------------------------------

// Array conversion to and from a wire type (see pack::ToWire / pack::FromWire).
Error ToWire(const float* in, size_t n, WireType type, void* out, void* stream);
Error FromWire(const void* in, size_t n, WireType type, float* out, void* stream);

// Dense fusion (see pack::Fuse / pack::Unfuse; layout from pack::FuseOffsets). srcs/dsts
// and lens are HOST arrays (read during the call) of device pointers and lengths; a
// tensor of length 0 may have a null pointer. The tensors must not overlap the fused
// buffer. Tensors are packed in batches of up to 128 per kernel launch.
Error Fuse(const float* const* srcs, const size_t* lens, size_t count, WireType type, void* out,
           void* stream);
Error Unfuse(const void* in, WireType type, float* const* dsts, const size_t* lens, size_t count,
             void* stream);

// ---- Host buffers -------------------------------------------------------------------------

// Page-locked host memory, mapped into the device address space: the transport can hand
// it to ZeroMQ as it is (no further copy), and kernels and copies can write it directly.
// Allocating and freeing pinned memory synchronizes the device: do it at setup.
Error AllocPinned(size_t bytes, void** ptr);
Error FreePinned(void* ptr);

// Lets the current device's default memory pool (what cudaMallocAsync draws on) keep at
// least `bytes` of freed memory instead of returning it to the system at every
// synchronization: stream-ordered temporaries of later calls then reuse that memory
// rather than map it anew. Never lowers a larger threshold the application set.
Error RetainPoolMemory(size_t bytes);

// cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream): any direction; with a
// pinned host side it is a true asynchronous DMA.
Error CopyAsync(void* dst, const void* src, size_t bytes, void* stream);

// Copies (*count) elements of elem_bytes each from src to dst, where *count lives in
// device memory (e.g. num_unique or offsets[num_buckets]) and is at most max_count: moves
// exactly the bytes the packing produced without the host waiting to learn the count.
// dst is typically mapped pinned host memory (AllocPinned). A kernel, on stream.
Error CopyCountedAsync(void* dst, const void* src, const size_t* count, size_t elem_bytes,
                       size_t max_count, void* stream);

}  // namespace gpu
}  // namespace pack
}  // namespace ps

#endif  // PS_CUDA_PACKING_CUDA_H_
