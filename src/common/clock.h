// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Clock: the time failure detection runs on. Heartbeats are sent and judged by it, and
// the scheduler's periodic work (deaths, the recovery and replacement windows, stall
// warnings, periodic checkpoints) reads it. Nodes use the steady clock (RealClock()). The
// in-process cluster tests may give their nodes a ManualClock instead (SetClock on their
// options, below): its time moves only when the test advances it, so a machine that is
// merely slow never makes a node look silent, and a test waits for a death by advancing
// the time instead of sleeping.
//
// The loops that act on this time (each node's heartbeat thread, the scheduler's loop)
// are its tickers: before each wait a ticker says up to which time it has done what was
// due (Ticker::WaitFor, Ticker::Done). ManualClock::Advance moves the time in steps and
// after each waits until every ticker has caught up, as a simulation's clock would.
//
// Thread-safety: every member may be called from any thread.
#ifndef PS_COMMON_CLOCK_H_
#define PS_COMMON_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "common/mutex.h"
#include "ps/options.h"

namespace ps {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() = 0;
  // Waits until pred() holds or this clock reads `deadline_ms`; pred()'s value at the
  // end. `mu` is held on entry and on return, as CondVar::WaitFor.
  virtual bool WaitUntil(Mutex* mu, CondVar* cv, int64_t deadline_ms,
                         const std::function<bool()>& pred) REQUIRES(mu) = 0;
  // True for a ManualClock: loops that poll with a real timeout poll briefly.
  virtual bool manual() const { return false; }

  // Tickers (no-ops but for a ManualClock): `ticker` has done what was due up to `t`.
  virtual void Register(const void* ticker) {}
  virtual void Unregister(const void* ticker) {}
  virtual void Done(const void* ticker, int64_t t) {}
};

// The steady clock (shared; never null).
std::shared_ptr<Clock> RealClock();

// The clock of a node with these options: the one SetClock gave, else RealClock().
std::shared_ptr<Clock> ClockOf(const CommonOptions& options);
// For the in-process cluster tests: every node made with these options runs on `clock`.
void SetClock(CommonOptions* options, std::shared_ptr<Clock> clock);

// A loop driven by a clock: registered for its life.
class Ticker {
 public:
  explicit Ticker(Clock* clock) : clock_(clock) { clock_->Register(this); }
  ~Ticker() { clock_->Unregister(this); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // Waits `ms` of the clock (or until pred() holds), done meanwhile up to the end of the
  // wait. One reading of the time for both: a clock advanced in between must not find
  // the ticker waiting past what it said it was done up to.
  bool WaitFor(Mutex* mu, CondVar* cv, int64_t ms, const std::function<bool()>& pred)
      REQUIRES(mu) {
    const int64_t deadline = clock_->NowMs() + ms;
    clock_->Done(this, deadline - 1);
    return clock_->WaitUntil(mu, cv, deadline, pred);
  }
  void Done(int64_t t) { clock_->Done(this, t); }

 private:
  Clock* const clock_;
};

// Time that moves only by Advance. Starts at 1 000 000 ms (never 0: "never seen").
class ManualClock : public Clock {
 public:
  // `step_ms`: Advance's step (tickers run at least once per step that makes them due).
  explicit ManualClock(int64_t step_ms = 10) : step_ms_(step_ms) {}

  int64_t NowMs() override { return now_.load(std::memory_order_acquire); }
  bool WaitUntil(Mutex* mu, CondVar* cv, int64_t deadline_ms,
                 const std::function<bool()>& pred) override REQUIRES(mu);
  bool manual() const override { return true; }
  void Register(const void* ticker) override;
  void Unregister(const void* ticker) override;
  void Done(const void* ticker, int64_t t) override;

  // Moves the time `ms` forward in steps; after each step waits (in real time, at most
  // 30 s, then logs and goes on) until every ticker has done what the step made due.
  void Advance(int64_t ms);

 private:
  bool Settled(int64_t t) REQUIRES(mu_);

  const int64_t step_ms_;
  std::atomic<int64_t> now_{1000000};
  Mutex mu_;
  CondVar cv_;
  std::map<const void*, int64_t> done_ GUARDED_BY(mu_);  // ticker -> done up to
};

}  // namespace ps

#endif  // PS_COMMON_CLOCK_H_
