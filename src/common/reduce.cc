// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/reduce.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace ps {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat64: return "float64";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
  }
  return "?";
}

namespace {
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

StatusOr<DataType> ParseDataType(const std::string& name) {
  const std::string n = Lower(name);
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (n == DataTypeName(static_cast<DataType>(i))) return static_cast<DataType>(i);
  }
  if (n == "fp32" || n == "float") return DataType::kFloat32;
  if (n == "fp16" || n == "half") return DataType::kFloat16;
  if (n == "bf16") return DataType::kBFloat16;
  if (n == "fp64" || n == "double") return DataType::kFloat64;
  return InvalidArgument("unknown data type '" + name +
                         "' (float32, float16, bfloat16, float64, int32, int64, uint8)");
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

StatusOr<ReduceOp> ParseReduceOp(const std::string& name) {
  const std::string n = Lower(name);
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (n == ReduceOpName(static_cast<ReduceOp>(i))) return static_cast<ReduceOp>(i);
  }
  if (n == "avg" || n == "mean") return ReduceOp::kAverage;
  if (n == "prod") return ReduceOp::kProduct;
  return InvalidArgument("unknown reduce op '" + name + "' (sum, average, min, max, product)");
}

namespace reduce {
namespace {

// An element type's storage (S) and the type it is computed in (C).
template <typename S, typename C = S>
struct Plain {
  using Compute = C;
  static C Load(const uint8_t* p) {
    S v;
    std::memcpy(&v, p, sizeof(S));
    return static_cast<C>(v);
  }
  static void Store(uint8_t* p, C v) {
    const S s = static_cast<S>(v);
    std::memcpy(p, &s, sizeof(S));
  }
  static constexpr size_t kSize = sizeof(S);
};

struct Half {
  using Compute = float;
  static float Load(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return pack::HalfToFloat(h);
  }
  static void Store(uint8_t* p, float v) {
    const uint16_t h = pack::FloatToHalf(v);
    std::memcpy(p, &h, 2);
  }
  static constexpr size_t kSize = 2;
};

struct BFloat {
  using Compute = float;
  static float Load(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return pack::BFloat16ToFloat(h);
  }
  static void Store(uint8_t* p, float v) {
    const uint16_t h = pack::FloatToBFloat16(v);
    std::memcpy(p, &h, 2);
  }
  static constexpr size_t kSize = 2;
};

// Wrapping integer arithmetic (no signed overflow).
template <typename T>
T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T>
T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
template <typename T>
T Min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}
template <typename T>
T Max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}

template <typename E, typename F>
void Apply(void* dst, const void* src, size_t n, F f) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    E::Store(d + i * E::kSize, f(E::Load(d + i * E::kSize), E::Load(s + i * E::kSize)));
  }
}

template <typename E>
void CombineAs(ReduceOp op, void* dst, const void* src, size_t n) {
  using C = typename E::Compute;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      Apply<E>(dst, src, n, [](C a, C b) { return WrapAdd<C>(a, b); });
      return;
    case ReduceOp::kMin:
      Apply<E>(dst, src, n, [](C a, C b) { return Min<C>(a, b); });
      return;
    case ReduceOp::kMax:
      Apply<E>(dst, src, n, [](C a, C b) { return Max<C>(a, b); });
      return;
    case ReduceOp::kProduct:
      Apply<E>(dst, src, n, [](C a, C b) { return WrapMul<C>(a, b); });
      return;
  }
}

// Rounds a double to the integer type T, clamped to its range.
template <typename T>
T RoundClamp(double v) {
  if (std::isnan(v)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(std::llround(v));
}

template <typename E, typename F>
void Map(void* data, size_t n, F f) {
  auto* d = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) E::Store(d + i * E::kSize, f(E::Load(d + i * E::kSize)));
}

template <typename E>
void FillAs(void* data, size_t n, typename E::Compute v) {
  auto* d = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) E::Store(d + i * E::kSize, v);
}

template <typename E>
void FillIdentityAs(ReduceOp op, void* data, size_t n) {
  using C = typename E::Compute;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      FillAs<E>(data, n, C(0));
      return;
    case ReduceOp::kProduct:
      FillAs<E>(data, n, C(1));
      return;
    case ReduceOp::kMin:
      FillAs<E>(data, n, std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity()
                                                                : std::numeric_limits<C>::max());
      return;
    case ReduceOp::kMax:
      FillAs<E>(data, n, std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                                : std::numeric_limits<C>::lowest());
      return;
  }
}

}  // namespace

