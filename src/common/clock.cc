// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/clock.h"

#include <glog/logging.h>

#include <algorithm>
#include <thread>

namespace ps {

namespace {

class SteadyClock : public Clock {
 public:
  int64_t NowMs() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool WaitUntil(Mutex* mu, CondVar* cv, int64_t deadline_ms,
                 const std::function<bool()>& pred) override REQUIRES(mu) {
    return cv->WaitFor(mu, std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms - NowMs())),
                       pred);
  }
};

// How often a wait on a ManualClock looks at the time (real milliseconds).
constexpr auto kManualPoll = std::chrono::milliseconds(1);

}  // namespace

std::shared_ptr<Clock> RealClock() {
  static const std::shared_ptr<Clock> clock = std::make_shared<SteadyClock>();
  return clock;
}

struct ClockHook {
  static std::shared_ptr<Clock> Get(const CommonOptions& o) {
    return std::static_pointer_cast<Clock>(o.clock_);
  }
  static void Set(CommonOptions* o, std::shared_ptr<Clock> clock) { o->clock_ = std::move(clock); }
};

std::shared_ptr<Clock> ClockOf(const CommonOptions& options) {
  std::shared_ptr<Clock> c = ClockHook::Get(options);
  return c ? c : RealClock();
}

void SetClock(CommonOptions* options, std::shared_ptr<Clock> clock) {
  ClockHook::Set(options, std::move(clock));
}

bool ManualClock::WaitUntil(Mutex* mu, CondVar* cv, int64_t deadline,
                            const std::function<bool()>& pred) {
  for (;;) {
    if (pred()) return true;
    if (NowMs() >= deadline) return false;
    cv->WaitFor(mu, kManualPoll);  // woken by the waiter's own signals, or polls the time
  }
}

void ManualClock::Register(const void* ticker) {
  MutexLock lock(&mu_);
  done_[ticker] = 0;
}

void ManualClock::Unregister(const void* ticker) {
  MutexLock lock(&mu_);
  done_.erase(ticker);
  cv_.SignalAll();
}

void ManualClock::Done(const void* ticker, int64_t t) {
  MutexLock lock(&mu_);
  auto it = done_.find(ticker);
  if (it == done_.end() || t <= it->second) return;
  it->second = t;
  cv_.SignalAll();
}

bool ManualClock::Settled(int64_t t) {
  for (const auto& kv : done_) {
    if (kv.second < t) return false;
  }
  return true;
}

void ManualClock::Advance(int64_t ms) {
  const int64_t target = NowMs() + ms;
  while (NowMs() < target) {
    const int64_t t = std::min(target, NowMs() + step_ms_);
    now_.store(t, std::memory_order_release);
    MutexLock lock(&mu_);
    if (!cv_.WaitFor(&mu_, std::chrono::seconds(30), [&]() REQUIRES(mu_) { return Settled(t); })) {
      std::string behind;
      for (const auto& kv : done_) {
        if (kv.second < t) behind += " " + std::to_string(kv.second);
      }
      LOG(WARNING) << "ManualClock: tickers did not catch up with " << t
                   << " ms within 30 s (done up to:" << behind << ")";
    }
  }
}

}  // namespace ps
