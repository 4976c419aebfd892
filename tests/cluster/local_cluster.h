// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// LocalCluster: a scheduler, M servers and N workers as objects in this process (the
// in-process tier of the tests). Nodes talk over tcp://127.0.0.1 or inproc://.
#ifndef PS_TESTS_LOCAL_CLUSTER_H_
#define PS_TESTS_LOCAL_CLUSTER_H_

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "ps/ps.h"

namespace ps {
namespace testing {

inline Options FastOptions() {
  Options o;
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 3000;  // generous: CI machines are noisy
  o.connect_timeout_ms = 20000;
  o.request_timeout_ms = 60000;
  // The apply lanes (server/apply_lanes.h) are off by default below 4 cores; the
  // in-process tier runs with two, so that everything a server does meets them.
  o.apply_threads = 2;
  // Machines of 8 cores and more open several streams per peer by default. The binaries
  // tests/CMakeLists.txt lists in LAYERPS_FOUR_STREAM_TESTS run that way on every machine
  // (4, the default of 16 cores), the others with this machine's default (one on 2 cores);
  // LAYERPS_TEST_STREAMS overrides both (a developer's rerun with another count).
#ifdef LAYERPS_TEST_DEFAULT_STREAMS
  o.streams = LAYERPS_TEST_DEFAULT_STREAMS;
#endif
  if (const char* s = std::getenv("LAYERPS_TEST_STREAMS")) o.streams = std::atoi(s);
  return o;
}

// Failure detection on a manual clock (common/clock.h): the nodes made with `o` send and
// judge heartbeats on `clock`'s time, which moves only when the test advances it. Nobody
// is declared dead because the machine is slow, and a test that waits for a death (or a
// scheduler's takeover) advances the time instead of sleeping (AdvanceUntil).
inline std::shared_ptr<ManualClock> UseManualClock(Options* o) {
  auto clock = std::make_shared<ManualClock>();
  SetClock(o, clock);
  return clock;
}

// Advances `clock` `slice_ms` at a time until pred() holds (true), at most `max_ms` of
// it; then, as what pred() waits for may also take real time (a thread's join, messages
// handled), polls pred() up to 60 s of real time in all (false). Each slice returns once
// every node's heartbeat loop and the scheduler caught up with it, and leaves a little
// real time to the rest.
template <typename Pred>
bool AdvanceUntil(ManualClock& clock, Pred pred, int64_t max_ms = 60000, int64_t slice_ms = 50) {
  const auto real_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int64_t advanced = 0;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > real_deadline) return false;
    if (advanced < max_ms) {
      clock.Advance(slice_ms);
      advanced += slice_ms;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return true;
}

class LocalCluster {
 public:
  // transport: "tcp", "ipc" or "inproc".
  LocalCluster(int servers, int workers, const std::string& transport = "tcp",
               Options base = FastOptions())
      : base_(std::move(base)) {
    static std::atomic<int> counter{0};
    base_.num_servers = servers;
    base_.num_workers = workers;
    if (transport == "inproc") {
      base_.scheduler_address = "inproc://test-scheduler-" + std::to_string(counter++);
    } else if (transport == "ipc") {
      base_.scheduler_address = "ipc:///tmp/layerps-test-" + std::to_string(getpid()) + "-" +
                                std::to_string(counter++) + ".sock";
    } else {
      base_.scheduler_address = "tcp://127.0.0.1:0";
    }
    scheduler_ = std::make_unique<Scheduler>(base_);
    for (int i = 0; i < servers; ++i) servers_.push_back(std::make_unique<Server>(base_));
    for (int i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>(base_));
  }

  // Starts everyone (the node Starts block until the cluster is complete, so they run
  // concurrently). Workers are then sorted by rank.
  Status Start() {
    Status s = scheduler_->Start();
    if (!s.ok()) return s;
    base_.scheduler_address = scheduler_->address();
    // Rebuild nodes with the real address.
    servers_.clear();
    workers_.clear();
    for (int i = 0; i < base_.num_servers; ++i) servers_.push_back(std::make_unique<Server>(base_));
    for (int i = 0; i < base_.num_workers; ++i) workers_.push_back(std::make_unique<Worker>(base_));
    std::vector<std::future<Status>> f;
    for (auto& sv : servers_)
      f.push_back(std::async(std::launch::async, [&sv] { return sv->Start(); }));
    for (auto& w : workers_)
      f.push_back(std::async(std::launch::async, [&w] { return w->Start(); }));
    Status result;
    for (auto& x : f) {
      Status r = x.get();
      if (!r.ok() && result.ok()) result = r;
    }
    if (!result.ok()) return result;
    std::sort(workers_.begin(), workers_.end(),
              [](const auto& a, const auto& b) { return a->rank() < b->rank(); });
    return Status::OK();
  }

  // A new scheduler on the address of the one there (which the caller has stopped, or
  // cut off and stopped): scheduler recovery (docs/recovery.md).
  Status RestartScheduler() {
    scheduler_ = std::make_unique<Scheduler>(base_);
    return scheduler_->Start();
  }

  // Stops the workers (the cluster then shuts down) and waits for the scheduler.
  Status Finish() {
    for (auto& w : workers_) w->Stop();
    Status s = scheduler_->Join(std::chrono::seconds(20));
    for (auto& sv : servers_) sv->Join(std::chrono::seconds(5));
    return s;
  }

  ~LocalCluster() {
    for (auto& w : workers_) w->Stop();
    for (auto& sv : servers_) sv->Stop();
    scheduler_->Stop();
  }

  Worker& worker(int i) { return *workers_[i]; }
  Server& server(int i) { return *servers_[i]; }
  Scheduler& scheduler() { return *scheduler_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  const Options& options() const { return base_; }

  // Runs fn(rank) on every worker concurrently; returns the first failure.
  template <typename Fn>
  void OnEveryWorker(Fn fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < num_workers(); ++r) threads.emplace_back([&, r] { fn(r); });
    for (auto& t : threads) t.join();
  }

 private:
  Options base_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_LOCAL_CLUSTER_H_
