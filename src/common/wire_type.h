// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Element types on the wire: float32 as it is, or narrowed to IEEE half or bfloat16, and
// the conversions between them. Shared by the worker's packing (CPU reference), the CUDA
// kernels (src/cuda, bit-identical) and the servers (which keep and accumulate float32).
#ifndef PS_COMMON_WIRE_TYPE_H_
#define PS_COMMON_WIRE_TYPE_H_

#include <cstddef>
#include <cstdint>

namespace ps {
namespace pack {

// How float values travel: as they are, or narrowed to IEEE half or bfloat16.
enum class WireType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Bytes per element: 4, 2, 2. Returns 0 for a value outside the enum.
size_t WireBytes(WireType type);

// Scalar conversions, bit-for-bit what the GPU kernels produce:
// - narrowing rounds to nearest, ties to even; subnormals are kept (no flush to zero);
//   values too large become +-infinity; any NaN becomes the canonical NaN 0x7FFF;
// - widening is exact; any NaN becomes the canonical float NaN 0x7FFFFFFF.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

// Array conversions: out[i] = in[i] narrowed to type (out has n * WireBytes(type) bytes),
// and back. kFloat32 is a plain copy (NaN payloads kept).
void ToWire(const float* in, size_t n, WireType type, void* out);
void FromWire(const void* in, size_t n, WireType type, float* out);

}  // namespace pack
}  // namespace ps

#endif  // PS_COMMON_WIRE_TYPE_H_
