// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ApplyLanes: the threads beside a server's receive thread that apply the dense requests
// of its async tables, so that one table's pushes are no longer applied at the rate of
// one thread, and the receive thread takes the next message while the last one is being
// applied.
//
// A dense table is cut into spans of kSpanElems elements (by absolute element index); a
// span always goes to the same lane (by table and span number), and each lane runs its
// tasks in the order they were posted. A request is posted as one task per span it
// touches, all from the receive thread in arrival order, so two requests that share an
// element are applied to it in the order they arrived (per-key order), while requests on
// other spans, and the spans of one large request, run side by side. The last of a
// request's tasks to finish answers it.
//
// What goes to the lanes (Takes): single (not fused) dense requests of async tables with
// no replication backup (a forwarded update must reach the backup in the order it was
// applied, which only the receive thread gives) whose range is not lent to a reply in
// flight (ApplyDense would copy the whole range on write, which one thread at a time may
// do). Of those, a request that pushes at least kSpanElems elements always; any other
// only while the lanes are busy (it must then queue behind them for per-key order; when
// they are idle it is cheaper on the receive thread, and a pull of a whole range is then
// lent instead of copied).
//
// Everything else runs on the receive thread after Drain(): it waits until every posted
// task finished, so a request or control message handled there sees the store exactly as
// a one-threaded server would. Drain needs no timeout: lane tasks never wait on the
// network (a reply that cannot be sent within its own send timeout is dropped).
//
// Thread-safety: Takes, Post, Drain and Idle from the receive thread only (Drain also
// once it has stopped); the tasks read and write the store under its lock (shared), and
// a store change that takes the lock exclusively (installs, checkpoints) is made after
// Drain.
#ifndef PS_SERVER_APPLY_LANES_H_
#define PS_SERVER_APPLY_LANES_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/mutex.h"
#include "server/request.h"
#include "server/store.h"

namespace ps {

class ApplyLanes {
 public:
  // Elements per span: 64 KiB of float32, so a 256 KiB push is applied by up to four lanes.
  static constexpr uint64_t kSpanElems = uint64_t{1} << 14;

  // The reply of a finished request (the server's Reply); called on a lane thread.
  using ReplyFn = std::function<void(const Header&, const Status&, std::vector<Frame>)>;
  // A finished request's time from its arrival (Post's `arrived`) to its answer, in
  // seconds; called on a lane thread just before the reply is sent, so that whoever got
  // the answer finds it counted.
  using ObserveFn = std::function<void(double)>;

  // `lanes` threads (0: none; Takes then refuses everything). `store_mu` is the lock the
  // server holds its store under: each task holds it shared while it runs.
  ApplyLanes(size_t lanes, SharedMutex* store_mu, ReplyFn reply, ObserveFn observe);
  // Runs what is queued, then joins the threads.
  ~ApplyLanes();
  ApplyLanes(const ApplyLanes&) = delete;
  ApplyLanes& operator=(const ApplyLanes&) = delete;

  size_t size() const { return lanes_.size(); }

  // Whether `req` (checked by CheckRequest, of a table whose sync is async) goes to the
  // lanes; `replicated`: this server forwards its updates to a backup.
  bool Takes(const DataRequest& req, const Store& store, bool replicated) const;
  // Posts `req` (Takes said yes; it arrived at `arrived`) as one task per span. `store`
  // outlives the tasks (the server drains before replacing or destroying it).
  void Post(DataRequest&& req, Store* store, std::chrono::steady_clock::time_point arrived);
  // Waits until every posted task has finished.
  void Drain();
  // Nothing posted is still queued or running.
  bool Idle() const { return pending_.load(std::memory_order_acquire) == 0; }

  // Requests posted, and tasks they became (tests, stats).
  uint64_t requests() const { return requests_.load(); }
  uint64_t tasks() const { return tasks_.load(); }

 private:
  struct Lane {
    Mutex mu;
    CondVar cv;
    std::deque<std::function<void()>> tasks GUARDED_BY(mu);
    bool stop GUARDED_BY(mu) = false;
    std::thread thread;
  };
  struct Job;

  void Loop(Lane* lane);
  void RunSpan(const std::shared_ptr<Job>& job, Store* store, uint64_t begin, uint64_t end);
  size_t LaneOf(TableId table, uint64_t span) const;

  SharedMutex* const store_mu_;
  const ReplyFn reply_;
  const ObserveFn observe_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  BufferPool pool_;  // pull replies
  std::atomic<int64_t> pending_{0};  // tasks posted and not yet finished
  Mutex idle_mu_;
  CondVar idle_cv_;  // signalled when pending_ reaches 0
  std::atomic<uint64_t> requests_{0}, tasks_{0};
};

}  // namespace ps

#endif  // PS_SERVER_APPLY_LANES_H_
