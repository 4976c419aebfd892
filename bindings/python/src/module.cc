// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core: a thin pybind11 layer over the public C++ API (include/ps/*.h only).
//
// Contract of this layer:
//  - Every non-OK ps::Status becomes a Python exception of the class that
//    layerps.errors.error_class(code) names (LayerPSError and its subclasses), carrying
//    the Status message; this is the only place where a Status turns into an exception.
//  - The GIL is released around every call that can block (Start, Join, Stop, Wait,
//    Barrier, DeclareTable) and around request submission.
//  - Arrays are used in place: float32 C-contiguous values and 64-bit integer keys are
//    passed to the Worker without a copy. Anything else is refused here with
//    InvalidArgument (the pure-Python layer converts what it may convert first).
//  - A Handle holds references to every array of its request until the request has
//    completed; a Handle dropped while its request is in flight parks those references on
//    its worker, which releases them once the request has completed (or the worker
//    stopped), so memory under an in-flight request is never freed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core.h"
#include "ps/ps.h"

namespace py = pybind11;

namespace layerps_python {

// A non-OK Status on its way to Python.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(ps::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const ps::Status& status() const { return status_; }

 private:
  ps::Status status_;
};

void ThrowIfError(const ps::Status& s) {
  if (!s.ok()) throw StatusError(s);
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  throw StatusError(ps::InvalidArgument(message));
}

// The Python class for a status code, from layerps.errors (imported lazily so that the
// module also loads on its own; then RuntimeError is used).
PyObject* ErrorClassFor(ps::StatusCode code) {
  try {
    py::object cls =
        py::module_::import("layerps.errors").attr("error_class")(static_cast<int>(code));
    return cls.release().ptr();  // a new reference, released by the caller
  } catch (py::error_already_set&) {
    PyErr_Clear();
    Py_INCREF(PyExc_RuntimeError);
    return PyExc_RuntimeError;
  }
}

void TranslateStatusError(const StatusError& e) {
  PyObject* cls = ErrorClassFor(e.status().code());
  try {
    // LayerPSError subclasses carry the code in their class; RuntimeError gets the name.
    const std::string text =
        cls == PyExc_RuntimeError ? e.status().ToString() : e.status().message();
    py::object exc = py::reinterpret_borrow<py::object>(cls)(text);
    PyErr_SetObject(cls, exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  }
  Py_DECREF(cls);
}

using Millis = std::chrono::milliseconds;
// "No limit of our own" for Barrier/Join: 12 days (a time point this far ahead cannot overflow).
constexpr Millis kNoLimit(int64_t{1} << 30);

// Converts a timeout in seconds (None: no limit of our own) to milliseconds.
Millis ToMillis(std::optional<double> seconds, Millis none_value) {
  if (!seconds) return none_value;
  if (!(*seconds >= 0)) ThrowInvalid("timeout must be >= 0 seconds (or None)");
  const double ms = *seconds * 1000.0;
  if (ms > 1e12) return none_value;
  return Millis(static_cast<int64_t>(ms + 0.5));
}

// ---- Array checks ---------------------------------------------------------------------

std::string ShapeString(const py::array& a) {
  std::ostringstream os;
  os << "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (i) os << ", ";
    os << a.shape(i);
  }
  if (a.ndim() == 1) os << ",";
  os << ")";
  return os.str();
}

