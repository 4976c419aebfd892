// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// CompletionThread: a thread of its own that runs completions handed to it, in the order
// they came (part of RequestTracker, worker/request_tracker.h). A request whose last
// borrowed frame the transport released completes there, so that callbacks never run on
// a ZeroMQ I/O thread or (over inproc) a server's thread.
//
// Thread-safety: Post from any thread; Start and Stop from the owner.
#ifndef PS_WORKER_COMPLETION_THREAD_H_
#define PS_WORKER_COMPLETION_THREAD_H_

#include <deque>
#include <functional>
#include <thread>

#include "common/mutex.h"

namespace ps {

class CompletionThread {
 public:
  using Task = std::function<void()>;

  CompletionThread() = default;
  ~CompletionThread() { Stop(); }
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  // Starts the thread (idempotent).
  void Start();
  // Runs what is queued, then joins the thread (idempotent). Post fails from here on.
  void Stop();
  // Queues `task`; false when the thread is not running (the caller then runs it itself).
  bool Post(Task task);

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;
  std::deque<Task> tasks_ GUARDED_BY(mu_);
  bool running_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_WORKER_COMPLETION_THREAD_H_
