// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/request.h"

#include <cstring>
#include <memory>
#include <string>

#include "common/wire_type.h"

namespace ps {
namespace {

// A table this server does not hold yet may come with a map it has not seen: worth a retry.
Status NotYet(const Store& store, TableId table, uint64_t request_epoch, uint64_t epoch,
              Status why) {
  if (!store.Has(table) && request_epoch > epoch) {
    return Unavailable("this server has not seen cluster map epoch " +
                       std::to_string(request_epoch) + " yet");
  }
  return why;
}

}  // namespace

Status CheckRequest(Message&& msg, const Store& store, uint64_t epoch, uint64_t max_elems,
                    DataRequest* out) {
  const Header& h = msg.header;
  const MsgType t = h.msg_type();
  if (t != MsgType::kPush && t != MsgType::kPull && t != MsgType::kPushPull &&
      t != MsgType::kAssign) {
    return ProtocolError(std::string("a ") + MsgTypeName(t) + " message is not a request");
  }
  PS_RETURN_IF_ERROR(ValidateDataFrames(msg, max_elems));
  out->header = h;
  out->pushes = t == MsgType::kPush || t == MsgType::kPushPull || t == MsgType::kAssign;
  out->pulls = t == MsgType::kPull || t == MsgType::kPushPull;
  out->op = t == MsgType::kAssign ? ApplyOp::kAssign : ApplyOp::kRule;
  if (h.fused()) {
    out->segments.resize(h.count);
    std::memcpy(out->segments.data(), msg.frames[0].data(),
                out->segments.size() * sizeof(FusedSegment));
    uint64_t total = 0;
    for (const FusedSegment& seg : out->segments) {
      Status c = store.CheckDense(seg.table, seg.offset, seg.count);
      if (!c.ok()) return NotYet(store, seg.table, h.epoch, epoch, c);
      total += seg.count;
    }
    out->fused_elements = total;
    for (const FusedSegment& seg : out->segments) {  // fused messages are float32 only
      const TableSpec* spec = store.Spec(seg.table);
      if (spec != nullptr && spec->wire_dtype != WireDType::kFloat32) {
        return InvalidArgument("table '" + spec->name + "' declares wire dtype " +
                               WireDTypeName(spec->wire_dtype) +
                               ": its values cannot travel in a fused float32 message");
      }
    }
  } else if (!store.Has(h.table)) {
    return NotYet(store, h.table, h.epoch, epoch,
                  NotFound("table " + std::to_string(h.table) + " is not held by this server"));
  } else {
    const TableSpec* spec = store.Spec(h.table);
    const auto declared = static_cast<uint8_t>(spec->wire_dtype);
    if (h.wire() != declared) {
      return InvalidArgument("table '" + spec->name + "' declares wire dtype " +
                             WireDTypeName(spec->wire_dtype) + ", the message carries " +
                             WireDTypeName(static_cast<WireDType>(h.wire())) +
                             " (nothing applied)");
    }
  }
  out->frames = std::move(msg.frames);
  // Narrowed pushed values are widened here, once: the sync policies and the store see
  // float32 only, and every update rule runs in float32.
  if (out->pushes && h.wire() != 0) {
    const size_t vi = h.sparse() ? 1 : 0;
    const uint64_t n = h.count * (h.sparse() ? uint64_t{h.dim} : 1);
    std::shared_ptr<float[]> wide(new float[n == 0 ? 1 : n]);
    pack::FromWire(out->frames[vi].data(), n, static_cast<pack::WireType>(h.wire()), wide.get());
    out->frames[vi] =
        Frame::Borrow(wide.get(), n * sizeof(float), std::shared_ptr<const void>(wide, wide.get()));
  }
  return Status::OK();
}

}  // namespace ps