std::string DTypeString(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

bool IsCContiguous(const py::array& a) { return (a.flags() & py::array::c_style) != 0; }

// A float32, C-contiguous array (writable when `writable`).
void CheckFloatArray(const py::array& a, const char* what, bool writable) {
  if (a.dtype().kind() != 'f' || a.itemsize() != 4) {
    ThrowInvalid(std::string(what) + ": expected float32 values, got dtype " + DTypeString(a));
  }
  if (!IsCContiguous(a)) {
    ThrowInvalid(std::string(what) + ": the array must be C-contiguous");
  }
  if (writable && !a.writeable()) {
    ThrowInvalid(std::string(what) + ": the output array is read-only");
  }
}

void CheckKeyArray(const py::array& a) {
  const char kind = a.dtype().kind();
  if ((kind != 'u' && kind != 'i') || a.itemsize() != 8) {
    ThrowInvalid("keys: expected a uint64 or int64 array, got dtype " + DTypeString(a));
  }
  if (!IsCContiguous(a)) ThrowInvalid("keys: the array must be C-contiguous");
  if (a.ndim() != 1) ThrowInvalid("keys: expected a 1-D array, got shape " + ShapeString(a));
}

// ---- Worker ---------------------------------------------------------------------------

// The Worker plus the references of requests whose Handle was dropped while in flight.
// Touched only with the GIL held, except `worker` whose methods are thread-safe.
struct WorkerState {
  std::unique_ptr<ps::Worker> worker;
  struct Orphan {
    ps::Ticket ticket;
    py::object keep;
  };
  std::vector<Orphan> orphans;

  // Releases the references of orphans whose request completed. GIL held.
  void ReapOrphans() {
    if (orphans.empty()) return;
    std::vector<Orphan> still;
    for (auto& o : orphans) {
      ps::Status s = worker->Wait(o.ticket, Millis(0));
      if (s.code() == ps::StatusCode::kTimeout) still.push_back(std::move(o));
    }
    orphans.swap(still);
  }

  ~WorkerState() {
    // Called with the GIL held. Stop() fails every pending request (kAborted), after
    // which the parked buffers can go.
    if (worker) {
      py::gil_scoped_release release;
      worker->Stop();
    }
    orphans.clear();
  }
};

class Handle {
 public:
  Handle(std::shared_ptr<WorkerState> state, ps::Ticket ticket, std::string what, py::object keep,
         py::object result)
      : state_(std::move(state)),
        ticket_(ticket),
        what_(std::move(what)),
        keep_(std::move(keep)),
        result_(std::move(result)) {}

  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  ~Handle() {
    if (finished_ || !state_) return;
    // In flight: do not block; park the buffers on the worker until the request is over.
    ps::Status s = state_->worker->Wait(ticket_, Millis(0));
    if (s.code() == ps::StatusCode::kTimeout) {
      state_->orphans.push_back({ticket_, std::move(keep_)});
    }
  }

  // Waits up to `timeout` seconds (None: until the request completes, which its
  // request_timeout_ms bounds). Returns the result (the pulled array, or None).
  py::object Wait(std::optional<double> timeout_s) {
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

  // True when the request completed (never blocks).
  bool Done() {
    if (finished_) return true;
    ps::Status s = state_->worker->Wait(ticket_, Millis(0));
    if (s.code() == ps::StatusCode::kTimeout) return false;
    finished_ = true;
    status_ = s;
    keep_ = py::none();
    return true;
  }

  ps::Ticket ticket() const { return ticket_; }
  const std::string& what() const { return what_; }
  bool finished() const { return finished_; }

 private:
  py::object Finish() {
    if (!status_.ok()) throw StatusError(status_.WithContext(what_));
    return result_;
  }

  std::shared_ptr<WorkerState> state_;
  ps::Ticket ticket_;
  std::string what_;
  py::object keep_;    // the arrays the request reads or writes
  py::object result_;  // returned by wait(): the output array, or None
  bool finished_ = false;
  ps::Status status_;
};

class PyWorker {
 public:
  explicit PyWorker(ps::Options options) : state_(std::make_shared<WorkerState>()) {
    state_->worker = std::make_unique<ps::Worker>(std::move(options));
  }

  void Start() {
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = w().Start();
    }
    ThrowIfError(s);
  }

  void Stop() {
    {
      py::gil_scoped_release release;
      w().Stop();
    }
    state_->ReapOrphans();
  }

  uint32_t DeclareTable(const ps::TableSpec& spec) {
    ps::StatusOr<ps::TableId> id = ps::Status();
    {
      py::gil_scoped_release release;
      id = w().DeclareTable(spec);
    }
    ThrowIfError(id.status());
    return *id;
  }

  void SetLearningRate(uint32_t table, float learning_rate) {
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = w().SetLearningRate(table, learning_rate);
    }
    ThrowIfError(s);
  }

  std::string Checkpoint(const std::string& dir, double timeout_s) {
    if (!(timeout_s > 0) || timeout_s > 86400) ThrowIfError(ps::InvalidArgument("checkpoint: timeout must be in (0, 86400] seconds"));
    ps::StatusOr<std::string> path = ps::Status();
    {
      py::gil_scoped_release release;
      path = w().Checkpoint(dir, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    }
    ThrowIfError(path.status());
    return *path;
  }

  void DropTable(const std::string& name) {
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = w().DropTable(name);
    }
    ThrowIfError(s);
  }

  ps::TableSpec GetTableSpec(uint32_t table) const {
    ps::StatusOr<ps::TableSpec> spec = w().GetTableSpec(table);
    ThrowIfError(spec.status());
    return *spec;
  }

  int Barrier(ps::Group group, std::optional<double> timeout_s) {
    const Millis t = ToMillis(timeout_s, kNoLimit);
    ps::Status s;
    int participants = 0;
    {
      py::gil_scoped_release release;
      s = w().Barrier(group, t, &participants);
    }
    ThrowIfError(s);
    return participants;
  }

  // Worker::Flush, in slices so that Ctrl-C is noticed (None: no limit of our own; every
  // request is bounded by its request_timeout_ms anyway).
  void Flush(std::optional<double> timeout_s) {
    const Millis limit = ToMillis(timeout_s, kNoLimit);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const auto spent =
          std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
      const Millis left = limit > spent ? limit - spent : Millis(0);
      ps::Status s;
      {
        py::gil_scoped_release release;
        s = w().Flush(std::min(left, Millis(200)));
      }
      if (s.code() != ps::StatusCode::kTimeout) {
        ThrowIfError(s);
        return;
      }
      if (left <= Millis(200)) {
        throw StatusError(ps::Timeout(s.message() + " (the last slice; " +
                                      std::to_string(limit.count()) + " ms in all)"));
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  int Join(std::optional<double> timeout_s) {
    const Millis t = ToMillis(timeout_s, kNoLimit);
    ps::Status s;
    int joined = 0;
    {
      py::gil_scoped_release release;
      s = w().Join(t, &joined);
    }
    ThrowIfError(s);
    return joined;
  }

  // --- Dense ---------------------------------------------------------------------------
  Handle* Push(uint32_t table, const py::array& grad) {
    const ps::TableSpec spec = Dense(table, "push");
    CheckDense(spec, grad, "push", "gradient", false);
    const float* g = Data(grad);
    const size_t n = grad.size();
    return Submit("push to '" + spec.name + "'", py::make_tuple(grad), py::none(),
                  [&] { return w().Push(table, g, n); });
  }

  Handle* Pull(uint32_t table, std::optional<py::array> out) {
    const ps::TableSpec spec = Dense(table, "pull");
    py::array o = out ? *out : NewFloat({static_cast<py::ssize_t>(spec.size)});
    CheckDense(spec, o, "pull", "output", true);
    float* dst = MutableData(o);
    const size_t n = o.size();
    return Submit("pull from '" + spec.name + "'", py::make_tuple(o), o,
                  [&] { return w().Pull(table, dst, n); });
  }

  Handle* PushPull(uint32_t table, const py::array& grad, std::optional<py::array> out) {
    const ps::TableSpec spec = Dense(table, "pushpull");
    CheckDense(spec, grad, "pushpull", "gradient", false);
    py::array o = out ? *out : NewFloat({static_cast<py::ssize_t>(spec.size)});
    CheckDense(spec, o, "pushpull", "output", true);
    const float* g = Data(grad);
    float* dst = MutableData(o);
    const size_t n = o.size();
    if (g < dst + n && dst < g + n) {
      ThrowInvalid("pushpull to '" + spec.name +
                   "': the gradient and the output must not share memory");
    }
    return Submit("pushpull to '" + spec.name + "'", py::make_tuple(grad, o), o,
                  [&] { return w().PushPull(table, g, dst, n); });
  }

  Handle* Assign(uint32_t table, const py::array& values) {
    const ps::TableSpec spec = Dense(table, "assign");
    CheckDense(spec, values, "assign", "values", false);
    const float* v = Data(values);
    const size_t n = values.size();
    return Submit("assign to '" + spec.name + "'", py::make_tuple(values), py::none(),
                  [&] { return w().Assign(table, v, n); });
  }

  // --- Sparse --------------------------------------------------------------------------
  Handle* PushSparse(uint32_t table, const py::array& keys, const py::array& rows) {
    const ps::TableSpec spec = Sparse(table, "push_sparse");
    CheckSparse(spec, keys, rows, "push_sparse", "rows", false);
    const ps::Key* k = Keys(keys);
    const size_t nk = keys.size();
    const float* r = Data(rows);
    const size_t nr = rows.size();
    return Submit("push_sparse to '" + spec.name + "'", py::make_tuple(keys, rows), py::none(),
                  [&] { return w().PushSparse(table, k, nk, r, nr); });
  }

  Handle* PullSparse(uint32_t table, const py::array& keys, std::optional<py::array> out) {
    const ps::TableSpec spec = Sparse(table, "pull_sparse");
    CheckKeyArray(keys);
    py::array o =
        out ? *out
            : NewFloat({static_cast<py::ssize_t>(keys.size()), static_cast<py::ssize_t>(spec.dim)});
    CheckSparse(spec, keys, o, "pull_sparse", "output", true);
    const ps::Key* k = Keys(keys);
    const size_t nk = keys.size();
    float* dst = MutableData(o);
    const size_t nr = o.size();
    return Submit("pull_sparse from '" + spec.name + "'", py::make_tuple(keys, o), o,
                  [&] { return w().PullSparse(table, k, nk, dst, nr); });
  }

  Handle* AssignSparse(uint32_t table, const py::array& keys, const py::array& rows) {
    const ps::TableSpec spec = Sparse(table, "assign_sparse");
    CheckSparse(spec, keys, rows, "assign_sparse", "rows", false);
    const ps::Key* k = Keys(keys);
    const size_t nk = keys.size();
    const float* r = Data(rows);
    const size_t nr = rows.size();
    return Submit("assign_sparse to '" + spec.name + "'", py::make_tuple(keys, rows), py::none(),
                  [&] { return w().AssignSparse(table, k, nk, r, nr); });
  }

  // --- Worker to worker ---------------------------------------------------------------
  Handle* SendTo(uint32_t to, uint64_t tag, const py::array& values) {
    if (values.dtype().kind() != 'f' || values.itemsize() != 4 ||
        !(values.flags() & py::array::c_style)) {
      ThrowInvalid("send_to: values must be a C-contiguous float32 array");
    }
    const float* v = Data(values);
    const size_t n = values.size();
    return Submit("send to worker " + std::to_string(to), py::make_tuple(values), py::none(),
                  [&] { return w().SendTo(to, tag, v, n); });
  }

  Handle* RecvFrom(uint32_t from, uint64_t tag, const py::array& out) {
    if (out.dtype().kind() != 'f' || out.itemsize() != 4 || !(out.flags() & py::array::c_style) ||
        !out.writeable()) {
      ThrowInvalid("recv_from: out must be a writable C-contiguous float32 array");
    }
    py::array o = out;
    float* dst = MutableData(o);
    const size_t n = o.size();
    return Submit("receive from worker " + std::to_string(from), py::make_tuple(o), o,
                  [&] { return w().RecvFrom(from, tag, dst, n); });
  }

  // In place, blocking, GIL released: every participant calls it with the same size.
  void AllReduce(py::array& data, std::optional<double> timeout_s,
                 std::optional<std::vector<uint32_t>> ranks, std::optional<size_t> segment_bytes,
                 const std::string& algorithm) {
    if (data.dtype().kind() != 'f' || data.itemsize() != 4 ||
        !(data.flags() & py::array::c_style) || !data.writeable()) {
      ThrowInvalid("allreduce: the values must be a writable C-contiguous float32 array");
    }
    ps::AllReduceOptions options;
    if (ranks) options.ranks = *ranks;
    if (segment_bytes) options.segment_bytes = *segment_bytes;
    if (algorithm == "ring") {
      options.algorithm = ps::AllReduceAlgorithm::kRing;
    } else if (algorithm == "direct") {
      options.algorithm = ps::AllReduceAlgorithm::kDirect;
    } else if (algorithm != "auto") {
      ThrowInvalid("allreduce: algorithm must be 'auto', 'ring' or 'direct', not '" + algorithm + "'");
    }
    const Millis t = ToMillis(timeout_s, kNoLimit);
    float* d = MutableData(data);
    const size_t n = data.size();
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = w().AllReduce(d, n, options, t);
    }
    ThrowIfError(s);
  }

  py::dict Traffic() const {
    const ps::TrafficStats t = w().traffic();
    py::dict peers, tables, d;
    for (const auto& kv : t.peers) {
      py::dict p;
      p["bytes_sent"] = kv.second.bytes_sent;
      p["bytes_received"] = kv.second.bytes_received;
      p["messages_sent"] = kv.second.messages_sent;
      p["messages_received"] = kv.second.messages_received;
      peers[py::int_(kv.first)] = p;
    }
    for (const auto& kv : t.tables) {
      py::dict p;
      p["bytes_sent"] = kv.second.bytes_sent;
      p["bytes_received"] = kv.second.bytes_received;
      tables[py::int_(kv.first)] = p;
    }
    d["peers"] = peers;
    d["tables"] = tables;
    return d;
  }

  void InstallPlacement(const std::vector<std::pair<std::string, std::vector<uint32_t>>>& layers,
                        std::optional<double> timeout_s) {
    std::vector<ps::LayerServers> placement;
    for (const auto& l : layers) placement.push_back(ps::LayerServers{l.first, l.second});
    const Millis t = ToMillis(timeout_s, kNoLimit);
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = w().InstallPlacement(placement, t);
    }
    ThrowIfError(s);
  }

  py::dict Placement() const {
    py::dict d;
    for (const auto& l : w().Placement()) d[py::str(l.layer)] = l.servers;
    return d;
  }

  std::vector<uint32_t> TableServers(uint32_t table) const { return w().TableServers(table); }

  uint32_t id() const { return w().id(); }
  uint32_t rank() const { return w().rank(); }
  int num_workers() const { return w().num_workers(); }
  int num_servers() const { return w().num_servers(); }
  std::vector<ps::NodeInfo> Nodes() const { return w().Nodes(); }
  size_t parked() const { return state_->orphans.size(); }

  py::dict Stats() const {
    const ps::WorkerStats s = w().stats();
    py::dict d;
    d["requests_sent"] = s.requests_sent;
    d["replies_received"] = s.replies_received;
    d["bad_messages"] = s.bad_messages;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["payload_copies"] = s.payload_copies;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    d["resent"] = s.resent;
    return d;
  }

 // The C++ worker (WorkerOf, for the Trainer binding).
  ps::Worker& worker() const { return w(); }

  // A request started by another translation unit (SubmitOn).
  Handle* SubmitExternal(std::string what, py::object keep, py::object result,
                         const std::function<ps::Ticket(ps::Worker&)>& start) {
    return Submit(std::move(what), std::move(keep), std::move(result), [&] { return start(w()); });
  }

 private:
  ps::Worker& w() const { return *state_->worker; }

  // Sends with the GIL released: `send` must not touch Python objects (pointers and sizes
  // are taken before), whose references `keep` holds for the Handle.
  template <typename F>
  Handle* Submit(std::string what, py::object keep, py::object result, F&& send) {
    state_->ReapOrphans();
    ps::Ticket t;
    {
      py::gil_scoped_release release;
      t = send();
    }
    return new Handle(state_, t, std::move(what), std::move(keep), std::move(result));
  }

  ps::TableSpec Dense(uint32_t table, const char* op) const {
    ps::TableSpec spec = GetTableSpec(table);
    if (spec.kind != ps::TableKind::kDense) {
      ThrowInvalid(std::string(op) + ": table '" + spec.name + "' is sparse; use " + op +
                   "_sparse");
    }
    return spec;
  }
  ps::TableSpec Sparse(uint32_t table, const char* op) const {
    ps::TableSpec spec = GetTableSpec(table);
    if (spec.kind != ps::TableKind::kSparse) {
      ThrowInvalid(std::string(op) + ": table '" + spec.name + "' is dense");
    }
    return spec;
  }

  static void CheckDense(const ps::TableSpec& spec, const py::array& a, const char* op,
                         const char* what, bool writable) {
    const std::string ctx = std::string(op) + " '" + spec.name + "' " + what;
    CheckFloatArray(a, ctx.c_str(), writable);
    if (static_cast<uint64_t>(a.size()) != spec.size) {
      ThrowInvalid(ctx + ": the table has " + std::to_string(spec.size) +
                   " elements, the array has " + std::to_string(a.size()) + " (shape " +
                   ShapeString(a) + ")");
    }
  }

  static void CheckSparse(const ps::TableSpec& spec, const py::array& keys, const py::array& rows,
                          const char* op, const char* what, bool writable) {
    CheckKeyArray(keys);
    const std::string ctx = std::string(op) + " '" + spec.name + "' " + what;
    CheckFloatArray(rows, ctx.c_str(), writable);
    const uint64_t n = keys.size();
    const bool shape_ok = (rows.ndim() == 2 && static_cast<uint64_t>(rows.shape(0)) == n &&
                           static_cast<uint64_t>(rows.shape(1)) == spec.dim) ||
                          (rows.ndim() == 1 && static_cast<uint64_t>(rows.size()) == n * spec.dim);
    if (!shape_ok) {
      ThrowInvalid(ctx + ": expected shape (" + std::to_string(n) + ", " +
                   std::to_string(spec.dim) + ") for " + std::to_string(n) +
                   " keys of a table with rows of " + std::to_string(spec.dim) + ", got shape " +
                   ShapeString(rows));
    }
  }

  static py::array NewFloat(std::vector<py::ssize_t> shape) { return py::array_t<float>(shape); }
  static const float* Data(const py::array& a) { return static_cast<const float*>(a.data()); }
  static float* MutableData(py::array& a) { return static_cast<float*>(a.mutable_data()); }
  static const ps::Key* Keys(const py::array& a) { return static_cast<const ps::Key*>(a.data()); }

  std::shared_ptr<WorkerState> state_;
};

