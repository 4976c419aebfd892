// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TableExchange: one request to the servers at a time (a pushpull, a pull) into buffers
// the exchange owns, waited for at most a timeout. The buffers are shared with the
// request's callback, so a wait that gives up leaves them to the request still in flight
// (the worker completes it by request_timeout_ms at the latest) and the exchange takes
// fresh ones: the caller's memory is never written after a failed wait.
//
// Thread-safety: one thread (the Trainer's Step/Finish).
#ifndef PS_ALGORITHMS_TABLE_EXCHANGE_H_
#define PS_ALGORITHMS_TABLE_EXCHANGE_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "ps/worker.h"

namespace ps {
namespace algorithms {

class TableExchange {
 public:
  // Issues the request on the given buffers with the given callback; returns its ticket.
  using Issue = std::function<Ticket(const float* send, float* recv, Worker::Callback cb)>;

  explicit TableExchange(size_t n) : n_(n), state_(std::make_shared<State>(n)) {}

  // What the next Run sends (n floats), and what it received (valid after Run is OK).
  float* send() { return state_->send.data(); }
  const float* recv() const { return state_->recv.data(); }

  // Issues the request and waits for it, at most `timeout`.
  Status Run(const Issue& issue, std::chrono::milliseconds timeout) {
    std::shared_ptr<State> st = state_;
    {
      MutexLock lock(&st->mu);
      st->done = false;
    }
    issue(st->send.data(), st->recv.data(), [st](const Status& s) {
      MutexLock lock(&st->mu);
      st->status = s;
      st->done = true;
      st->cv.SignalAll();
    });
    MutexLock lock(&st->mu);
    if (!st->cv.WaitFor(&st->mu, timeout, [&]() REQUIRES(st->mu) { return st->done; })) {
      state_ = std::make_shared<State>(n_);  // the old buffers stay with the request
      return Timeout("Trainer: no answer from the servers within " +
                     std::to_string(timeout.count()) + " ms");
    }
    return st->status;
  }

 private:
  struct State {
    explicit State(size_t n) : send(n), recv(n) {}
    std::vector<float> send, recv;
    Mutex mu;
    CondVar cv;
    bool done GUARDED_BY(mu) = false;
    Status status GUARDED_BY(mu);
  };
  const size_t n_;
  std::shared_ptr<State> state_;
};

// Rank 0 assigns params[0..n) to `table` through `exchange`, then every worker waits at a
// barrier of the workers, so the table holds rank 0's values before anyone reads it.
// Collective over the workers; `what` names the table in errors ("the centre").
inline Status SeedFromRankZero(Worker* worker, TableExchange& exchange, TableId table,
                               const float* params, size_t n, std::chrono::milliseconds timeout,
                               const std::string& what) {
  if (worker->rank() == 0) {
    std::copy(params, params + n, exchange.send());
    Status st = exchange.Run(
        [&](const float* send, float*, Worker::Callback cb) {
          return worker->Assign(table, send, n, std::move(cb));
        },
        timeout);
    if (!st.ok()) return st.WithContext("Trainer: seeding " + what);
  }
  Status st = worker->Barrier(Group::kWorkers, timeout);
  return st.ok() ? st : st.WithContext("Trainer: barrier after seeding " + what);
}

}  // namespace algorithms
}  // namespace ps

#endif  // PS_ALGORITHMS_TABLE_EXCHANGE_H_
