// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Admission of new ids into a bounded sparse table (docs/sparse.md, "Admission"): by a
// seeded probability (a fixed hash of the table's seed and name and the id, so an id is
// always admitted or never), and/or after `admit_after` pushes, counted in a count-min
// sketch with conservative update that halves its counters every width / 8 sightings
// (it keeps telling recent ids apart however long the stream).
#ifndef PS_SERVER_ADMISSION_H_
#define PS_SERVER_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/types.h"

namespace ps {

// One stripe's sketch (guarded by the stripe's lock).
class AdmissionSketch {
 public:
  static constexpr size_t kDepth = 4;
  // `width` counters per row (a power of two; 0: no sketch).
  explicit AdmissionSketch(size_t width = 0) : width_(width), counters_(kDepth * width, 0) {}
  // Counts one sighting of the id with mixed hash h; returns its estimated count since
  // the counters last halved (saturating at 65535), this sighting included.
  uint16_t Count(uint64_t h);

 private:
  size_t width_;
  std::vector<uint16_t> counters_;
  uint64_t sightings_ = 0;  // since the last halving
};

// A table's admission rule (fixed at install).
class Admission {
 public:
  // The sketch of every server and table: kSketchCounters 16-bit counters per row, 4 MiB,
  // split evenly over the table's stripes. At most ~1/8 as many distinct ids as counters
  // are counted between halvings, so an id seen once is admitted by mistake with
  // probability about (1 - e^(-4/8))^4 ~ 2.4% at worst (just before a halving).
  static constexpr size_t kSketchCounters = size_t{1} << 19;

  Admission() = default;
  Admission(const TableSpec& spec, uint64_t name_hash, size_t stripes);
  // Whether new ids pass through admission at all (else every id is admitted).
  bool enabled() const { return by_probability_ || after_ > 1; }
  // A stripe's sketch for this rule (empty when admit_after <= 1).
  AdmissionSketch NewSketch() const { return AdmissionSketch(after_ > 1 ? sketch_width_ : 0); }
  // Counts a push of the absent id `key` (h = MixKey(key)); true when it may get a row.
  bool Admit(Key key, uint64_t h, AdmissionSketch* sketch) const;

 private:
  bool by_probability_ = false;
  uint64_t threshold_ = 0;  // admit_probability as a threshold on a 64-bit hash
  uint64_t seed_ = 0;
  uint32_t after_ = 0;      // admit_after
  size_t sketch_width_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_ADMISSION_H_