// ---- Scheduler and Server ---------------------------------------------------------------

template <typename Node>
void StartNode(Node& n) {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = n.Start();
  }
  ThrowIfError(s);
}

template <typename Node>
void JoinNode(Node& n, std::optional<double> timeout_s) {
  const Millis t = ToMillis(timeout_s, kNoLimit);
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = n.Join(t);
  }
  ThrowIfError(s);
}

template <typename Node>
void StopNode(Node& n) {
  py::gil_scoped_release release;
  n.Stop();
}

py::object SubmitOn(py::handle core_worker, std::string what, py::object keep, py::object result,
                    const std::function<ps::Ticket(ps::Worker&)>& start) {
  PyWorker* pw = nullptr;
  try {
    pw = &py::cast<PyWorker&>(core_worker);
  } catch (const py::cast_error&) {
    ThrowInvalid("expected a layerps worker");
  }
  Handle* h = pw->SubmitExternal(std::move(what), std::move(keep), std::move(result), start);
  return py::cast(h, py::return_value_policy::take_ownership);
}

ps::Worker& WorkerOf(py::handle core_worker) {
  try {
    return py::cast<PyWorker&>(core_worker).worker();
  } catch (const py::cast_error&) {
    ThrowInvalid("expected a layerps worker");
  }
}

}  // namespace layerps_python

