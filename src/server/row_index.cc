// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/row_index.h"

#include "common/hash.h"

namespace ps {

void RowIndex::Grow() {
  std::vector<Slot> bigger(slots_.empty() ? kInitialSlots : slots_.size() * 2);
  const size_t mask = bigger.size() - 1;
  for (const Slot& old : slots_) {
    if (old.row == kNoRow) continue;
    size_t j = Home(MixKey(old.key), mask);
    while (bigger[j].row != kNoRow) j = (j + 1) & mask;
    bigger[j] = old;
  }
  slots_.swap(bigger);
}

void RowIndex::Insert(Key key, uint64_t h, uint32_t row, size_t slot, size_t live) {
  if (slots_.empty() || live * 2 > slots_.size()) {
    Grow();
    slot = kNoSlot;
  }
  if (slot == kNoSlot) {
    const size_t mask = slots_.size() - 1;
    slot = Home(h, mask);
    while (slots_[slot].row != kNoRow) slot = (slot + 1) & mask;
  }
  slots_[slot] = Slot{key, row};
}

void RowIndex::Erase(uint64_t h, uint32_t row) {
  const size_t mask = slots_.size() - 1;
  size_t i = Home(h, mask);
  while (slots_[i].row != row) i = (i + 1) & mask;
  // Close the gap: a later key of the cluster moves into it unless its home lies
  // cyclically in (i, j].
  for (size_t j = (i + 1) & mask; slots_[j].row != kNoRow; j = (j + 1) & mask) {
    const size_t home = Home(MixKey(slots_[j].key), mask);
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
}

}  // namespace ps
