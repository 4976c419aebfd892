// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/request_table.h"

#include <string>

#include "worker/request_tracker.h"

namespace ps {

void RequestTable::Add(const std::shared_ptr<Request>& req) {
  MutexLock lock(&mu_);
  requests_[req->ticket] = req;
}

std::shared_ptr<Request> RequestTable::Find(Ticket ticket) const {
  MutexLock lock(&mu_);
  auto it = requests_.find(ticket);
  return it == requests_.end() ? nullptr : it->second;
}

void RequestTable::Erase(Ticket ticket) {
  MutexLock lock(&mu_);
  requests_.erase(ticket);
}

size_t RequestTable::size() const {
  MutexLock lock(&mu_);
  return requests_.size();
}

std::vector<std::shared_ptr<Request>> RequestTable::Snapshot(
    const std::function<bool(const Request&)>& keep) const {
  std::vector<std::shared_ptr<Request>> out;
  MutexLock lock(&mu_);
  out.reserve(requests_.size());
  for (const auto& kv : requests_) {
    if (!keep || keep(*kv.second)) out.push_back(kv.second);
  }
  return out;
}

Status RequestTable::Wait(Ticket ticket, std::chrono::milliseconds timeout, bool* in_flight) {
  return Wait(Find(ticket), ticket, timeout, in_flight);
}

Status RequestTable::Wait(const std::shared_ptr<Request>& req, Ticket ticket,
                          std::chrono::milliseconds timeout, bool* in_flight) {
  if (in_flight != nullptr) *in_flight = false;
  if (!req) {
    return NotFound("unknown ticket " + std::to_string(ticket) +
                    " (already waited, or has a callback)");
  }
  Status status;
  {
    MutexLock lock(&req->mu);
    if (!req->cv.WaitFor(&req->mu, timeout, [&]() REQUIRES(req->mu) { return req->done; })) {
      if (in_flight != nullptr) *in_flight = true;
      return Timeout("request " + std::to_string(ticket) + " still in flight after " +
                     std::to_string(timeout.count()) + " ms");
    }
    status = req->status;
  }
  Erase(ticket);
  return status;
}

Status RequestTable::Flush(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::vector<std::shared_ptr<Request>> flushed = Snapshot([](const Request& r) {
    return r.type == MsgType::kPush || r.type == MsgType::kPull || r.type == MsgType::kPushPull ||
           r.type == MsgType::kAssign;
  });
  size_t left = 0;
  for (const auto& req : flushed) {
    MutexLock lock(&req->mu);
    if (!req->cv.WaitUntil(&req->mu, deadline, [&]() REQUIRES(req->mu) { return req->done; })) ++left;
  }
  if (left > 0) {
    return Timeout("flush: " + std::to_string(left) + " of " + std::to_string(flushed.size()) +
                   " requests still in flight after " + std::to_string(timeout.count()) + " ms");
  }
  return Status::OK();
}

}  // namespace ps
