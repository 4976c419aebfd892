// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/completion_thread.h"

namespace ps {

void CompletionThread::Start() {
  MutexLock lock(&mu_);
  if (running_ || thread_.joinable()) return;
  running_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void CompletionThread::Stop() {
  {
    MutexLock lock(&mu_);
    running_ = false;  // the loop drains the queue, then exits
  }
  cv_.SignalAll();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool CompletionThread::Post(Task task) {
  {
    MutexLock lock(&mu_);
    if (!running_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.Signal();
  return true;
}

void CompletionThread::Loop() {
  MutexLock lock(&mu_);
  for (;;) {
    cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return !tasks_.empty() || !running_; });
    while (!tasks_.empty()) {
      Task task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.Unlock();
      task();
      lock.Lock();
    }
    if (!running_) return;
  }
}

}  // namespace ps
