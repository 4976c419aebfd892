// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TransferProgress: how far a long transfer has come (a checkpoint being written, a
// server's store copied to its backup), reported while it runs: an INFO line at most once
// per interval, e.g.
//   checkpoint set 7 (server rank 0): 120.0 of 400.0 MiB (30%) at 95.3 MiB/s
// and counters that a metrics scrape reads from another thread (done, total, active,
// rate). The total is an estimate given at Start (0: unknown); a transfer that moves more
// than estimated reports what it moved.
//
// Thread-safety: one thread calls Start, Add and Finish; any thread may read.
#ifndef PS_COMMON_PROGRESS_H_
#define PS_COMMON_PROGRESS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/mutex.h"

namespace ps {

class TransferProgress {
 public:
  // `every`: the least time between two INFO lines while it runs (0: a line per Add, for
  // tests).
  explicit TransferProgress(std::chrono::milliseconds every = std::chrono::milliseconds(2000));

  // A new transfer named `what` ("checkpoint set 7 (server rank 0)") of about
  // `total_bytes` (0: unknown) begins; the counters restart.
  void Start(const std::string& what, uint64_t total_bytes);
  // `bytes` more moved; logs a line when the interval has passed since the last.
  void Add(uint64_t bytes);
  // The transfer ended (ok or not): a closing line with the bytes, the time and the rate.
  void Finish(bool ok);

  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }
  bool active() const { return active_.load(std::memory_order_relaxed); }
  // Transfers finished since construction.
  uint64_t finished() const { return finished_.load(std::memory_order_relaxed); }
  // Bytes per second since Start (of the last transfer, once finished).
  double rate() const;
  // The progress line as it would be logged now.
  std::string Line() const;

 private:
  using Clock = std::chrono::steady_clock;
  double Seconds() const;

  const std::chrono::milliseconds every_;
  mutable Mutex mu_;
  std::string what_ GUARDED_BY(mu_);
  Clock::time_point started_ GUARDED_BY(mu_);
  Clock::time_point ended_ GUARDED_BY(mu_);
  Clock::time_point last_line_;  // the transferring thread's only
  std::atomic<uint64_t> done_{0}, total_{0}, finished_{0};
  std::atomic<bool> active_{false};
};

}  // namespace ps

#endif  // PS_COMMON_PROGRESS_H_
