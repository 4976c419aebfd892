// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PyWorker (worker.h): the checks of the arrays a request uses in place, the requests
// themselves, and WorkerOf/SubmitOn for the other bindings.
#include "worker.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "timeouts.h"

namespace py = pybind11;

namespace layerps_python {
namespace {

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

void CheckDense(const ps::TableSpec& spec, const py::array& a, const char* op, const char* what,
                bool writable) {
  const std::string ctx = std::string(op) + " '" + spec.name + "' " + what;
  CheckFloatArray(a, ctx.c_str(), writable);
  if (static_cast<uint64_t>(a.size()) != spec.size) {
    ThrowInvalid(ctx + ": the table has " + std::to_string(spec.size) +
                 " elements, the array has " + std::to_string(a.size()) + " (shape " +
                 ShapeString(a) + ")");
  }
}

void CheckSparse(const ps::TableSpec& spec, const py::array& keys, const py::array& rows,
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

// Entry i of a *_sparse_many call: a tuple (or list) of min_items..max_items items whose
// first is a table id. Sets *table and returns the items.
py::sequence ManyEntry(const py::handle& entry, const std::string& ctx, size_t min_items,
                       size_t max_items, uint32_t* table) {
  if (!py::isinstance<py::tuple>(entry) && !py::isinstance<py::list>(entry)) {
    ThrowInvalid(ctx + ": expected a tuple (table, keys" + (max_items == 3 ? ", rows)" : ")") +
                 ", got " + py::str(py::type::of(entry)).cast<std::string>());
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(entry);
  if (items.size() < min_items || items.size() > max_items) {
    ThrowInvalid(ctx + ": expected " + std::to_string(min_items) +
                 (min_items == max_items ? "" : " or " + std::to_string(max_items)) +
                 " items, got " + std::to_string(items.size()));
  }
  try {
    *table = items[0].cast<uint32_t>();
  } catch (const py::cast_error&) {
    ThrowInvalid(ctx + ": the table must be a table id (int)");
  }
  return items;
}

// The spec of entry i's table, which must be a declared sparse table.
ps::TableSpec ManySpec(const ps::Worker& w, uint32_t table, const std::string& ctx) {
  ps::StatusOr<ps::TableSpec> spec = w.GetTableSpec(table);
  if (!spec.ok()) {
    ThrowInvalid(ctx + " (table id " + std::to_string(table) +
                 "): unknown table (declare it first)");
  }
  if (spec->kind != ps::TableKind::kSparse) {
    ThrowInvalid(ctx + " (table '" + spec->name + "'): the table is dense");
  }
  return *spec;
}

py::array ManyArray(const py::handle& item, const std::string& what) {
  if (!py::isinstance<py::array>(item)) {
    ThrowInvalid(what + ": expected a numpy array, got " +
                 py::str(py::type::of(item)).cast<std::string>());
  }
  return py::reinterpret_borrow<py::array>(item);
}

py::array NewFloat(std::vector<py::ssize_t> shape) { return py::array_t<float>(shape); }
const float* Data(const py::array& a) { return static_cast<const float*>(a.data()); }
float* MutableData(py::array& a) { return static_cast<float*>(a.mutable_data()); }
const ps::Key* Keys(const py::array& a) { return static_cast<const ps::Key*>(a.data()); }

}  // namespace

// ---- Worker ---------------------------------------------------------------------------

template <typename F>
Handle* PyWorker::Submit(std::string what, py::object keep, py::object result, F&& send) {
  state_->ReapOrphans();
  ps::Ticket t;
  {
    py::gil_scoped_release release;
    t = send();
  }
  return new Handle(state_, t, std::move(what), std::move(keep), std::move(result));
}

PyWorker::PyWorker(ps::Options options) : state_(std::make_shared<WorkerState>()) {
  state_->worker = std::make_unique<ps::Worker>(std::move(options));
}

void PyWorker::Start() {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = w().Start();
  }
  ThrowIfError(s);
}

void PyWorker::Stop() {
  {
    py::gil_scoped_release release;
    w().Stop();
  }
  state_->ReapOrphans();
}

uint32_t PyWorker::DeclareTable(const ps::TableSpec& spec) {
  ps::StatusOr<ps::TableId> id = ps::Status();
  {
    py::gil_scoped_release release;
    id = w().DeclareTable(spec);
  }
  ThrowIfError(id.status());
  return *id;
}

void PyWorker::SetLearningRate(uint32_t table, float learning_rate) {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = w().SetLearningRate(table, learning_rate);
  }
  ThrowIfError(s);
}

std::string PyWorker::Checkpoint(const std::string& dir, double timeout_s) {
  if (!(timeout_s > 0) || timeout_s > 86400) ThrowIfError(ps::InvalidArgument("checkpoint: timeout must be in (0, 86400] seconds"));
  ps::StatusOr<std::string> path = ps::Status();
  {
    py::gil_scoped_release release;
    path = w().Checkpoint(dir, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
  ThrowIfError(path.status());
  return *path;
}

void PyWorker::DropTable(const std::string& name) {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = w().DropTable(name);
  }
  ThrowIfError(s);
}

ps::TableSpec PyWorker::GetTableSpec(uint32_t table) const {
  ps::StatusOr<ps::TableSpec> spec = w().GetTableSpec(table);
  ThrowIfError(spec.status());
  return *spec;
}

int PyWorker::Barrier(ps::Group group, std::optional<double> timeout_s) {
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

void PyWorker::Flush(std::optional<double> timeout_s) {
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

int PyWorker::Join(std::optional<double> timeout_s) {
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
Handle* PyWorker::Push(uint32_t table, const py::array& grad) {
  const ps::TableSpec spec = Dense(table, "push");
  CheckDense(spec, grad, "push", "gradient", false);
  const float* g = Data(grad);
  const size_t n = grad.size();
  return Submit("push to '" + spec.name + "'", py::make_tuple(grad), py::none(),
                [&] { return w().Push(table, g, n); });
}

Handle* PyWorker::Pull(uint32_t table, std::optional<py::array> out) {
  const ps::TableSpec spec = Dense(table, "pull");
  py::array o = out ? *out : NewFloat({static_cast<py::ssize_t>(spec.size)});
  CheckDense(spec, o, "pull", "output", true);
  float* dst = MutableData(o);
  const size_t n = o.size();
  return Submit("pull from '" + spec.name + "'", py::make_tuple(o), o,
                [&] { return w().Pull(table, dst, n); });
}

Handle* PyWorker::PushPull(uint32_t table, const py::array& grad,
                           std::optional<py::array> out) {
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

Handle* PyWorker::Assign(uint32_t table, const py::array& values) {
  const ps::TableSpec spec = Dense(table, "assign");
  CheckDense(spec, values, "assign", "values", false);
  const float* v = Data(values);
  const size_t n = values.size();
  return Submit("assign to '" + spec.name + "'", py::make_tuple(values), py::none(),
                [&] { return w().Assign(table, v, n); });
}

// --- GPU memory ----------------------------------------------------------------------
Handle* PyWorker::PushDevice(uint32_t table, uintptr_t grad, size_t n, uintptr_t stream,
                             py::object keep) {
  const ps::TableSpec spec = Dense(table, "push");
  return Submit("push to '" + spec.name + "' from GPU memory", std::move(keep), py::none(), [&] {
    return w().PushDevice(table, reinterpret_cast<const float*>(grad), n,
                          reinterpret_cast<void*>(stream));
  });
}

Handle* PyWorker::PullDevice(uint32_t table, uintptr_t out, size_t n, uintptr_t stream,
                             py::object keep) {
  const ps::TableSpec spec = Dense(table, "pull");
  return Submit("pull from '" + spec.name + "' into GPU memory", std::move(keep), py::none(),
                [&] {
                  return w().PullDevice(table, reinterpret_cast<float*>(out), n,
                                        reinterpret_cast<void*>(stream));
                });
}

Handle* PyWorker::PushSparseDevice(uint32_t table, uintptr_t keys, size_t num_keys, uintptr_t rows,
                                   size_t rows_len, uintptr_t stream, py::object keep) {
  const ps::TableSpec spec = Sparse(table, "push_sparse");
  return Submit("push_sparse to '" + spec.name + "' from GPU memory", std::move(keep), py::none(),
                [&] {
                  return w().PushSparseDevice(table, reinterpret_cast<const ps::Key*>(keys),
                                              num_keys, reinterpret_cast<const float*>(rows),
                                              rows_len, reinterpret_cast<void*>(stream));
                });
}

Handle* PyWorker::PullSparseDevice(uint32_t table, uintptr_t keys, size_t num_keys, uintptr_t out,
                                   size_t rows_len, uintptr_t stream, py::object keep) {
  const ps::TableSpec spec = Sparse(table, "pull_sparse");
  return Submit("pull_sparse from '" + spec.name + "' into GPU memory", std::move(keep),
                py::none(), [&] {
                  return w().PullSparseDevice(table, reinterpret_cast<const ps::Key*>(keys),
                                              num_keys, reinterpret_cast<float*>(out), rows_len,
                                              reinterpret_cast<void*>(stream));
                });
}

namespace {
// (table, keys pointer, num_keys, rows pointer, rows_len) of a *_many_device entry.
struct DeviceEntry {
  uint32_t table;
  uintptr_t keys;
  size_t num_keys;
  uintptr_t rows;
  size_t rows_len;
};
std::vector<DeviceEntry> DeviceEntries(const py::sequence& entries, const char* what) {
  std::vector<DeviceEntry> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    py::sequence e = entries[i].cast<py::sequence>();
    if (e.size() != 5) {
      ThrowInvalid(std::string(what) + " entry " + std::to_string(i) +
                   ": (table, keys, num_keys, rows, rows_len)");
    }
    out.push_back({e[0].cast<uint32_t>(), e[1].cast<uintptr_t>(), e[2].cast<size_t>(),
                   e[3].cast<uintptr_t>(), e[4].cast<size_t>()});
  }
  return out;
}
}  // namespace

Handle* PyWorker::PushSparseManyDevice(const py::sequence& entries, uintptr_t stream,
                                       py::object keep) {
  std::vector<ps::SparseRef> refs;
  for (const DeviceEntry& e : DeviceEntries(entries, "push_sparse_many")) {
    refs.push_back({e.table, reinterpret_cast<const ps::Key*>(e.keys), e.num_keys,
                    reinterpret_cast<const float*>(e.rows), e.rows_len});
  }
  return Submit("push_sparse_many of " + std::to_string(refs.size()) + " entries from GPU memory",
                std::move(keep), py::none(), [&] {
                  return w().PushSparseManyDevice(refs, reinterpret_cast<void*>(stream));
                });
}

Handle* PyWorker::PullSparseManyDevice(const py::sequence& entries, uintptr_t stream,
                                       py::object keep) {
  std::vector<ps::SparseOut> outs;
  for (const DeviceEntry& e : DeviceEntries(entries, "pull_sparse_many")) {
    outs.push_back({e.table, reinterpret_cast<const ps::Key*>(e.keys), e.num_keys,
                    reinterpret_cast<float*>(e.rows), e.rows_len});
  }
  return Submit("pull_sparse_many of " + std::to_string(outs.size()) + " entries into GPU memory",
                std::move(keep), py::none(), [&] {
                  return w().PullSparseManyDevice(outs, reinterpret_cast<void*>(stream));
                });
}

// --- Sparse --------------------------------------------------------------------------
Handle* PyWorker::PushSparse(uint32_t table, const py::array& keys, const py::array& rows) {
  const ps::TableSpec spec = Sparse(table, "push_sparse");
  CheckSparse(spec, keys, rows, "push_sparse", "rows", false);
  const ps::Key* k = Keys(keys);
  const size_t nk = keys.size();
  const float* r = Data(rows);
  const size_t nr = rows.size();
  return Submit("push_sparse to '" + spec.name + "'", py::make_tuple(keys, rows), py::none(),
                [&] { return w().PushSparse(table, k, nk, r, nr); });
}

Handle* PyWorker::PullSparse(uint32_t table, const py::array& keys,
                             std::optional<py::array> out) {
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

Handle* PyWorker::AssignSparse(uint32_t table, const py::array& keys, const py::array& rows) {
  const ps::TableSpec spec = Sparse(table, "assign_sparse");
  CheckSparse(spec, keys, rows, "assign_sparse", "rows", false);
  const ps::Key* k = Keys(keys);
  const size_t nk = keys.size();
  const float* r = Data(rows);
  const size_t nr = rows.size();
  return Submit("assign_sparse to '" + spec.name + "'", py::make_tuple(keys, rows), py::none(),
                [&] { return w().AssignSparse(table, k, nk, r, nr); });
}

Handle* PyWorker::PushSparseMany(const py::sequence& entries) {
  std::vector<ps::SparseRef> refs;
  py::list keep;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string ctx = "push_sparse_many entry " + std::to_string(i);
    uint32_t table = 0;
    py::sequence e = ManyEntry(entries[i], ctx, 3, 3, &table);
    const ps::TableSpec spec = ManySpec(w(), table, ctx);
    py::array keys = ManyArray(e[1], ctx + " keys");
    py::array rows = ManyArray(e[2], ctx + " rows");
    CheckSparse(spec, keys, rows, ctx.c_str(), "rows", false);
    refs.push_back({table, Keys(keys), static_cast<size_t>(keys.size()), Data(rows),
                    static_cast<size_t>(rows.size())});
    keep.append(keys);
    keep.append(rows);
  }
  return Submit("push_sparse_many of " + std::to_string(refs.size()) + " entries", keep, py::none(),
                [&] { return w().PushSparseMany(refs); });
}

Handle* PyWorker::PullSparseMany(const py::sequence& entries) {
  std::vector<ps::SparseOut> outs;
  py::list keep, results;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string ctx = "pull_sparse_many entry " + std::to_string(i);
    uint32_t table = 0;
    py::sequence e = ManyEntry(entries[i], ctx, 2, 3, &table);
    const ps::TableSpec spec = ManySpec(w(), table, ctx);
    py::array keys = ManyArray(e[1], ctx + " keys");
    CheckKeyArray(keys);
    py::array o =
        e.size() == 3 && !e[2].is_none()
            ? ManyArray(e[2], ctx + " output")
            : NewFloat({static_cast<py::ssize_t>(keys.size()), static_cast<py::ssize_t>(spec.dim)});
    CheckSparse(spec, keys, o, ctx.c_str(), "output", true);
    outs.push_back({table, Keys(keys), static_cast<size_t>(keys.size()), MutableData(o),
                    static_cast<size_t>(o.size())});
    keep.append(keys);
    keep.append(o);
    results.append(o);
  }
  return Submit("pull_sparse_many of " + std::to_string(outs.size()) + " entries", keep, results,
                [&] { return w().PullSparseMany(outs); });
}

// --- Worker to worker ---------------------------------------------------------------
Handle* PyWorker::SendTo(uint32_t to, uint64_t tag, const py::array& values) {
  if (values.dtype().kind() != 'f' || values.itemsize() != 4 ||
      !(values.flags() & py::array::c_style)) {
    ThrowInvalid("send_to: values must be a C-contiguous float32 array");
  }
  const float* v = Data(values);
  const size_t n = values.size();
  return Submit("send to worker " + std::to_string(to), py::make_tuple(values), py::none(),
                [&] { return w().communicator().SendTo(to, tag, v, n); });
}

Handle* PyWorker::RecvFrom(uint32_t from, uint64_t tag, const py::array& out) {
  if (out.dtype().kind() != 'f' || out.itemsize() != 4 || !(out.flags() & py::array::c_style) ||
      !out.writeable()) {
    ThrowInvalid("recv_from: out must be a writable C-contiguous float32 array");
  }
  py::array o = out;
  float* dst = MutableData(o);
  const size_t n = o.size();
  return Submit("receive from worker " + std::to_string(from), py::make_tuple(o), o,
                [&] { return w().communicator().RecvFrom(from, tag, dst, n); });
}

void PyWorker::AllReduce(py::array& data, std::optional<double> timeout_s,
                         std::optional<std::vector<uint32_t>> ranks,
                         std::optional<size_t> segment_bytes, const std::string& algorithm) {
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
    s = w().communicator().AllReduce(d, n, options, t);
  }
  ThrowIfError(s);
}

py::dict PyWorker::Traffic() const {
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

void PyWorker::InstallPlacement(
    const std::vector<std::pair<std::string, std::vector<uint32_t>>>& layers,
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

py::dict PyWorker::Placement() const {
  py::dict d;
  for (const auto& l : w().Placement()) d[py::str(l.layer)] = l.servers;
  return d;
}

py::dict PyWorker::Stats() const {
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
  d["replies_in_wait"] = s.replies_in_wait;
  return d;
}

Handle* PyWorker::SubmitExternal(std::string what, py::object keep, py::object result,
                                 const std::function<ps::Ticket(ps::Worker&)>& start) {
  return Submit(std::move(what), std::move(keep), std::move(result), [&] { return start(w()); });
}

ps::TableSpec PyWorker::Dense(uint32_t table, const char* op) const {
  ps::TableSpec spec = GetTableSpec(table);
  if (spec.kind != ps::TableKind::kDense) {
    ThrowInvalid(std::string(op) + ": table '" + spec.name + "' is sparse; use " + op +
                 "_sparse");
  }
  return spec;
}

ps::TableSpec PyWorker::Sparse(uint32_t table, const char* op) const {
  ps::TableSpec spec = GetTableSpec(table);
  if (spec.kind != ps::TableKind::kSparse) {
    ThrowInvalid(std::string(op) + ": table '" + spec.name + "' is dense");
  }
  return spec;
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
