// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RequestTable: a worker's requests in flight, by ticket (part of RequestTracker,
// worker/request_tracker.h). A request stays in the table from its registration until it
// is waited for (Wait) or, with a callback, until its callback returned; Wait and Flush
// block on the request's own condition (Request::done), never on the table.
//
// Thread-safety: every member may be called from any thread.
#ifndef PS_WORKER_REQUEST_TABLE_H_
#define PS_WORKER_REQUEST_TABLE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

struct Request;

class RequestTable {
 public:
  void Add(const std::shared_ptr<Request>& req);
  // The request of `ticket`, or null when it is not (or no longer) in the table.
  std::shared_ptr<Request> Find(Ticket ticket) const;
  void Erase(Ticket ticket);
  size_t size() const;
  // The requests in the table at this moment for which `keep` holds (every one for null).
  std::vector<std::shared_ptr<Request>> Snapshot(
      const std::function<bool(const Request&)>& keep = nullptr) const;

  // The request's status once it completed, and it leaves the table. When `timeout` passes
  // first: kTimeout ("still in flight") and *in_flight = true (a request that itself
  // failed with kTimeout sets it false). kNotFound for a ticket not in the table (waited
  // for already, or one with a callback).
  Status Wait(Ticket ticket, std::chrono::milliseconds timeout, bool* in_flight = nullptr);
  // The same for `req`, found in the table by the caller (null: kNotFound for `ticket`).
  Status Wait(const std::shared_ptr<Request>& req, Ticket ticket, std::chrono::milliseconds timeout,
              bool* in_flight = nullptr);
  // Waits until every push, pull, push-pull and assign in the table now has completed
  // (they stay in the table for Wait); kTimeout saying how many are left otherwise.
  Status Flush(std::chrono::milliseconds timeout) const;

 private:
  mutable Mutex mu_;
  std::unordered_map<Ticket, std::shared_ptr<Request>> requests_ GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_REQUEST_TABLE_H_
