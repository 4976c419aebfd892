// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A request in flight: layerps._core.Handle and the WorkerState it shares with its
// worker. A Handle holds references to every array of its request until the request has
// completed; a Handle dropped while its request is in flight parks those references on
// its worker, which releases them once the request has completed (or the worker
// stopped), so memory under an in-flight request is never freed.
#ifndef LAYERPS_PYTHON_HANDLES_H_
#define LAYERPS_PYTHON_HANDLES_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ps/status.h"
#include "ps/worker.h"

namespace layerps_python {

// The Worker plus the references of requests whose Handle was dropped while in flight.
// Touched only with the GIL held, except `worker` whose methods are thread-safe.
struct WorkerState {
  std::unique_ptr<ps::Worker> worker;
  struct Orphan {
    ps::Ticket ticket;
    pybind11::object keep;
  };
  std::vector<Orphan> orphans;

  // Releases the references of orphans whose request completed. GIL held.
  void ReapOrphans();

  ~WorkerState();
};

class Handle {
 public:
  Handle(std::shared_ptr<WorkerState> state, ps::Ticket ticket, std::string what,
         pybind11::object keep, pybind11::object result)
      : state_(std::move(state)),
        ticket_(ticket),
        what_(std::move(what)),
        keep_(std::move(keep)),
        result_(std::move(result)) {}

  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  ~Handle();

  // Waits up to `timeout` seconds (None: until the request completes, which its
  // request_timeout_ms bounds). Returns the result (the pulled array, or None).
  pybind11::object Wait(std::optional<double> timeout_s);

  // True when the request completed (never blocks).
  bool Done();

  ps::Ticket ticket() const { return ticket_; }
  const std::string& what() const { return what_; }
  bool finished() const { return finished_; }

 private:
  pybind11::object Finish();

  std::shared_ptr<WorkerState> state_;
  ps::Ticket ticket_;
  std::string what_;
  pybind11::object keep_;    // the arrays the request reads or writes
  pybind11::object result_;  // returned by wait(): the output array, or None
  bool finished_ = false;
  ps::Status status_;
};

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_HANDLES_H_
