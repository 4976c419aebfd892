// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RowIndex: the index of one stripe of a sparse table, from a key to its row number.
// Open addressing with linear probing on the bits of the key's mixed hash above the
// stripe bits, kept at most half full (it doubles before an insert would pass that), and
// backward-shift deletion (no tombstones: every key stays reachable from its home slot).
// Not thread-safe: the stripe's lock guards it (server/store.h).
#ifndef PS_SERVER_ROW_INDEX_H_
#define PS_SERVER_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/types.h"

namespace ps {

class RowIndex {
 public:
  static constexpr uint32_t kNoRow = 0xFFFFFFFFu;
  // The low bits of a key's mixed hash pick its stripe; the index probes with the rest.
  static constexpr unsigned kStripeBits = 4;
  // One slot; what a table's memory per row counts (Store::BoundedRowBytes: two slots).
  struct Slot {
    Key key = 0;
    uint32_t row = kNoRow;
  };

  // The row of `key` (h = MixKey(key)), or kNoRow. When absent, *slot (if given) is
  // where Insert may put it, valid until the index next changes.
  uint32_t Find(Key key, uint64_t h, size_t* slot = nullptr) const {
    if (slots_.empty()) {
      if (slot) *slot = kNoSlot;
      return kNoRow;
    }
    const size_t mask = slots_.size() - 1;
    size_t i = Home(h, mask);
    for (; slots_[i].row != kNoRow; i = (i + 1) & mask) {
      if (slots_[i].key == key) return slots_[i].row;
    }
    if (slot) *slot = i;
    return kNoRow;
  }
  // Adds key -> row (key absent; `slot` from Find, or kNoSlot). `live` is the number of
  // keys the index holds once this one is in: past half the slots, it doubles first.
  void Insert(Key key, uint64_t h, uint32_t row, size_t slot, size_t live);
  // Removes the key whose row is `row` (present; h = MixKey of its key).
  void Erase(uint64_t h, uint32_t row);
  // Hints the cache about the home slot of a key about to be looked up.
  void Prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(h, slots_.size() - 1)]);
  }
  // fn(key, row) for every key held, in slot order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.row != kNoRow) fn(s.key, s.row);
    }
  }
  size_t slots() const { return slots_.size(); }

  static constexpr size_t kNoSlot = ~size_t{0};

 private:
  static constexpr size_t kInitialSlots = 256;
  static size_t Home(uint64_t h, size_t mask) { return (h >> kStripeBits) & mask; }
  // Doubles the slots (the first call makes kInitialSlots), re-placing every key.
  void Grow();

  std::vector<Slot> slots_;  // a power of two, or empty
};

}  // namespace ps

#endif  // PS_SERVER_ROW_INDEX_H_
