// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The unit the transport moves: a fixed 64-byte binary header plus payload frames.
// docs/wire-format.md is the normative description; keep the two in step.
#ifndef PS_TRANSPORT_MESSAGE_H_
#define PS_TRANSPORT_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "ps/status.h"
#include "ps/types.h"

namespace layerps {
namespace pb {
class Control;
}
}  // namespace layerps

namespace ps {

constexpr uint32_t kMagic = 0x3153504Cu;  // "LPS1" little-endian
constexpr uint16_t kProtocolVersion = 2;  // 2: epoch is 32 bits, followed by clock
constexpr size_t kMaxFrames = 8;  // a message with more payload frames is malformed

enum class MsgType : uint16_t {
  kControl = 1,     // frame 0: a serialized pb::Control
  kPush = 2,        // dense: frame 0 values; sparse: frame 0 keys, frame 1 rows
  kPull = 3,        // dense: no frame; sparse: frame 0 keys
  kPushPull = 4,    // as kPush; the reply carries the values after the push
  kAssign = 5,      // as kPush, but overwrites
  kReply = 6,       // to a data request: status, and values for pulls
  kPeerTensor = 7,  // worker to worker: frame 0 values (count floats); offset is the tag
  // Replication (docs/replication.md): a primary server forwards an update it applied to
  // its backup. The header is the worker's request's, but `status` holds the request's
  // type (push, pushpull or assign) and `clock` the worker's node id; the frames are the
  // request's.
  kReplicate = 8,
  // The backup's answer to a kReplicate: its header echoed, `status` the outcome. No frames.
  kReplicateAck = 9,
  // A primary copies its store to a new backup (server/replica_copy.h has the phases,
  // in `part`); the backup's answer to the last phase is one too.
  kReplicaCopy = 10,
};
constexpr MsgType kLastMsgType = MsgType::kReplicaCopy;
const char* MsgTypeName(MsgType t);

constexpr uint32_t kFlagSparse = 1u << 0;
// A fused dense message: several (table, element range) segments of one step in one
// message. count is the number of segments; frame 0 holds them (FusedSegment each);
// pushes carry all their values, concatenated in segment order, in frame 1, and pull
// replies return them the same way. header.table and header.offset are unused (0).
// With kFlagSparse as well: a fused sparse message (FusedSparseSegment below).
constexpr uint32_t kFlagFused = 1u << 1;

// Bits 2-3: the element type of the message's values (pack::WireType: 0 float32,
// 1 float16, 2 bfloat16; 3 is malformed). Requests carry their table's
// TableSpec::wire_dtype, replies echo it; value frames hold count x dim elements of that
// many bytes. Fused and peer-tensor messages are float32 only.
constexpr uint32_t kFlagWireShift = 2;
constexpr uint32_t kFlagWireMask = 3u << kFlagWireShift;
inline uint32_t WireFlags(uint8_t wire) {
  return (uint32_t{wire} << kFlagWireShift) & kFlagWireMask;
}

struct FusedSegment {
  uint32_t table = 0;
  uint32_t reserved = 0;
  uint64_t offset = 0;  // first element
  uint64_t count = 0;   // elements
};
static_assert(sizeof(FusedSegment) == 24, "a fused segment is 24 bytes on the wire");
constexpr uint64_t kMaxFusedSegments = 1u << 20;

// A fused sparse message (kFlagSparse | kFlagFused; Worker::PushSparseMany/PullSparseMany):
// the keys of several sparse tables for one server in one message. count is the number
// of segments (1..kMaxFusedSegments); table, offset and dim are 0. Frame 0 holds the
// segments (FusedSparseSegment each), frame 1 every segment's keys concatenated in
// segment order (u64 each), frame 2 (pushes) their rows, keys x dim float32 per segment,
// concatenated the same way; a pull reply returns the rows that way. Pushes and pulls
// only, float32 only.
struct FusedSparseSegment {
  uint32_t table = 0;
  uint32_t dim = 0;   // the table's row width (> 0)
  uint64_t keys = 0;  // keys of this table in frame 1
};
static_assert(sizeof(FusedSparseSegment) == 16, "a fused sparse segment is 16 bytes on the wire");

// Fixed-layout header (little-endian hosts only; checked at build time).
struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t sender = kUnassignedId;
  uint32_t table = kInvalidTable;
  uint64_t request_id = 0;
  uint32_t epoch = 0;  // the requester's cluster-map epoch (saturates at 2^32 - 1)
  // Requests on a bsp/ssp table: the worker's clock for that table, the number of pushes it
  // made to it before this one (push, pushpull: this push is step `clock`; pull: the
  // state after that many steps is wanted; a pushpull's pull wants clock + 1). Else 0.
  uint32_t clock = 0;
  uint64_t offset = 0;  // dense: first element; sparse: position of the first key in the request
  uint64_t count = 0;   // dense: elements; sparse: keys
  uint32_t dim = 0;     // sparse: row width; dense: 0
  int32_t status = 0;   // replies: ps::StatusCode
  uint32_t flags = 0;   // kFlagSparse
  uint32_t part = 0;    // requests: which part of the request this is; replies echo it

