// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/message.h"

#include <glog/logging.h>
#include <google/protobuf/stubs/common.h>
#if GOOGLE_PROTOBUF_VERSION < 4022000
#include <google/protobuf/stubs/logging.h>
#endif

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "layerps.pb.h"
#include "ps/element_types.h"

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "LayerPS's wire format is little-endian");

const char* MsgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kControl:
      return "control";
    case MsgType::kPush:
      return "push";
    case MsgType::kPull:
      return "pull";
    case MsgType::kPushPull:
      return "pushpull";
    case MsgType::kAssign:
      return "assign";
    case MsgType::kReply:
      return "reply";
    case MsgType::kPeerTensor:
      return "peer tensor";
    case MsgType::kReplicate:
      return "replicate";
    case MsgType::kReplicateAck:
      return "replicate ack";
    case MsgType::kReplicaCopy:
      return "replica copy";
  }
  return "unknown";
}

Status ParseHeader(const void* data, size_t size, Header* out) {
  if (size != sizeof(Header)) {
    return ProtocolError("header frame is " + std::to_string(size) + " bytes, want 64");
  }
  std::memcpy(out, data, sizeof(Header));
  if (out->magic != kMagic) return ProtocolError("bad magic");
  if (out->version != kProtocolVersion) {
    return ProtocolError("protocol version " + std::to_string(out->version) +
                         ", this node speaks " + std::to_string(kProtocolVersion));
  }
  if (out->type < static_cast<uint16_t>(MsgType::kControl) ||
      out->type > static_cast<uint16_t>(kLastMsgType)) {
    return ProtocolError("unknown message type " + std::to_string(out->type));
  }
  return Status::OK();
}

namespace {

#if GOOGLE_PROTOBUF_VERSION < 4022000  // from 22 on, protobuf logs through Abseil
constexpr int64_t kProtobufLogIntervalMs = 10000;
std::atomic<int64_t> g_protobuf_last_log_ms{INT64_MIN / 2};
std::atomic<uint64_t> g_protobuf_left_out{0};

void ProtobufToGlog(google::protobuf::LogLevel level, const char* file, int line,
                    const std::string& message) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = g_protobuf_last_log_ms.load();
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      (now - last < kProtobufLogIntervalMs ||
       !g_protobuf_last_log_ms.compare_exchange_strong(last, now))) {
    g_protobuf_left_out.fetch_add(1);
    return;
  }
  const uint64_t left_out = g_protobuf_left_out.exchange(0);
  LOG(WARNING) << "protobuf (" << file << ":" << line << "): " << message
               << (left_out > 0 ? " [" + std::to_string(left_out) +
                                      " protobuf log lines left out since the last one]"
                                : std::string());
}
#endif

}  // namespace

void RouteProtobufLogs() {
#if GOOGLE_PROTOBUF_VERSION < 4022000
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&ProtobufToGlog); });
#endif
}

Message MakeControl(NodeId sender, const layerps::pb::Control& control) {
  Message m;
  m.header.type = static_cast<uint16_t>(MsgType::kControl);
  m.header.sender = sender;
  std::vector<char> bytes(control.ByteSizeLong());
  control.SerializeToArray(bytes.data(), static_cast<int>(bytes.size()));
  m.frames.push_back(Frame::Adopt(std::move(bytes)));
  return m;
}

Status ParseControl(const Message& msg, layerps::pb::Control* out) {
  if (msg.header.msg_type() != MsgType::kControl) return ProtocolError("not a control message");
  if (msg.frames.size() != 1) return ProtocolError("control message needs exactly 1 frame");
  const Frame& f = msg.frames[0];
  if (f.size() > (64u << 20)) return ProtocolError("control message above 64 MiB");
  if (!out->ParseFromArray(f.data(), static_cast<int>(f.size()))) {
    return ProtocolError("control frame does not parse");
  }
  if (out->body_case() == layerps::pb::Control::BODY_NOT_SET) {
    return ProtocolError("control message without a body");
  }
  return Status::OK();
}

StatusOr<uint64_t> FusedElements(const Message& msg, uint64_t max_elems) {
  const Header& h = msg.header;
  if (msg.frames.empty() || msg.frames[0].size() != h.count * sizeof(FusedSegment)) {
    return ProtocolError("fused message without its segment frame");
  }
  uint64_t total = 0;
  for (uint64_t i = 0; i < h.count; ++i) {
    FusedSegment seg;
    std::memcpy(&seg, msg.frames[0].data() + i * sizeof(FusedSegment), sizeof(seg));
    if (seg.count > max_elems - total) return ProtocolError("fused segments exceed the size limit");
    total += seg.count;
  }
  return total;
}

