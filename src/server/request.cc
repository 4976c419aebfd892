// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/request.h"

#include <cstdint>
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

// A frame whose bytes start at a multiple of `align`: itself, or an aligned copy. The
// transports hand frames over aligned; this keeps the store's typed reads defined whatever
// the frame's origin.
Frame Aligned(Frame f, size_t align) {
  if (reinterpret_cast<uintptr_t>(f.data()) % align == 0) return f;
  std::shared_ptr<uint64_t[]> copy(new uint64_t[f.size() / sizeof(uint64_t) + 1]);
  std::memcpy(copy.get(), f.data(), f.size());
  return Frame::Borrow(copy.get(), f.size(), std::shared_ptr<const void>(copy, copy.get()));
}

// Every segment of a fused sparse request: a sparse table this server holds, float32 on
// the wire, its dim, every key in a range held. Keys need not be unique within a segment
// (as in a single-table request, duplicates apply in order); a worker sends them unique.
Status CheckFusedSparse(const Message& msg, const Store& store, uint64_t epoch, uint64_t max_elems,
                        DataRequest* out) {
  const Header& h = msg.header;
  StatusOr<FusedSparseTotals> total = FusedSparseSizes(msg, max_elems);
  if (!total.ok()) return total.status();
  out->sparse_segments.resize(h.count);
  std::memcpy(out->sparse_segments.data(), msg.frames[0].data(),
              out->sparse_segments.size() * sizeof(FusedSparseSegment));
  out->fused_elements = total->row_floats;
  const Key* keys = reinterpret_cast<const Key*>(msg.frames[1].data());
  for (size_t i = 0; i < out->sparse_segments.size(); ++i) {
    const FusedSparseSegment& seg = out->sparse_segments[i];
    const std::string where = "fused sparse segment " + std::to_string(i);
    const TableSpec* spec = store.Spec(seg.table);
    if (spec == nullptr) {
      return NotYet(store, seg.table, h.epoch, epoch,
                    NotFound(where + ": table " + std::to_string(seg.table) +
                             " is not held by this server (nothing applied)"));
    }
    if (spec->wire_dtype != WireDType::kFloat32) {
      return InvalidArgument(
          where + ": table '" + spec->name + "' declares wire dtype " +
          WireDTypeName(spec->wire_dtype) +
          ": its rows cannot travel in a fused float32 message (nothing applied)");
    }
    Status c = store.CheckSparse(seg.table, keys, seg.keys, seg.dim);
    if (!c.ok()) return c.WithContext(where + " (nothing applied)");
    keys += seg.keys;
  }
  return Status::OK();
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
  if (h.fused() && h.sparse()) {
    msg.frames[1] = Aligned(std::move(msg.frames[1]), alignof(Key));
    if (out->pushes) msg.frames[2] = Aligned(std::move(msg.frames[2]), alignof(float));
    PS_RETURN_IF_ERROR(CheckFusedSparse(msg, store, epoch, max_elems, out));
  } else if (h.fused()) {
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
