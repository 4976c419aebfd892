// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/request.h"

#include <cstring>
#include <string>

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
  PS_RETURN_IF_ERROR(ValidateDataFrames(msg, max_elems));
  out->header = h;
  const MsgType t = h.msg_type();
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
  } else if (!store.Has(h.table)) {
    return NotYet(store, h.table, h.epoch, epoch,
                  NotFound("table " + std::to_string(h.table) + " is not held by this server"));
  }
  out->frames = std::move(msg.frames);
  return Status::OK();
}

}  // namespace ps
