// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core.Handle's waiting and the parking of dropped in-flight requests (handles.h).
#include "handles.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "timeouts.h"

namespace py = pybind11;

namespace layerps_python {

void WorkerState::ReapOrphans() {
  if (orphans.empty()) return;
  std::vector<Orphan> still;
  for (auto& o : orphans) {
    ps::Status s = worker->Wait(o.ticket, Millis(0));
    if (s.code() == ps::StatusCode::kTimeout) still.push_back(std::move(o));
  }
  orphans.swap(still);
}

WorkerState::~WorkerState() {
  // Called with the GIL held. Stop() fails every pending request (kAborted), after
  // which the parked buffers can go.
  if (worker) {
    py::gil_scoped_release release;
    worker->Stop();
  }
  orphans.clear();
}

Handle::~Handle() {
  if (finished_ || !state_) return;
  // In flight: do not block; park the buffers on the worker until the request is over.
  ps::Status s = state_->worker->Wait(ticket_, Millis(0));
  if (s.code() == ps::StatusCode::kTimeout) {
    state_->orphans.push_back({ticket_, std::move(keep_)});
  }
}

py::object Handle::Wait(std::optional<double> timeout_s) {
  if (finished_) return Finish();
  const Millis limit = ToMillis(timeout_s, Millis::max());
  const auto start = std::chrono::steady_clock::now();
  // Wait in slices so that Ctrl-C (KeyboardInterrupt) is noticed.
  for (;;) {
    Millis slice(200);
    if (limit != Millis::max()) {
      const auto spent =
          std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
      const Millis left = limit > spent ? limit - spent : Millis(0);
      if (left < slice) slice = left;
    }
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = state_->worker->Wait(ticket_, slice);
    }
    if (s.code() != ps::StatusCode::kTimeout) {
      finished_ = true;
      status_ = s;
      keep_ = py::none();
      return Finish();
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    const auto spent =
        std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
    if (limit != Millis::max() && spent >= limit) {
      throw StatusError(ps::Timeout(what_ + ": still in flight after " +
                                    std::to_string(limit.count()) + " ms (wait again)"));
    }
  }
}

bool Handle::Done() {
  if (finished_) return true;
  ps::Status s = state_->worker->Wait(ticket_, Millis(0));
  if (s.code() == ps::StatusCode::kTimeout) return false;
  finished_ = true;
  status_ = s;
  keep_ = py::none();
  return true;
}

py::object Handle::Finish() {
  if (!status_.ok()) throw StatusError(status_.WithContext(what_));
  return result_;
}

}  // namespace layerps_python
