// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The apply-on-arrival policy: every push is applied to the store when it arrives, and
// every pull reads what the store holds then (ASP). A pushpull on an elastic table (the
// EASGD centre) reads before it applies: the worker gets the centre its parameters were
// averaged with, and the exchange is one round trip, atomic on this range.
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
    if (h.fused() && h.sparse()) {
      HandleFusedSparse(req, store, reply);
      return;
    }
    if (h.fused()) {
      HandleFused(req, store, reply);
      return;
    }
    Status s;
    std::vector<Frame> out;
    const bool read_first = req.pushes && req.pulls && Elastic(store, h.table);
    if (h.sparse()) {
      const Key* keys = reinterpret_cast<const Key*>(req.frames[0].data());
      auto read = [&] {  // into a recycled, already faulted-in buffer
        Frame values;
        s = store.ReadSparseFrame(h.table, keys, h.count, h.dim, &values);
        out.push_back(std::move(values));
      };
      if (read_first) read();
      if (s.ok() && req.pushes) {
        const float* rows = reinterpret_cast<const float*>(req.frames[1].data());
        s = store.ApplySparse(h.table, keys, h.count, h.dim, rows, req.op);
      }
      if (s.ok() && req.pulls && !read_first) read();
    } else {
      // A read of the whole range lends the range itself; an update after it writes a
      // fresh buffer (copy on write), so a read-first reply keeps the values before.
      auto read = [&] {
        Frame values;
        s = store.ReadDenseFrame(h.table, h.offset, h.count, &values);
        out.push_back(std::move(values));
      };
      if (read_first) read();
      if (s.ok() && req.pushes) {
        const float* values = reinterpret_cast<const float*>(req.frames[0].data());
        s = store.ApplyDense(h.table, h.offset, h.count, values, req.op);
      }
      if (s.ok() && req.pulls && !read_first) read();
    }
    reply(h, s, std::move(out));
  }

 private:
  static bool Elastic(const Store& store, TableId table) {
    const TableSpec* spec = store.Spec(table);
    return spec != nullptr && spec->rule == UpdateRule::kElastic;
  }

  // A fused sparse push or pull (CheckRequest checked every segment, and aligned the
  // frames): each segment goes through the store exactly as a single-table request of its
  // keys would (bounded tables, admission, expiry and the cold tier included), in segment
  // order; a pull reply carries every segment's rows concatenated in that order.
  static void HandleFusedSparse(const DataRequest& req, Store& store, const ReplyFn& reply) {
    Status s;
    const Key* keys = reinterpret_cast<const Key*>(req.frames[1].data());
    std::vector<Frame> out;
    if (req.pushes) {
      const float* rows = reinterpret_cast<const float*>(req.frames[2].data());
      for (const FusedSparseSegment& seg : req.sparse_segments) {
        s = store.ApplySparse(seg.table, keys, seg.keys, seg.dim, rows, req.op);
        if (!s.ok()) break;
        keys += seg.keys;
        rows += seg.keys * seg.dim;
      }
    } else {
      std::shared_ptr<float[]> values(new float[req.fused_elements == 0 ? 1 : req.fused_elements]);
      float* at = values.get();
      for (const FusedSparseSegment& seg : req.sparse_segments) {
        s = store.ReadSparse(seg.table, keys, seg.keys, seg.dim, at);
        if (!s.ok()) break;
        keys += seg.keys;
        at += seg.keys * seg.dim;
      }
      if (s.ok()) {
        out.push_back(Frame::Borrow(values.get(), req.fused_elements * sizeof(float),
                                    std::shared_ptr<const void>(values, values.get())));
      }
    }
    reply(req.header, s, std::move(out));
  }

  // Every segment was checked by CheckRequest before anything is applied. Segments of
  // elastic tables are read before the pushes, the others after.
  static void HandleFused(const DataRequest& req, Store& store, const ReplyFn& reply) {
    Status s;
    const bool exchange = req.pushes && req.pulls;
    std::shared_ptr<float[]> values;
    if (req.pulls) values.reset(new float[req.fused_elements == 0 ? 1 : req.fused_elements]);
    auto read = [&](bool elastic) {
      uint64_t at = 0;
      for (const FusedSegment& seg : req.segments) {
        if (s.ok() && (exchange && Elastic(store, seg.table)) == elastic) {
          s = store.ReadDense(seg.table, seg.offset, seg.count, values.get() + at);
        }
        at += seg.count;
      }
    };
    if (exchange) read(/*elastic=*/true);
    if (s.ok() && req.pushes) {
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
      read(/*elastic=*/false);
      out.push_back(Frame::Borrow(values.get(), req.fused_elements * sizeof(float),
                                  std::shared_ptr<const void>(values, values.get())));
    }
    reply(req.header, s, std::move(out));
  }
};

}  // namespace

std::unique_ptr<SyncPolicy> NewApplyOnArrival() { return std::make_unique<ApplyOnArrival>(); }

}  // namespace ps
