// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RowPolicy: what one stripe of a bounded sparse table keeps per row to decide which row
// leaves (docs/sparse.md): the eviction order (an LRU list, or a min-heap on (touches,
// tick) for lfu or on the decayed push score for "decayed"), the update list that expiry
// walks from its oldest end, and the row numbers dropped rows left for reuse. It knows
// row numbers and keys only; the rows' values, the index and the counters are the store's.
// Not thread-safe: the stripe's lock guards it.
#ifndef PS_SERVER_ROW_POLICY_H_
#define PS_SERVER_ROW_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/types.h"

namespace ps {

// Per-row metadata. Links are row numbers (kNoRow: none).
struct RowMeta {
  static constexpr uint32_t kNoRow = 0xFFFFFFFFu;
  Key key = 0;
  uint32_t prev = kNoRow;                       // LRU list (head: most recent), or the
                                                // position in the heap (lfu, decayed)
  uint32_t up_prev = kNoRow, up_next = kNoRow;  // update list (head: latest push)
  union {                                       // one policy's field (56 bytes in all)
    uint32_t next = kNoRow;                     // lru: the next row in the list
    uint32_t touches;                           // lfu: touches (saturating)
  };
  uint64_t tick = 0;                            // the stripe's clock at the last touch
  uint64_t step = 0;                            // the table's push step of the last update
  int64_t update_ms = 0;                        // the store's clock then (expiry_seconds)
  // Eviction "decayed": ln(score) + step * ln(1 / score_decay) at the last push, so that
  // rows order by their current score whatever step they were last pushed at.
  double score = 0;
};
static_assert(sizeof(RowMeta) == 56, "docs/sparse.md: 56 bytes of metadata per row");

class RowPolicy {
 public:
  static constexpr uint32_t kNoRow = RowMeta::kNoRow;

  // eviction: kNone, kLru, kLfu or kDecayed (decay_log = ln(1 / score_decay)); expiry:
  // whether rows are kept in update order.
  RowPolicy(Eviction eviction, bool expiry, double decay_log)
      : eviction_(eviction),
        heap_order_(eviction == Eviction::kLfu || eviction == Eviction::kDecayed),
        by_score_(eviction == Eviction::kDecayed),
        expiry_(expiry),
        decay_log_(decay_log) {}

  // Rows numbered so far (dropped ones included) and rows live.
  size_t numbered() const { return meta_.size(); }
  size_t live() const { return meta_.size() - free_.size(); }
  // The row eviction takes next (live() > 0; an eviction policy is set).
  uint32_t Victim() const { return eviction_ == Eviction::kLru ? tail_ : heap_[0]; }
  // The row updated longest ago (expiry), or kNoRow.
  uint32_t Oldest() const { return up_tail_; }
  const RowMeta& meta(uint32_t row) const { return meta_[row]; }

  // A number for a new row: a dropped row's, else numbered() (then *fresh = true and the
  // caller makes room for its values).
  uint32_t Allocate(bool* fresh);
  // Links a new row. step: the push that creates it (0: a pull or a restore), table_step
  // the table's clock now; now_ms the store's clock (expiry_seconds); scored: whether its
  // decayed score starts at 1 (a push or a restore) rather than 0 (a pull).
  void Add(uint32_t row, Key key, uint64_t step, uint64_t table_step, int64_t now_ms, bool scored);
  // Marks a touch of a live row: most recent (lru), one more touch (lfu), and for a push
  // (step > 0) its score (decayed) and its place in the update list (expiry).
  void Touch(uint32_t row, uint64_t step, int64_t now_ms);
  // Unlinks a live row; its number goes to the free list.
  void Remove(uint32_t row);

 private:
  auto HeapLess() const;  // (touches, tick) or (score, tick): the heap's "less"
  void SiftUp(uint32_t pos);
  void SiftDown(uint32_t pos);

  const Eviction eviction_;
  const bool heap_order_;  // lfu or decayed: the heap, else (lru) the list
  const bool by_score_;    // the heap orders by score (decayed), not touches (lfu)
  const bool expiry_;
  const double decay_log_;
  std::vector<RowMeta> meta_;                    // by row number
  std::vector<uint32_t> free_;                   // numbers of dropped rows, reused first
  uint32_t head_ = kNoRow, tail_ = kNoRow;       // LRU list
  uint32_t up_head_ = kNoRow, up_tail_ = kNoRow;  // update list (expiry)
  std::vector<uint32_t> heap_;                   // lfu, decayed: min-heap of rows
  uint64_t clock_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_ROW_POLICY_H_
