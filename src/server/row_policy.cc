// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/row_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ps {

uint32_t RowPolicy::Allocate(bool* fresh) {
  *fresh = free_.empty();
  if (!*fresh) {
    const uint32_t row = free_.back();
    free_.pop_back();
    return row;
  }
  meta_.emplace_back();
  return static_cast<uint32_t>(meta_.size() - 1);
}

void RowPolicy::Add(uint32_t row, Key key, uint64_t step, uint64_t table_step, int64_t now_ms,
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

void RowPolicy::Touch(uint32_t row, uint64_t step, int64_t now_ms) {
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

void RowPolicy::Remove(uint32_t row) {
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

// The heap's order, as a lambda: GCC inlines it into the sift loops (a member function it
// did not, and BM_SparseBoundedSum's lfu case ran 12-20% slower for it).
auto RowPolicy::HeapLess() const {
  return [meta = meta_.data(), by_score = by_score_](uint32_t x, uint32_t y) {
    const RowMeta& mx = meta[x];
    const RowMeta& my = meta[y];
    if (by_score) return mx.score != my.score ? mx.score < my.score : mx.tick < my.tick;
    return mx.touches != my.touches ? mx.touches < my.touches : mx.tick < my.tick;
  };
}

void RowPolicy::SiftUp(uint32_t pos) {
  const auto less = HeapLess();
  const uint32_t row = heap_[pos];
  while (pos > 0) {
    const uint32_t parent = (pos - 1) / 2;
    if (!less(row, heap_[parent])) break;
    heap_[pos] = heap_[parent];
    meta_[heap_[pos]].prev = pos;
    pos = parent;
  }
  heap_[pos] = row;
  meta_[row].prev = pos;
}

void RowPolicy::SiftDown(uint32_t pos) {
  const auto less = HeapLess();
  const uint32_t row = heap_[pos];
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * size_t{pos} + 1;
    if (child >= n) break;
    if (child + 1 < n && less(heap_[child + 1], heap_[child])) ++child;
    if (!less(heap_[child], row)) break;
    heap_[pos] = heap_[child];
    meta_[heap_[pos]].prev = pos;
    pos = static_cast<uint32_t>(child);
  }
  heap_[pos] = row;
  meta_[row].prev = pos;
}

}  // namespace ps