StatusOr<FusedSparseTotals> FusedSparseSizes(const Message& msg, uint64_t max_elems) {
  const Header& h = msg.header;
  if (h.count == 0 || h.count > kMaxFusedSegments) return ProtocolError("bad fused segment count");
  if (msg.frames.empty() || msg.frames[0].size() != h.count * sizeof(FusedSparseSegment)) {
    return ProtocolError("fused sparse message without its segment frame");
  }
  FusedSparseTotals total;
  for (uint64_t i = 0; i < h.count; ++i) {
    FusedSparseSegment seg;
    std::memcpy(&seg, msg.frames[0].data() + i * sizeof(seg), sizeof(seg));
    if (seg.dim == 0) {
      return ProtocolError("fused sparse segment " + std::to_string(i) + " has dim 0");
    }
    // keys <= max_elems - total.keys, and keys * dim <= max_elems - total.row_floats,
    // without overflow.
    if (seg.keys > max_elems - total.keys ||
        (seg.keys > 0 && seg.dim > (max_elems - total.row_floats) / seg.keys)) {
      return ProtocolError("fused sparse segments exceed the size limit");
    }
    total.keys += seg.keys;
    total.row_floats += seg.keys * seg.dim;
  }
  return total;
}

namespace {

// A fused sparse message: push or pull requests (frames: segments, keys, and for a push
// rows), or a reply (at most one frame; the requester checks the rows it asked for).
Status ValidateFusedSparseFrames(const Message& msg, uint64_t max_elems) {
  const Header& h = msg.header;
  const MsgType t = h.msg_type();
  if (h.dim != 0) return ProtocolError("fused sparse message with dim != 0");
  if (t == MsgType::kReply) {
    if (msg.frames.size() > 1) return ProtocolError("fused reply with more than one frame");
    return Status::OK();
  }
  if (t != MsgType::kPush && t != MsgType::kPull) {
    return ProtocolError(std::string("a fused sparse ") + MsgTypeName(t) +
                         " message (only pushes and pulls are fused)");
  }
  const bool carries_rows = t == MsgType::kPush;
  if (msg.frames.size() != (carries_rows ? 3u : 2u)) {
    return ProtocolError(std::string("fused sparse ") + MsgTypeName(t) + " message with " +
                         std::to_string(msg.frames.size()) + " frames");
  }
  StatusOr<FusedSparseTotals> total = FusedSparseSizes(msg, max_elems);
  if (!total.ok()) return total.status();
  if (msg.frames[1].size() != total->keys * sizeof(Key)) {
    return ProtocolError("fused sparse keys frame is " + std::to_string(msg.frames[1].size()) +
                         " bytes, the segments say " + std::to_string(total->keys * sizeof(Key)));
  }
  if (carries_rows && msg.frames[2].size() != total->row_floats * sizeof(float)) {
    return ProtocolError("fused sparse rows frame is " + std::to_string(msg.frames[2].size()) +
                         " bytes, the segments say " +
                         std::to_string(total->row_floats * sizeof(float)));
  }
  return Status::OK();
}

Status ValidateFusedFrames(const Message& msg, uint64_t max_elems) {
  const Header& h = msg.header;
  const MsgType t = h.msg_type();
  if (h.sparse() || h.dim != 0) return ProtocolError("fused messages are dense");
  if (t == MsgType::kReply) {
    if (msg.frames.size() > 1) return ProtocolError("fused reply with more than one frame");
    return Status::OK();
  }
  if (h.count == 0 || h.count > kMaxFusedSegments) return ProtocolError("bad fused segment count");
  const bool carries_values = t != MsgType::kPull;
  if (msg.frames.size() != (carries_values ? 2u : 1u)) {
    return ProtocolError(std::string("fused ") + MsgTypeName(t) + " message with " +
                         std::to_string(msg.frames.size()) + " frames");
  }
  StatusOr<uint64_t> total = FusedElements(msg, max_elems);
  if (!total.ok()) return total.status();
  if (carries_values && msg.frames[1].size() != *total * sizeof(float)) {
    return ProtocolError("fused values frame is " + std::to_string(msg.frames[1].size()) +
                         " bytes, the segments say " + std::to_string(*total * sizeof(float)));
  }
  return Status::OK();
}

}  // namespace

