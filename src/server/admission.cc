// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/admission.h"

#include <algorithm>
#include <cmath>

#include "common/hash.h"

namespace ps {

uint16_t AdmissionSketch::Count(uint64_t h) {
  size_t at[kDepth];
  uint16_t least = 0xFFFF;
  for (size_t d = 0; d < kDepth; ++d) {
    at[d] = d * width_ + (MixKey(h + 0x9E3779B97F4A7C15ull * (d + 1)) & (width_ - 1));
    least = std::min(least, counters_[at[d]]);
  }
  // Conservative update: only the counters at the minimum grow.
  if (least < 0xFFFF) {
    for (size_t d = 0; d < kDepth; ++d) {
      if (counters_[at[d]] == least) ++counters_[at[d]];
    }
    ++least;
  }
  if (++sightings_ >= width_ / 8) {
    for (uint16_t& c : counters_) c >>= 1;
    sightings_ = 0;
  }
  return least;
}

Admission::Admission(const TableSpec& spec, uint64_t name_hash, size_t stripes) {
  if (spec.admit_probability < 1.0f) {
    by_probability_ = true;
    threshold_ = static_cast<uint64_t>(std::ldexp(double{spec.admit_probability}, 64));
  }
  after_ = spec.admit_after;
  sketch_width_ = kSketchCounters / stripes;
  seed_ = MixKey(name_hash ^ MixKey(spec.seed) ^ 0x61646d6974ull);  // "admit"
}

bool Admission::Admit(Key key, uint64_t h, AdmissionSketch* sketch) const {
  if (by_probability_ && MixKey(seed_ ^ MixKey(key)) >= threshold_) return false;
  if (after_ <= 1) return true;
  return sketch->Count(h) >= after_;
}

}  // namespace ps