void Combine(DataType type, ReduceOp op, void* dst, const void* src, size_t n) {
  switch (type) {
    case DataType::kFloat32: return CombineAs<Plain<float>>(op, dst, src, n);
    case DataType::kFloat16: return CombineAs<Half>(op, dst, src, n);
    case DataType::kBFloat16: return CombineAs<BFloat>(op, dst, src, n);
    case DataType::kFloat64: return CombineAs<Plain<double>>(op, dst, src, n);
    case DataType::kInt32: return CombineAs<Plain<int32_t>>(op, dst, src, n);
    case DataType::kInt64: return CombineAs<Plain<int64_t>>(op, dst, src, n);
    case DataType::kUInt8: return CombineAs<Plain<uint8_t>>(op, dst, src, n);
  }
}

void CombineWidening(ReduceOp op, float* dst, const void* src, pack::WireType wire, size_t n) {
  if (wire == pack::WireType::kFloat32) return Combine(DataType::kFloat32, op, dst, src, n);
  auto* d = reinterpret_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const bool half = wire == pack::WireType::kFloat16;
  auto load = [&](size_t i) { return half ? Half::Load(s + 2 * i) : BFloat::Load(s + 2 * i); };
  for (size_t i = 0; i < n; ++i) {
    const float a = Plain<float>::Load(d + 4 * i), b = load(i);
    float r = a;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: r = a + b; break;
      case ReduceOp::kMin: r = Min(a, b); break;
      case ReduceOp::kMax: r = Max(a, b); break;
      case ReduceOp::kProduct: r = a * b; break;
    }
    Plain<float>::Store(d + 4 * i, r);
  }
}

void Scale(DataType type, void* data, size_t n, double factor) {
  switch (type) {
    case DataType::kFloat32:
      return Map<Plain<float>>(data, n, [factor](float v) { return static_cast<float>(v * factor); });
    case DataType::kFloat16:
      return Map<Half>(data, n, [factor](float v) { return static_cast<float>(v * factor); });
    case DataType::kBFloat16:
      return Map<BFloat>(data, n, [factor](float v) { return static_cast<float>(v * factor); });
    case DataType::kFloat64:
      return Map<Plain<double>>(data, n, [factor](double v) { return v * factor; });
    case DataType::kInt32:
      return Map<Plain<int32_t>>(data, n, [factor](int32_t v) {
        return RoundClamp<int32_t>(static_cast<double>(v) * factor);
      });
    case DataType::kInt64:
      return Map<Plain<int64_t>>(data, n, [factor](int64_t v) {
        return RoundClamp<int64_t>(static_cast<double>(v) * factor);
      });
    case DataType::kUInt8:
      return Map<Plain<uint8_t>>(data, n, [factor](uint8_t v) {
        return RoundClamp<uint8_t>(static_cast<double>(v) * factor);
      });
  }
}

void Divide(DataType type, void* data, size_t n, uint64_t members) {
  if (members <= 1) return;
  const double w = static_cast<double>(members);
  switch (type) {
    case DataType::kFloat32:
      return Map<Plain<float>>(data, n, [w](float v) { return static_cast<float>(v / w); });
    case DataType::kFloat16:
      return Map<Half>(data, n, [w](float v) { return static_cast<float>(v / w); });
    case DataType::kBFloat16:
      return Map<BFloat>(data, n, [w](float v) { return static_cast<float>(v / w); });
    case DataType::kFloat64:
      return Map<Plain<double>>(data, n, [w](double v) { return v / w; });
    case DataType::kInt32:
      return Map<Plain<int32_t>>(data, n, [members](int32_t v) {
        return static_cast<int32_t>(static_cast<int64_t>(v) / static_cast<int64_t>(members));
      });
    case DataType::kInt64:
      return Map<Plain<int64_t>>(data, n, [members](int64_t v) {
        // members < 2^63 (it is a worker count): the quotient is exact integer division.
        return v / static_cast<int64_t>(members);
      });
    case DataType::kUInt8:
      return Map<Plain<uint8_t>>(data, n, [members](uint8_t v) {
        return static_cast<uint8_t>(v / members);
      });
  }
}

void FillIdentity(DataType type, ReduceOp op, void* data, size_t n) {
  switch (type) {
    case DataType::kFloat32: return FillIdentityAs<Plain<float>>(op, data, n);
    case DataType::kFloat16: return FillIdentityAs<Half>(op, data, n);
    case DataType::kBFloat16: return FillIdentityAs<BFloat>(op, data, n);
    case DataType::kFloat64: return FillIdentityAs<Plain<double>>(op, data, n);
    case DataType::kInt32: return FillIdentityAs<Plain<int32_t>>(op, data, n);
    case DataType::kInt64: return FillIdentityAs<Plain<int64_t>>(op, data, n);
    case DataType::kUInt8: return FillIdentityAs<Plain<uint8_t>>(op, data, n);
  }
}

}  // namespace reduce
}  // namespace ps
