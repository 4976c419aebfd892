// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The apply-on-arrival policy: every push is applied to the store when it arrives, and
// every pull reads what the store holds then (ASP).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "server/sync_policy.h"

namespace ps {
namespace {

class ApplyOnArrival final : public SyncPolicy {
 public:
  void Handle(DataRequest&& req, Store& store, const ReplyFn& reply) override {
    const Header& h = req.header;
    if (h.fused()) {
      HandleFused(req, store, reply);
      return;
    }
    Status s;
    std::vector<Frame> out;
    if (h.sparse()) {
      const Key* keys = reinterpret_cast<const Key*>(req.frames[0].data());
      if (req.pushes) {
        const float* rows = reinterpret_cast<const float*>(req.frames[1].data());
        s = store.ApplySparse(h.table, keys, h.count, h.dim, rows, req.op);
      }
      if (s.ok() && req.pulls) {  // into a recycled, already faulted-in buffer
        Frame values;
        s = store.ReadSparseFrame(h.table, keys, h.count, h.dim, &values);
        out.push_back(std::move(values));
      }
    } else {
      if (req.pushes) {
        const float* values = reinterpret_cast<const float*>(req.frames[0].data());
        s = store.ApplyDense(h.table, h.offset, h.count, values, req.op);
      }
      if (s.ok() && req.pulls) {  // into a recycled, already faulted-in buffer
        Frame values;
        s = store.ReadDenseFrame(h.table, h.offset, h.count, &values);
        out.push_back(std::move(values));
      }
    }
    reply(h, s, std::move(out));
  }

 private:
  // Every segment was checked by CheckRequest before anything is applied.
  static void HandleFused(const DataRequest& req, Store& store, const ReplyFn& reply) {
    Status s;
    if (req.pushes) {
      const uint8_t* v = req.frames[1].data();
      uint64_t at = 0;
      std::vector<float> aligned;
      for (const FusedSegment& seg : req.segments) {
        const float* src = reinterpret_cast<const float*>(v + at * sizeof(float));
        if (reinterpret_cast<uintptr_t>(src) % alignof(float) != 0) {
          aligned.assign(seg.count, 0.0f);
          std::memcpy(aligned.data(), src, seg.count * sizeof(float));
          src = aligned.data();
        }
        s = store.ApplyDense(seg.table, seg.offset, seg.count, src, req.op);
        if (!s.ok()) break;
        at += seg.count;
      }
    }
    std::vector<Frame> out;
    if (s.ok() && req.pulls) {
      const uint64_t total = req.fused_elements;
      std::shared_ptr<float[]> values(new float[total == 0 ? 1 : total]);
      uint64_t at = 0;
      for (const FusedSegment& seg : req.segments) {
        s = store.ReadDense(seg.table, seg.offset, seg.count, values.get() + at);
        if (!s.ok()) break;
        at += seg.count;
      }
      out.push_back(Frame::Borrow(values.get(), total * sizeof(float),
                                  std::shared_ptr<const void>(values, values.get())));
    }
    reply(req.header, s, std::move(out));
  }
};

}  // namespace

std::unique_ptr<SyncPolicy> NewApplyOnArrival() { return std::make_unique<ApplyOnArrival>(); }

}  // namespace ps
