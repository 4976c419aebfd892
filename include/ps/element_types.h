// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Element types and element-wise reduction ops: what a collective's buffers hold and how
// an all-reduce combines them (ps/communicator.h), also the element type a peer tensor
// carries on the wire. Kept apart from the collectives' options so that the layers below
// the communicator (the wire format, the reduction kernels) name them without it.
#ifndef PS_ELEMENT_TYPES_H_
#define PS_ELEMENT_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "ps/status.h"

namespace ps {

// Element types of collective buffers. The values of the first three are those of
// WireDType (float32 travels as it is, or narrowed to fp16/bf16).
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,   // IEEE half, as uint16_t bits
  kBFloat16 = 2,  // bfloat16, as uint16_t bits
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
};
constexpr int kNumDataTypes = 7;
// Bytes per element (0 for a value outside the enum).
size_t DataTypeSize(DataType type);
// "float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8"; "?" otherwise.
const char* DataTypeName(DataType type);
// The inverse of DataTypeName; also "fp32", "fp16", "bf16", "half", "double", "float".
StatusOr<DataType> ParseDataType(const std::string& name);

// How an all-reduce (or reduce-scatter) combines the members' values, element-wise.
// Sums of integers wrap around (two's complement); float16/bfloat16 values are combined
// in float32 and rounded back (to nearest, ties to even) at every step.
enum class ReduceOp : uint8_t {
  kSum = 0,
  // The sum divided by the number of members (integers: truncated toward zero), as
  // Horovod's Average. With Join, by the full size of the set, joined members included.
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
constexpr int kNumReduceOps = 5;
const char* ReduceOpName(ReduceOp op);  // "sum", "average", "min", "max", "product"
StatusOr<ReduceOp> ParseReduceOp(const std::string& name);

}  // namespace ps

#endif  // PS_ELEMENT_TYPES_H_
