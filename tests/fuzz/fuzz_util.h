// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Shared by the libFuzzer harnesses of tests/fuzz: quiet logging, and the byte layout
// that turns a fuzzer input into a received message (what a transport would hand over).
#ifndef PS_TESTS_FUZZ_FUZZ_UTIL_H_
#define PS_TESTS_FUZZ_FUZZ_UTIL_H_

#include <glog/logging.h>
#include <google/protobuf/stubs/common.h>
#if GOOGLE_PROTOBUF_VERSION < 4022000
#include <google/protobuf/stubs/logging.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/buffer.h"
#include "transport/message.h"

namespace ps {
namespace fuzz {

// Rejected input is expected: keep glog and protobuf quiet (they would dominate the run).
inline void QuietLogs() {
  FLAGS_minloglevel = 3;
  FLAGS_logtostderr = true;
#if GOOGLE_PROTOBUF_VERSION < 4022000
  google::protobuf::SetLogHandler(nullptr);
#endif
}

// A property that must hold for every input: a violation is a crash libFuzzer reports.
#define FUZZ_ASSERT(cond) \
  do {                    \
    if (!(cond)) {        \
      __builtin_trap();   \
    }                     \
  } while (0)

// Input layout of a received data message: the header part (the first 64 bytes, or all
// of the input when shorter), then payload frames, each as a 4-byte little-endian length
// and that many bytes (a length past the end takes what is left). At most kMaxFrames + 2
// frames are read, so messages with too many frames are tried too. Returns false when
// ParseHeader refuses the header (`msg` then holds no header).
inline bool SplitMessage(const uint8_t* data, size_t size, Message* msg, Status* header_status) {
  const size_t head = size < sizeof(Header) ? size : sizeof(Header);
  *header_status = ParseHeader(data, head, &msg->header);
  size_t at = head;
  while (at + 4 <= size && msg->frames.size() < kMaxFrames + 2) {
    uint32_t len;
    std::memcpy(&len, data + at, 4);
    at += 4;
    const size_t n = len < size - at ? len : size - at;
    // A copy of its own, so reading past a frame is an out-of-bounds access ASan sees.
    msg->frames.push_back(Frame::Copy(data + at, n));
    at += n;
  }
  return header_status->ok();
}

}  // namespace fuzz
}  // namespace ps

#endif  // PS_TESTS_FUZZ_FUZZ_UTIL_H_
