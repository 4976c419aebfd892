// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/row_cache.h"

#include <cstring>

#include "common/hash.h"

namespace ps {

void RowCache::Tick() {
  MutexLock lock(&mu_);
  ++clock_;
}

uint64_t RowCache::clock() const {
  MutexLock lock(&mu_);
  return clock_;
}

uint64_t RowCache::size() const {
  MutexLock lock(&mu_);
  return live_;
}

uint32_t RowCache::Find(Key key) const {
  if (index_.empty()) return kNone;
  const size_t mask = index_.size() - 1;
  for (size_t i = MixKey(key) & mask; index_[i] != kNone; i = (i + 1) & mask) {
    if (entries_[index_[i]].key == key) return index_[i];
  }
  return kNone;
}

void RowCache::Insert(uint32_t e) {
  if ((live_ + 1) * 2 > index_.size()) {
    std::vector<uint32_t> bigger(index_.empty() ? 1024 : index_.size() * 2, kNone);
    const size_t m = bigger.size() - 1;
    for (uint32_t old : index_) {
      if (old == kNone) continue;
      size_t j = MixKey(entries_[old].key) & m;
      while (bigger[j] != kNone) j = (j + 1) & m;
      bigger[j] = old;
    }
    index_.swap(bigger);
  }
  const size_t mask = index_.size() - 1;
  size_t i = MixKey(entries_[e].key) & mask;
  while (index_[i] != kNone) i = (i + 1) & mask;
  index_[i] = e;
  ++live_;
}

void RowCache::Unindex(uint32_t e) {
  const size_t mask = index_.size() - 1;
  size_t i = MixKey(entries_[e].key) & mask;
  while (index_[i] != e) i = (i + 1) & mask;
  // Backward-shift deletion: later entries of the run move into the gap unless their
  // home lies cyclically in (gap, their slot].
  for (size_t j = (i + 1) & mask; index_[j] != kNone; j = (j + 1) & mask) {
    const size_t home = MixKey(entries_[index_[j]].key) & mask;
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      index_[i] = index_[j];
      i = j;
    }
  }
  index_[i] = kNone;
  --live_;
}

void RowCache::Unlink(uint32_t e) {
  Entry& x = entries_[e];
  if (x.prev != kNone) entries_[x.prev].next = x.next; else head_ = x.next;
  if (x.next != kNone) entries_[x.next].prev = x.prev; else tail_ = x.prev;
  x.prev = x.next = kNone;
}

void RowCache::PushFront(uint32_t e) {
  Entry& x = entries_[e];
  x.prev = kNone;
  x.next = head_;
  if (head_ != kNone) entries_[head_].prev = e;
  head_ = e;
  if (tail_ == kNone) tail_ = e;
}

void RowCache::Remove(uint32_t e) {
  Unindex(e);
  Unlink(e);
  free_.push_back(e);
}

size_t RowCache::Get(const Key* keys, size_t n, float* out, std::vector<bool>* hit) {
  hit->assign(n, false);
  size_t hits = 0;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t e = Find(keys[i]);
    if (e == kNone) continue;
    if (clock_ - entries_[e].clock >= staleness_) {  // too old: fetched again
      Remove(e);
      continue;
    }
    std::memcpy(out + i * dim_, rows_.data() + size_t{e} * dim_, dim_ * sizeof(float));
    if (head_ != e) {
      Unlink(e);
      PushFront(e);
    }
    (*hit)[i] = true;
    ++hits;
  }
  return hits;
}

void RowCache::Put(const Key* keys, size_t n, const float* rows, uint64_t clock) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    uint32_t e = Find(keys[i]);
    if (e != kNone) {
      Unlink(e);
    } else {
      if (live_ >= capacity_) Remove(tail_);
      if (!free_.empty()) {
        e = free_.back();
        free_.pop_back();
      } else {
        e = static_cast<uint32_t>(entries_.size());
        entries_.emplace_back();
        rows_.resize(rows_.size() + dim_);
      }
      entries_[e].key = keys[i];
      Insert(e);
    }
    entries_[e].clock = clock;
    PushFront(e);
    std::memcpy(rows_.data() + size_t{e} * dim_, rows + i * dim_, dim_ * sizeof(float));
  }
}

void RowCache::Drop(const Key* keys, size_t n) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t e = Find(keys[i]);
    if (e != kNone) Remove(e);
  }
}

}  // namespace ps