  MsgType msg_type() const { return static_cast<MsgType>(type); }
  bool sparse() const { return (flags & kFlagSparse) != 0; }
  bool fused() const { return (flags & kFlagFused) != 0; }
  // The wire element type (pack::WireType's value); 3 is malformed (ValidateDataFrames).
  uint8_t wire() const { return static_cast<uint8_t>((flags & kFlagWireMask) >> kFlagWireShift); }
};
static_assert(sizeof(Header) == 64, "the wire header is 64 bytes");
static_assert(offsetof(Header, epoch) == 24 && offsetof(Header, clock) == 28 &&
                  offsetof(Header, offset) == 32,
              "docs/wire-format.md: epoch at 24, clock at 28, offset at 32");
// A map epoch as the header carries it.
inline uint32_t WireEpoch(uint64_t epoch) {
  return epoch > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(epoch);
}

struct Message {
  Header header;
  std::vector<Frame> frames;  // payload frames (the header is not one of them)
  // Received messages: the routing id of the socket that sent it (set by the sender's
  // Connect). Unlike header.sender, which the sender writes, this is what the receiving
  // node authenticates senders by (docs/THREAT_MODEL.md).
  std::string identity;
  // Sent messages: the ordering lane (not on the wire). Two messages to one peer arrive
  // in the order sent when their lanes are equal; a transport with several streams per
  // peer (Options::streams) sends lane l on stream l % streams, so messages of different
  // lanes may overtake each other. 0: the first stream (control, fused, peer messages).
  uint32_t lane = 0;
};

// The first lane of a range of a table: a server's share of a dense table (`first`: its
// first element), or, with first 0, a sparse table. The k-th part of a dense share takes
// DataLane(table, first) + k, so that a tensor's parts spread evenly over the streams.
inline uint32_t DataLane(uint32_t table, uint64_t first) {
  uint64_t x = (uint64_t{table} << 40) ^ first;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Decodes and checks a received header frame: size, magic, version, type.
Status ParseHeader(const void* data, size_t size, Header* out);

// A control message from `sender` carrying `control`.
Message MakeControl(NodeId sender, const layerps::pb::Control& control);
// Parses frame 0 of a kControl message.
Status ParseControl(const Message& msg, layerps::pb::Control* out);

// Sends protobuf's own log lines (e.g. "String field ... contains invalid UTF-8 data",
// once per bad message a stranger sends) to glog at WARNING, at most one line every
// 10 s, with the count of those left out. Process-wide (protobuf has one handler) and
// idempotent; the scheduler and every node call it when they start.
void RouteProtobufLogs();

// Checks that a data message's frames agree with its header (counts, sizes, dims,
// type), before anything reads them. `max_elems` bounds count * max(dim, 1), and for a
// fused message the total of its segments' elements. For a fused reply the caller
// checks the values against what it asked for.
Status ValidateDataFrames(const Message& msg, uint64_t max_elems);

// The total elements of a fused message's segments (frame 0), overflow-checked against
// max_elems. Call after ValidateDataFrames.
StatusOr<uint64_t> FusedElements(const Message& msg, uint64_t max_elems);

// A fused sparse message's totals: its segments' keys and their rows' floats (keys x dim
// summed), each overflow-checked against max_elems. Checks frame 0's size and every
// segment's dim (> 0); call on a request, before or after ValidateDataFrames.
struct FusedSparseTotals {
  uint64_t keys = 0;
  uint64_t row_floats = 0;
};
StatusOr<FusedSparseTotals> FusedSparseSizes(const Message& msg, uint64_t max_elems);

}  // namespace ps

#endif  // PS_TRANSPORT_MESSAGE_H_
