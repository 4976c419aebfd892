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
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// Add, Touch and Remove run once per key of a request: defined here so that they inline
// into the store's loops (out of line, BM_SparseBoundedSum's lru case ran ~8% slower).
inline void RowPolicy::Add(uint32_t row, Key key, uint64_t step, uint64_t table_step, int64_t now_ms,
                    bool scored) {
  RowMeta& m = meta_[row];
  m = RowMeta{};
  m.key = key;
  m.tick = ++clock_;
  if (eviction_ == Eviction::kLru) {
    m.next = head_;
    if (head_ != kNoRow) meta_[head_].prev = row;
    head_ = row;
    if (tail_ == kNoRow) tail_ = row;
  } else if (heap_order_) {
    m.touches = 1;
    if (by_score_) {
      m.score = scored ? static_cast<double>(step > 0 ? step : table_step) * decay_log_
                       : -std::numeric_limits<double>::infinity();
    }
    heap_.push_back(row);
    SiftUp(static_cast<uint32_t>(heap_.size() - 1));
  }
  if (expiry_) {
    m.step = step > 0 ? step : table_step;
    m.update_ms = now_ms;
    m.up_next = up_head_;
    if (up_head_ != kNoRow) meta_[up_head_].up_prev = row;
    up_head_ = row;
    if (up_tail_ == kNoRow) up_tail_ = row;
  }
}

inline void RowPolicy::Touch(uint32_t row, uint64_t step, int64_t now_ms) {
  RowMeta& m = meta_[row];
  m.tick = ++clock_;
  if (eviction_ == Eviction::kLru && head_ != row) {
    // Unlink, then in front.
    meta_[m.prev].next = m.next;
    if (m.next != kNoRow)
      meta_[m.next].prev = m.prev;
    else
      tail_ = m.prev;
    m.prev = kNoRow;
    m.next = head_;
    meta_[head_].prev = row;
    head_ = row;
  } else if (heap_order_) {
    if (m.touches != 0xFFFFFFFFu) ++m.touches;
    if (by_score_ && step > 0) {
      // score = score * decay^(steps since its last push) + 1, in the log form above.
      const double at = static_cast<double>(step) * decay_log_;
      m.score = std::log(std::exp(m.score - at) + 1.0) + at;
    }
    SiftDown(m.prev);  // the key only grows (score, tick)
  }
  if (expiry_ && step > 0) {
    m.step = std::max(m.step, step);
    m.update_ms = std::max(m.update_ms, now_ms);
    if (up_head_ != row) {
      meta_[m.up_prev].up_next = m.up_next;
      if (m.up_next != kNoRow)
        meta_[m.up_next].up_prev = m.up_prev;
      else
        up_tail_ = m.up_prev;
      m.up_prev = kNoRow;
      m.up_next = up_head_;
      meta_[up_head_].up_prev = row;
      up_head_ = row;
    }
  }
}

inline void RowPolicy::Remove(uint32_t row) {
  RowMeta& m = meta_[row];
  if (eviction_ == Eviction::kLru) {
    if (m.prev != kNoRow)
      meta_[m.prev].next = m.next;
    else
      head_ = m.next;
    if (m.next != kNoRow)
      meta_[m.next].prev = m.prev;
    else
      tail_ = m.prev;
  } else if (heap_order_) {
    const uint32_t pos = m.prev;
    const uint32_t last = heap_.back();
    heap_.pop_back();
    if (pos < heap_.size()) {
      heap_[pos] = last;
      meta_[last].prev = pos;
      SiftUp(pos);
      SiftDown(meta_[last].prev);
    }
  }
  if (expiry_) {
    if (m.up_prev != kNoRow)
      meta_[m.up_prev].up_next = m.up_next;
    else
      up_head_ = m.up_next;
    if (m.up_next != kNoRow)
      meta_[m.up_next].up_prev = m.up_prev;
    else
      up_tail_ = m.up_prev;
  }
  m = RowMeta{};
  free_.push_back(row);
}

}  // namespace ps

#endif  // PS_SERVER_ROW_POLICY_H_
