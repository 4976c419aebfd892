// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The data header and frame validation every receiver runs first (ParseHeader,
// ValidateDataFrames, FusedElements, FusedSparseSizes): no input may crash them, and what
// they accept must agree with the header (the sizes the handlers then rely on).
#include "fuzz_util.h"
#include "ps/element_types.h"

namespace {
constexpr uint64_t kMaxElems = uint64_t{1} << 20;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  Message msg;
  Status header;
  if (!fuzz::SplitMessage(data, size, &msg, &header)) return 0;
  const Header& h = msg.header;
  FUZZ_ASSERT(h.magic == kMagic && h.version == kProtocolVersion);
  Status valid = ValidateDataFrames(msg, kMaxElems);
  if (h.msg_type() == MsgType::kControl) FUZZ_ASSERT(!valid.ok());
  if (!valid.ok()) return 0;
  FUZZ_ASSERT(msg.frames.size() <= (h.fused() && h.sparse() ? 3u : 2u));
  if (h.msg_type() == MsgType::kReplicateAck) {  // a replicate's echo: no frames
    FUZZ_ASSERT(msg.frames.empty() && h.wire() <= 2 &&
                (h.sparse() && !h.fused() ? h.dim >= 1 : h.dim == 0));
    return 0;
  }
  if (h.msg_type() == MsgType::kReply && h.status != 0) return 0;
  if (h.fused() && h.sparse()) {
    // Segments, keys, and a push's rows, whose sizes the segments give.
    FUZZ_ASSERT(h.wire() == 0 && h.dim == 0);
    if (h.msg_type() == MsgType::kReply) {
      FUZZ_ASSERT(msg.frames.size() <= 1);
      return 0;
    }
    FUZZ_ASSERT(h.msg_type() == MsgType::kPush || h.msg_type() == MsgType::kPull);
    StatusOr<FusedSparseTotals> total = FusedSparseSizes(msg, kMaxElems);
    FUZZ_ASSERT(total.ok() && total->keys <= kMaxElems && total->row_floats <= kMaxElems);
    FUZZ_ASSERT(msg.frames[0].size() == h.count * sizeof(FusedSparseSegment));
    FUZZ_ASSERT(msg.frames[1].size() == total->keys * sizeof(Key));
    FUZZ_ASSERT(msg.frames.size() == (h.msg_type() == MsgType::kPush ? 3u : 2u));
    if (h.msg_type() == MsgType::kPush) {
      FUZZ_ASSERT(msg.frames[2].size() == total->row_floats * sizeof(float));
    }
    return 0;
  }
  if (h.fused()) {
    if (h.msg_type() == MsgType::kReply) return 0;
    StatusOr<uint64_t> total = FusedElements(msg, kMaxElems);
    FUZZ_ASSERT(total.ok() && *total <= kMaxElems);
    FUZZ_ASSERT(msg.frames[0].size() == h.count * sizeof(FusedSegment));
    if (h.msg_type() != MsgType::kPull) {
      FUZZ_ASSERT(msg.frames[1].size() == *total * sizeof(float));
    }
    return 0;
  }
  if (h.msg_type() == MsgType::kPeerTensor) {
    // A peer tensor: count elements of the DataType that dim names, in one frame.
    FUZZ_ASSERT(!h.sparse() && h.wire() == 0 && h.dim < static_cast<uint32_t>(kNumDataTypes));
    FUZZ_ASSERT(msg.frames.size() == 1 && h.count <= kMaxElems);
    FUZZ_ASSERT(msg.frames[0].size() == h.count * DataTypeSize(static_cast<DataType>(h.dim)));
    return 0;
  }
  const uint64_t width = h.sparse() ? h.dim : 1;
  FUZZ_ASSERT(width >= 1 && h.count <= kMaxElems && h.count * width <= kMaxElems);
  // Values travel as the header's wire type: 4 bytes (float32) or 2 (fp16, bf16).
  const uint64_t element_bytes = h.wire() == 0 ? sizeof(float) : 2;
  const uint64_t value_bytes = h.count * width * element_bytes;
  const bool keyed = h.sparse() && h.msg_type() != MsgType::kReply;
  if (keyed) FUZZ_ASSERT(!msg.frames.empty() && msg.frames[0].size() == h.count * sizeof(Key));
  const size_t values = keyed ? 1 : 0;  // the frame that holds values, if any
  if (msg.frames.size() > values) FUZZ_ASSERT(msg.frames[values].size() == value_bytes);
  return 0;
}
