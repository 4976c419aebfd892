// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A data request as a server sees it after the checks every request passes, single or
// fused (CheckRequest): frames agree with the header, the tables are installed, every
// fused dense segment is a range this server holds, and every fused sparse segment names
// a sparse table of its dim whose keys all route to ranges this server holds. Nothing is
// applied before all of a request's checks passed, so a bad fused request changes nothing.
#ifndef PS_SERVER_REQUEST_H_
#define PS_SERVER_REQUEST_H_

#include <cstdint>
#include <vector>

#include "server/store.h"
#include "transport/message.h"

namespace ps {

struct DataRequest {
  Header header;
  std::vector<Frame> frames;
  std::vector<FusedSegment> segments;  // fused requests: copied out (frames need not be aligned)
  uint64_t fused_elements = 0;         // fused requests: the segments' total (sparse: row floats)
  // Fused sparse requests: the segments, copied out. Their keys (frame 1) and rows
  // (frame 2) frames are aligned for u64 and float access by CheckRequest.
  std::vector<FusedSparseSegment> sparse_segments;
  bool pushes = false;                 // push, pushpull, assign
  bool pulls = false;                  // pull, pushpull
  ApplyOp op = ApplyOp::kRule;
};

// Checks `msg` against the store (installed up to map epoch `epoch`) and moves it into
// *out. Errors are what the requester should be told: kUnavailable when the request comes
// from a newer map epoch than this server has seen (retry), else the reason.
Status CheckRequest(Message&& msg, const Store& store, uint64_t epoch, uint64_t max_elems,
                    DataRequest* out);

}  // namespace ps

#endif  // PS_SERVER_REQUEST_H_