Status ValidateDataFrames(const Message& msg, uint64_t max_elems) {
  const Header& h = msg.header;
  MsgType t = h.msg_type();
  if (t == MsgType::kControl) return ProtocolError("not a data message");
  if (t == MsgType::kReplicateAck) {
    // The echo of a replicate's header, without frames: its fields as a request's.
    if ((h.flags & ~(kFlagSparse | kFlagFused | kFlagWireMask)) != 0)
      return ProtocolError("unknown header flags");
    if (h.wire() > 2) return ProtocolError("unknown wire element type 3");
    // A fused sparse ack has dim 0 as its replicate had; any other sparse ack a dim.
    if (h.sparse() && (h.fused() ? h.dim != 0 : h.dim == 0))
      return ProtocolError(h.fused() ? "fused sparse ack with dim != 0" : "sparse ack with dim 0");
    if (!h.sparse() && h.dim != 0) return ProtocolError("dense ack with dim != 0");
    if (!msg.frames.empty()) return ProtocolError("replicate ack with frames");
    return Status::OK();
  }
  if (t == MsgType::kReplicate) {
    // Checked as the request it carries.
    const auto inner = static_cast<MsgType>(h.status);
    if (inner != MsgType::kPush && inner != MsgType::kPushPull && inner != MsgType::kAssign)
      return ProtocolError("replicate of a message that is not an update");
    Message copy;
    copy.header = h;
    copy.header.type = static_cast<uint16_t>(inner);
    copy.header.status = 0;
    copy.frames = msg.frames;
    return ValidateDataFrames(copy, max_elems);
  }
  const bool sparse = h.sparse();
  if ((h.flags & ~(kFlagSparse | kFlagFused | kFlagWireMask)) != 0)
    return ProtocolError("unknown header flags");
  const uint8_t wire = h.wire();
  if (wire > 2) return ProtocolError("unknown wire element type 3");
  // An error reply echoes the request's header (whatever its counts) and carries at most
  // one frame, the error text.
  if (t == MsgType::kReply && h.status != 0) {
    if (msg.frames.size() > 1) return ProtocolError("error reply with more than one frame");
    return Status::OK();
  }
  if (h.fused()) {
    if (wire != 0) return ProtocolError("fused messages carry float32 only");
    return sparse ? ValidateFusedSparseFrames(msg, max_elems) : ValidateFusedFrames(msg, max_elems);
  }
  if (t == MsgType::kPeerTensor) {
    // A peer tensor: `count` elements of the DataType `dim`, in one frame.
    if (wire != 0) return ProtocolError("peer tensors say their type in dim, not in the flags");
    if (sparse) return ProtocolError("peer tensors are dense");
    if (h.dim >= static_cast<uint32_t>(kNumDataTypes)) {
      return ProtocolError("unknown peer tensor element type " + std::to_string(h.dim));
    }
    const uint64_t size = DataTypeSize(static_cast<DataType>(h.dim));
    if (h.count > max_elems || h.count > ~uint64_t{0} / 8) {
      return ProtocolError("count " + std::to_string(h.count) + " exceeds the limit");
    }
    if (msg.frames.size() != 1) {
      return ProtocolError("peer tensor message with " + std::to_string(msg.frames.size()) +
                           " frames");
    }
    if (msg.frames[0].size() != h.count * size) {
      return ProtocolError("values frame is " + std::to_string(msg.frames[0].size()) +
                           " bytes, header says " + std::to_string(h.count * size));
    }
    return Status::OK();
  }
  if (sparse && h.dim == 0) return ProtocolError("sparse message with dim 0");
  if (!sparse && h.dim != 0) return ProtocolError("dense message with dim != 0");
  const uint64_t width = sparse ? h.dim : 1;
  if (h.count > max_elems || (width != 0 && h.count > max_elems / width)) {
    return ProtocolError("count " + std::to_string(h.count) + " x dim exceeds the limit");
  }
  const uint64_t value_bytes = h.count * width * (wire == 0 ? sizeof(float) : 2);
  const uint64_t key_bytes = h.count * sizeof(Key);
  auto want = [&](size_t i, uint64_t bytes, const char* what) -> Status {
    if (msg.frames.size() <= i) return ProtocolError(std::string("missing ") + what + " frame");
    if (msg.frames[i].size() != bytes) {
      return ProtocolError(std::string(what) + " frame is " + std::to_string(msg.frames[i].size()) +
                           " bytes, header says " + std::to_string(bytes));
    }
    return Status::OK();
  };
  size_t expected_frames = 0;
  switch (t) {
    case MsgType::kPush:
    case MsgType::kPushPull:
    case MsgType::kAssign:
      if (sparse) {
        PS_RETURN_IF_ERROR(want(0, key_bytes, "keys"));
        PS_RETURN_IF_ERROR(want(1, value_bytes, "rows"));
        expected_frames = 2;
      } else {
        PS_RETURN_IF_ERROR(want(0, value_bytes, "values"));
        expected_frames = 1;
      }
      break;
    case MsgType::kPull:
      if (sparse) {
        PS_RETURN_IF_ERROR(want(0, key_bytes, "keys"));
        expected_frames = 1;
      }
      break;
    case MsgType::kReply:
      // A reply carries values (pulls), nothing (pushes or errors), or an error text.
      if (h.status != 0) {
        expected_frames = msg.frames.size() <= 1 ? msg.frames.size() : 99;
      } else if (!msg.frames.empty()) {
        PS_RETURN_IF_ERROR(want(0, value_bytes, "values"));
        expected_frames = 1;
      }
      break;
    default:
      return ProtocolError("unexpected message type");
  }
  if (msg.frames.size() != expected_frames) {
    return ProtocolError(std::string(MsgTypeName(t)) + " message with " +
                         std::to_string(msg.frames.size()) + " frames");
  }
  return Status::OK();
}

}  // namespace ps
