// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/wire_type.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#include <cpuid.h>
#include <immintrin.h>
#define LAYERPS_WIRE_F16C 1
#endif

namespace ps {
namespace pack {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

constexpr uint32_t kCanonicalFloatNaN = 0x7FFFFFFFu;
constexpr uint16_t kCanonicalHalfNaN = 0x7FFF;

}  // namespace

size_t WireBytes(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return 4;
    case WireType::kFloat16:
    case WireType::kBFloat16:
      return 2;
  }
  return 0;
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return kCanonicalHalfNaN;
  // 65520 = 0x477FF000 is halfway between the largest half (65504) and 2^16; the tie
  // goes to the even neighbour, which is infinity.
  if (ax >= 0x477FF000u) return sign | 0x7C00u;
  if (ax >= 0x38800000u) {  // >= 2^-14: a normal half
    uint32_t h = (ax >> 13) - (uint32_t{127 - 15} << 10);
    const uint32_t rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  // A subnormal half (units of 2^-24) or zero. 2^-25 (0x33000000) ties to 0.
  if (ax <= 0x33000000u) return sign;
  const uint32_t e = ax >> 23;  // 102..112
  const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // 0x400 is the smallest normal
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return BitsFloat(m == 0 ? (sign | 0x7F800000u) : kCanonicalFloatNaN);
  if (e == 0) {
    // m * 2^-24, exact in float.
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return BitsFloat(FloatBits(v) | sign);
  }
  return BitsFloat(sign | ((e + (127 - 15)) << 23) | (m << 13));
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return kCanonicalHalfNaN;
  // Round to nearest even on the low 16 bits; overflow carries into infinity correctly.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float BFloat16ToFloat(uint16_t b) {
  if ((b & 0x7FFFu) > 0x7F80u) return BitsFloat(kCanonicalFloatNaN);
  return BitsFloat(uint32_t{b} << 16);
}

#if LAYERPS_WIRE_F16C
namespace {

// The CPU's half conversions (F16C), 8 values at a time: round to nearest even, subnormals
// kept, overflow to infinity, exactly as FloatToHalf/HalfToFloat, except that NaNs keep a
// payload: a block holding one is redone with the scalar code (canonical NaNs).
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know
// "f16c"; "avx" also says the OS saves the YMM registers.
bool HaveF16C() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & (1u << 29)) != 0;
  }();
  return ok;
}

__attribute__((target("avx,f16c"))) void ToHalfF16C(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (size_t j = i; j < i + 8; ++j) out[j] = FloatToHalf(in[j]);
    }
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

__attribute__((target("avx,f16c"))) void FromHalfF16C(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, f);
    if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) != 0) {
      for (size_t j = i; j < i + 8; ++j) out[j] = HalfToFloat(in[j]);
    }
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

bool HaveAvx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

// bfloat16 with AVX2 integer operations, 16 values at a time: the same formulas as
// FloatToBFloat16/BFloat16ToFloat (round to nearest even on the low 16 bits, NaN to the
// canonical NaN), so the results are bit-identical.
__attribute__((target("avx2"))) __m256i ToBf16Lanes(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF), nan);
}

__attribute__((target("avx2"))) void ToBf16Avx2(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = ToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    const __m256i b = ToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
    // packus works within 128-bit lanes: a0-3 b0-3 a4-7 b4-7, then put the quarters in order.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), p);
  }
  for (; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}

__attribute__((target("avx2"))) void FromBf16Avx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    const __m256i r = _mm256_blendv_epi8(w, _mm256_set1_epi32(0x7FFFFFFF), nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
  for (; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

}  // namespace
#endif  // LAYERPS_WIRE_F16C

void ToWire(const float* in, size_t n, WireType type, void* out) {
  if (n == 0) return;
#if LAYERPS_WIRE_F16C
  if (type == WireType::kFloat16 && HaveF16C()) {
    ToHalfF16C(in, n, static_cast<uint16_t*>(out));
    return;
  }
  if (type == WireType::kBFloat16 && HaveAvx2()) {
    ToBf16Avx2(in, n, static_cast<uint16_t*>(out));
    return;
  }
#endif
  switch (type) {
    case WireType::kFloat32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case WireType::kFloat16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = FloatToHalf(in[i]);
      return;
    }
    case WireType::kBFloat16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = FloatToBFloat16(in[i]);
      return;
    }
  }
}

void FromWire(const void* in, size_t n, WireType type, float* out) {
  if (n == 0) return;
#if LAYERPS_WIRE_F16C
  if (type == WireType::kFloat16 && HaveF16C()) {
    FromHalfF16C(static_cast<const uint16_t*>(in), n, out);
    return;
  }
  if (type == WireType::kBFloat16 && HaveAvx2()) {
    FromBf16Avx2(static_cast<const uint16_t*>(in), n, out);
    return;
  }
#endif
  switch (type) {
    case WireType::kFloat32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case WireType::kFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(p[i]);
      return;
    }
    case WireType::kBFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(p[i]);
      return;
    }
  }
}

}  // namespace pack
}  // namespace ps
