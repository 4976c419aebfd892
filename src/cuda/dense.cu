// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Dense packing on the GPU: fp32 <-> fp16/bf16 conversion, fusion of many tensors into
// one buffer and back, pinned host buffers and copies. See packing_cuda.h.
#include <atomic>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_util.cuh"

namespace ps {
namespace pack {
namespace gpu {

using detail::AsStream;
using detail::Blocks;
using detail::kThreads;

namespace {

// Element conversion, bit-for-bit the CPU reference (pack::FloatToHalf etc.): the
// hardware conversions round to nearest even without flushing subnormals (this file
// must not be built with --use_fast_math / -ftz=true); NaNs are made canonical
// explicitly because the hardware's NaN payload handling is not part of IEEE.
template <WireType T>
struct Wire;

template <>
struct Wire<WireType::kFloat32> {
  using Elem = float;
  static __device__ __forceinline__ Elem Out(float x) { return x; }
  static __device__ __forceinline__ float In(Elem e) { return e; }
};

template <>
struct Wire<WireType::kFloat16> {
  using Elem = uint16_t;
  static __device__ __forceinline__ Elem Out(float x) {
    return isnan(x) ? uint16_t{0x7FFF} : __half_as_ushort(__float2half_rn(x));
  }
  static __device__ __forceinline__ float In(Elem e) {
    return (e & 0x7FFFu) > 0x7C00u ? __uint_as_float(0x7FFFFFFFu)
                                   : __half2float(__ushort_as_half(e));
  }
};

template <>
struct Wire<WireType::kBFloat16> {
  using Elem = uint16_t;
  static __device__ __forceinline__ Elem Out(float x) {
    return isnan(x) ? uint16_t{0x7FFF} : __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  static __device__ __forceinline__ float In(Elem e) {
    return (e & 0x7FFFu) > 0x7F80u ? __uint_as_float(0x7FFFFFFFu)
                                   : __uint_as_float(static_cast<uint32_t>(e) << 16);
  }
};

// ---- Array conversion -----------------------------------------------------------------------

// Four elements per thread with 16-byte loads and 8-byte stores (both pointers aligned),
// the remainder by the scalar kernel.
template <WireType T>
__global__ void ToWire4Kernel(const float4* in, size_t n4, uint2* out) {
  PS_GRID_LOOP(i, n4) {
    const float4 v = in[i];
    const uint32_t a = Wire<T>::Out(v.x) | (uint32_t{Wire<T>::Out(v.y)} << 16);
    const uint32_t b = Wire<T>::Out(v.z) | (uint32_t{Wire<T>::Out(v.w)} << 16);
    out[i] = make_uint2(a, b);
  }
}

template <WireType T>
__global__ void FromWire4Kernel(const uint2* in, size_t n4, float4* out) {
  PS_GRID_LOOP(i, n4) {
    const uint2 v = in[i];
    out[i] = make_float4(Wire<T>::In(static_cast<uint16_t>(v.x & 0xFFFFu)),
                         Wire<T>::In(static_cast<uint16_t>(v.x >> 16)),
                         Wire<T>::In(static_cast<uint16_t>(v.y & 0xFFFFu)),
                         Wire<T>::In(static_cast<uint16_t>(v.y >> 16)));
  }
}

template <WireType T>
__global__ void ToWireKernel(const float* in, size_t n, typename Wire<T>::Elem* out) {
  PS_GRID_LOOP(i, n) { out[i] = Wire<T>::Out(in[i]); }
}

template <WireType T>
__global__ void FromWireKernel(const typename Wire<T>::Elem* in, size_t n, float* out) {
  PS_GRID_LOOP(i, n) { out[i] = Wire<T>::In(in[i]); }
}

bool Aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

template <WireType T>
Error ToWireT(const float* in, size_t n, void* out, cudaStream_t stream) {
  auto* o = static_cast<uint16_t*>(out);
  size_t done = 0;
  if (Aligned(in, 16) && Aligned(out, 8) && n >= 4) {
    const size_t n4 = n / 4;
    ToWire4Kernel<T><<<Blocks(n4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in), n4,
                                                          reinterpret_cast<uint2*>(o));
    PS_CUDA_TRY_LAUNCH();
    done = n4 * 4;
  }
  if (done < n) {
    ToWireKernel<T><<<Blocks(n - done), kThreads, 0, stream>>>(in + done, n - done, o + done);
    PS_CUDA_TRY_LAUNCH();
  }
  return kOk;
}

template <WireType T>
Error FromWireT(const void* in, size_t n, float* out, cudaStream_t stream) {
  const auto* p = static_cast<const uint16_t*>(in);
  size_t done = 0;
  if (Aligned(in, 8) && Aligned(out, 16) && n >= 4) {
    const size_t n4 = n / 4;
    FromWire4Kernel<T><<<Blocks(n4), kThreads, 0, stream>>>(reinterpret_cast<const uint2*>(p), n4,
                                                            reinterpret_cast<float4*>(out));
    PS_CUDA_TRY_LAUNCH();
    done = n4 * 4;
  }
  if (done < n) {
    FromWireKernel<T><<<Blocks(n - done), kThreads, 0, stream>>>(p + done, n - done, out + done);
    PS_CUDA_TRY_LAUNCH();
  }
  return kOk;
}

// ---- Fusion ---------------------------------------------------------------------------------

constexpr int kBatch = 128;      // tensors per launch (the batch travels as a kernel parameter)
constexpr size_t kChunk = 4096;  // elements per block and step

// Up to kBatch tensors: their pointers and their element offsets inside the batch's part
// of the fused buffer (offset[0] == 0, offset[count] == the part's length).
struct FuseBatch {
  const void* ptr[kBatch];
  size_t offset[kBatch + 1];
  int count;
};

// Last t with offset[t] <= x (skips empty tensors, since their offsets repeat).
__device__ __forceinline__ int TensorAt(const FuseBatch& b, size_t x) {
  int lo = 0, hi = b.count + 1;  // first index with offset > x
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (b.offset[mid] <= x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// kPack: tensors -> fused; else fused -> tensors. Each block takes chunks of kChunk
// consecutive fused elements; the tensor boundaries inside a chunk are block-uniform.
template <WireType T, bool kPack>
__global__ void FuseKernel(const FuseBatch batch, void* fused_part) {
  using Elem = typename Wire<T>::Elem;
  const size_t total = batch.offset[batch.count];
  for (size_t c0 = blockIdx.x * kChunk; c0 < total; c0 += static_cast<size_t>(gridDim.x) * kChunk) {
    const size_t c1 = c0 + kChunk < total ? c0 + kChunk : total;
    int t = TensorAt(batch, c0);
    size_t pos = c0;
    while (pos < c1) {
      const size_t base = batch.offset[t];
      const size_t end = batch.offset[t + 1] < c1 ? batch.offset[t + 1] : c1;
      if (kPack) {
        const float* src = static_cast<const float*>(batch.ptr[t]);
        Elem* dst = static_cast<Elem*>(fused_part);
        for (size_t i = pos + threadIdx.x; i < end; i += blockDim.x) {
          dst[i] = Wire<T>::Out(src[i - base]);
        }
      } else {
        float* dst = static_cast<float*>(const_cast<void*>(batch.ptr[t]));
        const Elem* src = static_cast<const Elem*>(fused_part);
        for (size_t i = pos + threadIdx.x; i < end; i += blockDim.x) {
          dst[i - base] = Wire<T>::In(src[i]);
        }
      }
      pos = end;
      ++t;
    }
  }
}

template <WireType T, bool kPack>
Error FuseT(const void* const* ptrs, const size_t* lens, size_t count, void* fused,
            cudaStream_t stream) {
  char* part = static_cast<char*>(fused);
  for (size_t first = 0; first < count; first += kBatch) {
    FuseBatch batch;
    batch.count = static_cast<int>(std::min<size_t>(kBatch, count - first));
    batch.offset[0] = 0;
    for (int i = 0; i < batch.count; ++i) {
      batch.ptr[i] = ptrs[first + i];
      if (lens[first + i] > 0 && ptrs[first + i] == nullptr) return kInvalidArgument;
      batch.offset[i + 1] = batch.offset[i] + lens[first + i];
    }
    const size_t total = batch.offset[batch.count];
    if (total > 0) {
      const size_t chunks = (total + kChunk - 1) / kChunk;
      FuseKernel<T, kPack>
          <<<static_cast<unsigned>(std::min<size_t>(chunks, 1u << 20)), kThreads, 0, stream>>>(
              batch, part);
      PS_CUDA_TRY_LAUNCH();
    }
    part += total * sizeof(typename Wire<T>::Elem);
  }
  return kOk;
}

// ---- Counted copy ---------------------------------------------------------------------------

template <typename Word>
__global__ void CopyCountedKernel(Word* dst, const Word* src, const size_t* count,
                                  size_t words_per_elem, size_t max_words) {
  const size_t words = *count * words_per_elem;
  const size_t limit = words < max_words ? words : max_words;
  PS_GRID_LOOP(i, limit) { dst[i] = src[i]; }
}

template <typename Word>
Error CopyCountedT(void* dst, const void* src, const size_t* count, size_t elem_bytes,
                   size_t max_count, cudaStream_t stream) {
  const size_t words_per_elem = elem_bytes / sizeof(Word);
  const size_t max_words = max_count * words_per_elem;
  // Enough threads for max_words at 4 words per thread, grid-striding beyond.
  CopyCountedKernel<Word><<<Blocks((max_words + 3) / 4), kThreads, 0, stream>>>(
      static_cast<Word*>(dst), static_cast<const Word*>(src), count, words_per_elem, max_words);
  PS_CUDA_TRY_LAUNCH();
  return kOk;
}

}  // namespace

Error ToWire(const float* in, size_t n, WireType type, void* out, void* stream_ptr) {
  if (n == 0) return kOk;
  if (in == nullptr || out == nullptr) return kInvalidArgument;
  cudaStream_t stream = AsStream(stream_ptr);
  switch (type) {
    case WireType::kFloat32:
      PS_CUDA_TRY(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDefault, stream));
      return kOk;
    case WireType::kFloat16:
      return ToWireT<WireType::kFloat16>(in, n, out, stream);
    case WireType::kBFloat16:
      return ToWireT<WireType::kBFloat16>(in, n, out, stream);
  }
  return kInvalidArgument;
}

Error FromWire(const void* in, size_t n, WireType type, float* out, void* stream_ptr) {
  if (n == 0) return kOk;
  if (in == nullptr || out == nullptr) return kInvalidArgument;
  cudaStream_t stream = AsStream(stream_ptr);
  switch (type) {
    case WireType::kFloat32:
      PS_CUDA_TRY(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDefault, stream));
      return kOk;
    case WireType::kFloat16:
      return FromWireT<WireType::kFloat16>(in, n, out, stream);
    case WireType::kBFloat16:
      return FromWireT<WireType::kBFloat16>(in, n, out, stream);
  }
  return kInvalidArgument;
}

Error Fuse(const float* const* srcs, const size_t* lens, size_t count, WireType type, void* out,
           void* stream_ptr) {
  if (count == 0) return kOk;
  if (srcs == nullptr || lens == nullptr || out == nullptr) return kInvalidArgument;
  const void* const* ptrs = reinterpret_cast<const void* const*>(srcs);
  cudaStream_t stream = AsStream(stream_ptr);
  switch (type) {
    case WireType::kFloat32:
      return FuseT<WireType::kFloat32, true>(ptrs, lens, count, out, stream);
    case WireType::kFloat16:
      return FuseT<WireType::kFloat16, true>(ptrs, lens, count, out, stream);
    case WireType::kBFloat16:
      return FuseT<WireType::kBFloat16, true>(ptrs, lens, count, out, stream);
  }
  return kInvalidArgument;
}

Error Unfuse(const void* in, WireType type, float* const* dsts, const size_t* lens, size_t count,
             void* stream_ptr) {
  if (count == 0) return kOk;
  if (dsts == nullptr || lens == nullptr || in == nullptr) return kInvalidArgument;
  const void* const* ptrs = reinterpret_cast<const void* const*>(dsts);
  void* fused = const_cast<void*>(in);  // only read by the kernel
  cudaStream_t stream = AsStream(stream_ptr);
  switch (type) {
    case WireType::kFloat32:
      return FuseT<WireType::kFloat32, false>(ptrs, lens, count, fused, stream);
    case WireType::kFloat16:
      return FuseT<WireType::kFloat16, false>(ptrs, lens, count, fused, stream);
    case WireType::kBFloat16:
      return FuseT<WireType::kBFloat16, false>(ptrs, lens, count, fused, stream);
  }
  return kInvalidArgument;
}

Error RetainPoolMemory(size_t bytes) {
  // Once per device: the attribute is the pool's, shared by every stream of the device.
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  PS_CUDA_TRY(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_relaxed) & bit)) return kOk;
  cudaMemPool_t pool;
  PS_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t threshold = 0;
  PS_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (threshold < bytes) {
    threshold = bytes;
    PS_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  done.fetch_or(bit, std::memory_order_relaxed);
  return kOk;
}

Error AllocPinned(size_t bytes, void** ptr) {
  if (ptr == nullptr) return kInvalidArgument;
  *ptr = nullptr;
  PS_CUDA_TRY(
      cudaHostAlloc(ptr, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  return kOk;
}

Error FreePinned(void* ptr) {
  if (ptr == nullptr) return kOk;
  PS_CUDA_TRY(cudaFreeHost(ptr));
  return kOk;
}

Error CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return kOk;
  if (dst == nullptr || src == nullptr) return kInvalidArgument;
  PS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, AsStream(stream)));
  return kOk;
}

Error CopyCountedAsync(void* dst, const void* src, const size_t* count, size_t elem_bytes,
                       size_t max_count, void* stream_ptr) {
  if (max_count == 0 || elem_bytes == 0) return kOk;
  if (dst == nullptr || src == nullptr || count == nullptr) return kInvalidArgument;
  cudaStream_t stream = AsStream(stream_ptr);
  if (elem_bytes % 16 == 0 && Aligned(dst, 16) && Aligned(src, 16)) {
    return CopyCountedT<uint4>(dst, src, count, elem_bytes, max_count, stream);
  }
  if (elem_bytes % 4 == 0 && Aligned(dst, 4) && Aligned(src, 4)) {
    return CopyCountedT<uint32_t>(dst, src, count, elem_bytes, max_count, stream);
  }
  return CopyCountedT<uint8_t>(dst, src, count, elem_bytes, max_count, stream);
}

}  // namespace gpu
}  // namespace pack
}  // namespace ps
