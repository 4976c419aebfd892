// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Element-wise kernels of the collectives (docs/collectives.md): combining two buffers
// of one DataType under a ReduceOp, scaling, Average's division and the ops' identities.
// float16/bfloat16 elements are widened to float32, combined, and rounded back (to
// nearest, ties to even: pack::FloatToHalf/FloatToBFloat16). Integer sums and products
// wrap around (two's complement). Buffers need no alignment (elements are loaded and
// stored with memcpy, which the compiler turns into plain, vectorizable moves).
#ifndef PS_COMMON_REDUCE_H_
#define PS_COMMON_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "common/wire_type.h"
#include "ps/element_types.h"

namespace ps {
namespace reduce {

// dst[i] = dst[i] op src[i] for i < n (kAverage combines as kSum; the division comes
// last, Divide).
void Combine(DataType type, ReduceOp op, void* dst, const void* src, size_t n);

// The compressed form for float32 buffers: src holds n values narrowed to `wire`; each is
// widened and combined into dst (float32).
void CombineWidening(ReduceOp op, float* dst, const void* src, pack::WireType wire, size_t n);

// data[i] *= factor: float32/float64 in double, then rounded to the type; float16/bfloat16
// through float; integers rounded to nearest and clamped to the type's range.
void Scale(DataType type, void* data, size_t n, double factor);

// Average's last step: data[i] /= members (floats: exact division, rounded to the type;
// integers: truncated toward zero).
void Divide(DataType type, void* data, size_t n, uint64_t members);

// data[i] = the op's identity: 0 (sum, average), 1 (product), the largest value or +inf
// (min), the smallest value or -inf (max).
void FillIdentity(DataType type, ReduceOp op, void* data, size_t n);

}  // namespace reduce
}  // namespace ps

#endif  // PS_COMMON_REDUCE_H_
