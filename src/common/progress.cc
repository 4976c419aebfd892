// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/progress.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdio>

namespace ps {

namespace {

std::string MiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

TransferProgress::TransferProgress(std::chrono::milliseconds every) : every_(every) {}

void TransferProgress::Start(const std::string& what, uint64_t total_bytes) {
  const Clock::time_point now = Clock::now();
  {
    MutexLock lock(&mu_);
    what_ = what;
    started_ = now;
    ended_ = now;
  }
  last_line_ = now;
  done_.store(0, std::memory_order_relaxed);
  total_.store(total_bytes, std::memory_order_relaxed);
  active_.store(true, std::memory_order_relaxed);
}

void TransferProgress::Add(uint64_t bytes) {
  done_.fetch_add(bytes, std::memory_order_relaxed);
  const Clock::time_point now = Clock::now();
  if (now - last_line_ < every_) return;
  last_line_ = now;
  LOG(INFO) << Line();
}

void TransferProgress::Finish(bool ok) {
  {
    MutexLock lock(&mu_);
    ended_ = Clock::now();
  }
  active_.store(false, std::memory_order_relaxed);
  // What it moved is the total now, estimated or not.
  total_.store(done(), std::memory_order_relaxed);
  finished_.fetch_add(1, std::memory_order_relaxed);
  std::string what;
  {
    MutexLock lock(&mu_);
    what = what_;
  }
  char tail[96];
  std::snprintf(tail, sizeof(tail), " in %.2f s (%s MiB/s)", Seconds(),
                MiB(static_cast<uint64_t>(rate())).c_str());
  LOG(INFO) << what << (ok ? ": done, " : ": stopped after ") << MiB(done()) << " MiB" << tail;
}

double TransferProgress::Seconds() const {
  MutexLock lock(&mu_);
  const Clock::time_point end = active() ? Clock::now() : ended_;
  return std::chrono::duration<double>(end - started_).count();
}

double TransferProgress::rate() const {
  const double s = Seconds();
  return s > 0 ? static_cast<double>(done()) / s : 0.0;
}

std::string TransferProgress::Line() const {
  std::string what;
  {
    MutexLock lock(&mu_);
    what = what_;
  }
  const uint64_t d = done(), t = total();
  std::string out = what + ": " + MiB(d);
  if (t > 0) {
    const uint64_t pct = std::min<uint64_t>(100, d * 100 / t);
    out += " of " + MiB(std::max(d, t)) + " MiB (" + std::to_string(pct) + "%)";
  } else {
    out += " MiB";
  }
  return out + " at " + MiB(static_cast<uint64_t>(rate())) + " MiB/s";
}

}  // namespace ps