PYBIND11_MODULE(_core, m) {
  using namespace layerps_python;  // NOLINT: the module's own helpers
  m.doc() = "LayerPS C++ core (internal: use the layerps package)";
  // The package's version comes from here: one source (the CMake project() version).
  m.attr("__version__") = ps::Version();
  m.attr("__commit__") = ps::BuildCommit();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      TranslateStatusError(e);
    }
  });

  py::enum_<ps::StatusCode>(m, "StatusCode")
      .value("OK", ps::StatusCode::kOk)
      .value("INVALID_ARGUMENT", ps::StatusCode::kInvalidArgument)
      .value("NOT_FOUND", ps::StatusCode::kNotFound)
      .value("ALREADY_EXISTS", ps::StatusCode::kAlreadyExists)
      .value("FAILED_PRECONDITION", ps::StatusCode::kFailedPrecondition)
      .value("TIMEOUT", ps::StatusCode::kTimeout)
      .value("UNAVAILABLE", ps::StatusCode::kUnavailable)
      .value("PERMISSION_DENIED", ps::StatusCode::kPermissionDenied)
      .value("PROTOCOL_ERROR", ps::StatusCode::kProtocolError)
      .value("RESOURCE_EXHAUSTED", ps::StatusCode::kResourceExhausted)
      .value("ABORTED", ps::StatusCode::kAborted)
      .value("INTERNAL", ps::StatusCode::kInternal)
      .value("IO_ERROR", ps::StatusCode::kIoError);
  m.def("status_code_name", [](int code) {
    return std::string(ps::StatusCodeName(static_cast<ps::StatusCode>(code)));
  });

  py::enum_<ps::Role>(m, "Role")
      .value("SCHEDULER", ps::Role::kScheduler)
      .value("SERVER", ps::Role::kServer)
      .value("WORKER", ps::Role::kWorker);
  py::enum_<ps::TableKind>(m, "TableKind")
      .value("DENSE", ps::TableKind::kDense)
      .value("SPARSE", ps::TableKind::kSparse);
  py::enum_<ps::DType>(m, "DType").value("FLOAT32", ps::DType::kFloat32);
  py::enum_<ps::UpdateRule>(m, "UpdateRule")
      .value("SUM", ps::UpdateRule::kSum)
      .value("SGD", ps::UpdateRule::kSgd)
      .value("MOMENTUM", ps::UpdateRule::kMomentum)
      .value("NESTEROV", ps::UpdateRule::kNesterov)
      .value("ADAGRAD", ps::UpdateRule::kAdagrad)
      .value("ADAM", ps::UpdateRule::kAdam)
      .value("FTRL", ps::UpdateRule::kFtrl)
      .value("ELASTIC", ps::UpdateRule::kElastic);
  py::enum_<ps::SyncMode>(m, "SyncMode")
      .value("ASYNC", ps::SyncMode::kAsync)
      .value("BSP", ps::SyncMode::kBsp)
      .value("SSP", ps::SyncMode::kSsp);
  py::enum_<ps::Eviction>(m, "Eviction")
      .value("NONE", ps::Eviction::kNone)
      .value("LRU", ps::Eviction::kLru)
      .value("LFU", ps::Eviction::kLfu)
      .value("DECAYED", ps::Eviction::kDecayed);
  py::enum_<ps::WireDType>(m, "WireDType")
      .value("FP32", ps::WireDType::kFloat32)
      .value("FP16", ps::WireDType::kFloat16)
      .value("BF16", ps::WireDType::kBFloat16);
  py::enum_<ps::Initializer>(m, "Initializer")
      .value("ZEROS", ps::Initializer::kZeros)
      .value("UNIFORM", ps::Initializer::kUniform)
      .value("NORMAL", ps::Initializer::kNormal);
  py::enum_<ps::Group>(m, "Group")
      .value("WORKERS", ps::Group::kWorkers)
      .value("SERVERS", ps::Group::kServers)
      .value("ALL", ps::Group::kAll);

  py::class_<ps::Options>(m, "Options")
      .def(py::init<>())
      .def_readwrite("scheduler_address", &ps::Options::scheduler_address)
      .def_readwrite("bind_address", &ps::Options::bind_address)
      .def_readwrite("advertise_host", &ps::Options::advertise_host)
      .def_readwrite("num_servers", &ps::Options::num_servers)
      .def_readwrite("num_workers", &ps::Options::num_workers)
      .def_readwrite("token", &ps::Options::token)
      .def_readwrite("curve_key_file", &ps::Options::curve_key_file)
      .def_readwrite("cold_dir", &ps::Options::cold_dir)
      .def_readwrite("restore_dir", &ps::Options::restore_dir)
      .def_readwrite("checkpoint_keep", &ps::Options::checkpoint_keep)
      .def_readwrite("checkpoint_dir", &ps::Options::checkpoint_dir)
      .def_readwrite("checkpoint_every_s", &ps::Options::checkpoint_every_s)
      .def_readwrite("replace_servers_ms", &ps::Options::replace_servers_ms)
      .def_readwrite("replication", &ps::Options::replication)
      .def_readwrite("heartbeat_interval_ms", &ps::Options::heartbeat_interval_ms)
      .def_readwrite("heartbeat_timeout_ms", &ps::Options::heartbeat_timeout_ms)
      .def_readwrite("scheduler_recovery_ms", &ps::Options::scheduler_recovery_ms)
      .def_readwrite("stall_warning_ms", &ps::Options::stall_warning_ms)
      .def_readwrite("metrics_port", &ps::Options::metrics_port)
      .def_readwrite("metrics_host", &ps::Options::metrics_host)
      .def_readwrite("timeline", &ps::Options::timeline)
      .def_readwrite("connect_timeout_ms", &ps::Options::connect_timeout_ms)
      .def_readwrite("request_timeout_ms", &ps::Options::request_timeout_ms)
      .def_readwrite("dense_chunk_elems", &ps::Options::dense_chunk_elems)
      .def_readwrite("part_bytes", &ps::Options::part_bytes)
      .def_readwrite("io_threads", &ps::Options::io_threads)
      .def_readwrite("streams", &ps::Options::streams)
      .def_readwrite("max_message_bytes", &ps::Options::max_message_bytes)
      .def_readwrite("rank", &ps::Options::rank)
      .def_readwrite("shared_memory", &ps::Options::shared_memory)
      .def_readwrite("scheduler_max_message_bytes", &ps::Options::scheduler_max_message_bytes)
      .def_readwrite("tolerate_worker_loss", &ps::Options::tolerate_worker_loss)
      .def_static(
          "from_env",
          [] {
            ps::StatusOr<ps::Options> o = ps::Options::FromEnv();
            ThrowIfError(o.status());
            return *o;
          },
          "Options from the LAYERPS_* environment variables (as layerps-launch sets them).")
      .def("validate", [](const ps::Options& o) { ThrowIfError(o.Validate()); })
      .def("__repr__", [](const ps::Options& o) {
        return "Options(scheduler_address='" + o.scheduler_address +
               "', num_servers=" + std::to_string(o.num_servers) +
               ", num_workers=" + std::to_string(o.num_workers) + ")";
      });

  m.def("set_log_level", &ps::SetLogLevel,
        "Least severity the C++ core prints: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL.");
  m.def("detect_launcher", [] {
    ps::StatusOr<ps::LauncherEnv> e = ps::DetectLauncher();
    ThrowIfError(e.status());
    if (e->launcher.empty()) return py::object(py::none());
    py::dict d;
    d["launcher"] = e->launcher;
    d["rank"] = e->rank;
    d["size"] = e->size;
    d["local_rank"] = e->local_rank;
    d["local_size"] = e->local_size;
    d["scheduler_host"] = e->scheduler_host;
    d["scheduler_port"] = e->scheduler_port;
    d["scheduler_address"] = e->scheduler_address();
    return py::object(d);
  }, "torchrun, Slurm or mpirun as the environment says (a dict), or None.");
  m.def("option_table", [] {
    py::list rows;
    for (const ps::OptionInfo& o : ps::OptionTable()) {
      py::dict d;
      d["name"] = o.name;
      d["field"] = o.field;
      d["env"] = o.env;
      d["type"] = o.type;
      d["help"] = o.help;
      d["scheduler"] = o.scheduler;
      d["server"] = o.server;
      d["worker"] = o.worker;
      d["per_node"] = o.per_node;
      rows.append(d);
    }
    return rows;
  }, "Every node option: flag name, Options field, environment variable, type, help, roles.");

  py::class_<ps::TableSpec>(m, "TableSpec")
      .def(py::init<>())
      .def_readwrite("name", &ps::TableSpec::name)
      .def_readwrite("kind", &ps::TableSpec::kind)
      .def_readwrite("size", &ps::TableSpec::size)
      .def_readwrite("dim", &ps::TableSpec::dim)
      .def_readwrite("dtype", &ps::TableSpec::dtype)
      .def_readwrite("rule", &ps::TableSpec::rule)
      .def_readwrite("learning_rate", &ps::TableSpec::learning_rate)
      .def_readwrite("momentum", &ps::TableSpec::momentum)
      .def_readwrite("beta1", &ps::TableSpec::beta1)
      .def_readwrite("beta2", &ps::TableSpec::beta2)
      .def_readwrite("epsilon", &ps::TableSpec::epsilon)
      .def_readwrite("l1", &ps::TableSpec::l1)
      .def_readwrite("l2", &ps::TableSpec::l2)
      .def_readwrite("ftrl_beta", &ps::TableSpec::ftrl_beta)
      .def_readwrite("elastic_alpha", &ps::TableSpec::elastic_alpha)
      .def_readwrite("sync", &ps::TableSpec::sync)
      .def_readwrite("staleness", &ps::TableSpec::staleness)
      .def_readwrite("wire_dtype", &ps::TableSpec::wire_dtype)
      .def_readwrite("init", &ps::TableSpec::init)
      .def_readwrite("init_a", &ps::TableSpec::init_a)
      .def_readwrite("init_b", &ps::TableSpec::init_b)
      .def_readwrite("seed", &ps::TableSpec::seed)
      .def_readwrite("layer", &ps::TableSpec::layer)
      .def_readwrite("capacity", &ps::TableSpec::capacity)
      .def_readwrite("eviction", &ps::TableSpec::eviction)
      .def_readwrite("expiry_steps", &ps::TableSpec::expiry_steps)
      .def_readwrite("admit_after", &ps::TableSpec::admit_after)
      .def_readwrite("admit_probability", &ps::TableSpec::admit_probability)
      .def_readwrite("cold_tier", &ps::TableSpec::cold_tier)
      .def_readwrite("cache_rows", &ps::TableSpec::cache_rows)
      .def_readwrite("expiry_seconds", &ps::TableSpec::expiry_seconds)
      .def_readwrite("capacity_bytes", &ps::TableSpec::capacity_bytes)
      .def_readwrite("score_decay", &ps::TableSpec::score_decay)
      .def_readwrite("cache_staleness", &ps::TableSpec::cache_staleness)
      .def("validate", [](const ps::TableSpec& s) { ThrowIfError(s.Validate()); });

  py::class_<ps::NodeInfo>(m, "NodeInfo")
      .def_readonly("id", &ps::NodeInfo::id)
      .def_readonly("role", &ps::NodeInfo::role)
      .def_readonly("rank", &ps::NodeInfo::rank)
      .def_readonly("endpoint", &ps::NodeInfo::endpoint)
      .def_readonly("hostname", &ps::NodeInfo::hostname)
      .def_readonly("alive", &ps::NodeInfo::alive)
      .def("__repr__", [](const ps::NodeInfo& n) {
        return std::string("NodeInfo(") + ps::RoleName(n.role) + " rank " + std::to_string(n.rank) +
               " id " + std::to_string(n.id) + " at " + n.endpoint + (n.alive ? "" : ", dead") +
               ")";
      });

  py::class_<ps::Scheduler>(m, "Scheduler")
      .def(py::init<ps::Options>())
      .def("start", &StartNode<ps::Scheduler>)
      .def("join", &JoinNode<ps::Scheduler>, py::arg("timeout") = py::none())
      .def("stop", &StopNode<ps::Scheduler>)
      .def_property_readonly("address", &ps::Scheduler::address)
      .def("nodes", &ps::Scheduler::Nodes)
      .def("stats", [](const ps::Scheduler& s) {
        const ps::SchedulerStats st = s.stats();
        py::dict d;
        d["messages_received"] = st.messages_received;
        d["bad_messages"] = st.bad_messages;
        d["rejected_registrations"] = st.rejected_registrations;
        d["dead_nodes"] = st.dead_nodes;
        d["stall_warnings"] = st.stall_warnings;
        d["map_epoch"] = st.map_epoch;
        d["recoveries"] = st.recoveries;
        return d;
      });

  py::class_<ps::Server>(m, "Server")
      .def(py::init<ps::Options>())
      .def("start", &StartNode<ps::Server>)
      .def("join", &JoinNode<ps::Server>, py::arg("timeout") = py::none())
      .def("stop", &StopNode<ps::Server>)
      .def_property_readonly("id", &ps::Server::id)
      .def_property_readonly("rank", &ps::Server::rank)
      .def_property_readonly("endpoint", &ps::Server::endpoint)
      .def("stats",
           [](const ps::Server& s) {
             const ps::ServerStats st = s.stats();
             py::dict d;
             d["messages_received"] = st.messages_received;
             d["bad_messages"] = st.bad_messages;
             d["push_requests"] = st.push_requests;
             d["pull_requests"] = st.pull_requests;
             d["bytes_received"] = st.bytes_received;
             d["bytes_sent"] = st.bytes_sent;
             d["sparse_rows"] = st.sparse_rows;
             d["stall_warnings"] = st.stall_warnings;
             d["backed_up"] = st.backed_up;
             d["copies_sent"] = st.copies_sent;
             d["copies_received"] = st.copies_received;
             return d;
           })
      .def("table_stats", [](const ps::Server& s) {
        // {table name: {rows_live, evicted, expired, admitted, refused}} (docs/sparse.md)
        py::dict out;
        for (const auto& kv : s.table_stats()) {
          const ps::SparseTableStats& t = kv.second;
          py::dict d;
          d["id"] = kv.first;
          d["rows_live"] = t.rows_live;
          d["evicted"] = t.evicted;
          d["expired"] = t.expired;
          d["admitted"] = t.admitted;
          d["refused"] = t.refused;
          d["spilled"] = t.spilled;
          d["reloaded"] = t.reloaded;
          d["capacity"] = t.capacity;
          out[py::str(t.name)] = d;
        }
        return out;
      });

  py::class_<Handle>(m, "Handle")
      .def("wait", &Handle::Wait, py::arg("timeout") = py::none())
      .def("done", &Handle::Done)
      .def_property_readonly("ticket", &Handle::ticket)
      .def_property_readonly("what", &Handle::what);

  BindCollectives(m);

  py::class_<PyWorker>(m, "Worker")
      .def(py::init<ps::Options>())
      .def("start", &PyWorker::Start)
      .def("stop", &PyWorker::Stop)
      .def("declare_table", &PyWorker::DeclareTable)
      .def("drop_table", &PyWorker::DropTable, py::arg("name"))
      .def("checkpoint", &PyWorker::Checkpoint, py::arg("dir"), py::arg("timeout_s"))
      .def("set_learning_rate", &PyWorker::SetLearningRate, py::arg("table"), py::arg("learning_rate"))
      .def("table_spec", &PyWorker::GetTableSpec)
      .def("barrier", &PyWorker::Barrier, py::arg("group"), py::arg("timeout") = py::none())
      .def("join", &PyWorker::Join, py::arg("timeout") = py::none())
      .def("flush", &PyWorker::Flush, py::arg("timeout") = py::none())
      .def("push", &PyWorker::Push, py::return_value_policy::take_ownership)
      .def("pull", &PyWorker::Pull, py::arg("table"), py::arg("out") = py::none(),
           py::return_value_policy::take_ownership)
      .def("pushpull", &PyWorker::PushPull, py::arg("table"), py::arg("grad"),
           py::arg("out") = py::none(), py::return_value_policy::take_ownership)
      .def("assign", &PyWorker::Assign, py::return_value_policy::take_ownership)
      .def("push_sparse", &PyWorker::PushSparse, py::return_value_policy::take_ownership)
      .def("pull_sparse", &PyWorker::PullSparse, py::arg("table"), py::arg("keys"),
           py::arg("out") = py::none(), py::return_value_policy::take_ownership)
      .def("assign_sparse", &PyWorker::AssignSparse, py::return_value_policy::take_ownership)
      .def_property_readonly("id", &PyWorker::id)
      .def_property_readonly("rank", &PyWorker::rank)
      .def_property_readonly("num_workers", &PyWorker::num_workers)
      .def_property_readonly("num_servers", &PyWorker::num_servers)
      .def_property_readonly("parked_requests", &PyWorker::parked)
      .def("nodes", &PyWorker::Nodes)
      .def("stats", &PyWorker::Stats)
      .def("send_to", &PyWorker::SendTo, py::return_value_policy::take_ownership)
      .def("recv_from", &PyWorker::RecvFrom, py::return_value_policy::take_ownership)
      .def("allreduce", &PyWorker::AllReduce, py::arg("data"), py::arg("timeout") = py::none(),
           py::arg("ranks") = py::none(), py::arg("segment_bytes") = py::none(),
           py::arg("algorithm") = "auto")
      .def("traffic", &PyWorker::Traffic)
      .def("install_placement", &PyWorker::InstallPlacement, py::arg("layers"),
           py::arg("timeout") = py::none())
      .def("placement", &PyWorker::Placement)
      .def("table_servers", &PyWorker::TableServers);
  BindTrainer(m);
}
