// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PyWorker, the C++ side of layerps._core.Worker (bound in bind_worker.cc), and what the
// other bindings (trainer.cc, collectives.cc) need of a Python Worker: its ps::Worker
// (WorkerOf) and requests that return a Handle (SubmitOn).
//
// Arrays are used in place: float32 C-contiguous values and 64-bit integer keys are
// passed to the Worker without a copy. Anything else is refused here with
// InvalidArgument (the pure-Python layer converts what it may convert first). The GIL is
// released around every call that can block and around request submission.
#ifndef LAYERPS_PYTHON_WORKER_H_
#define LAYERPS_PYTHON_WORKER_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "handles.h"
#include "ps/ps.h"

namespace layerps_python {

class PyWorker {
 public:
  explicit PyWorker(ps::Options options);

  void Start();
  void Stop();
  uint32_t DeclareTable(const ps::TableSpec& spec);
  void SetLearningRate(uint32_t table, float learning_rate);
  std::string Checkpoint(const std::string& dir, double timeout_s);
  void DropTable(const std::string& name);
  ps::TableSpec GetTableSpec(uint32_t table) const;
  int Barrier(ps::Group group, std::optional<double> timeout_s);

  // Worker::Flush, in slices so that Ctrl-C is noticed (None: no limit of our own; every
  // request is bounded by its request_timeout_ms anyway).
  void Flush(std::optional<double> timeout_s);

  int Join(std::optional<double> timeout_s);

  // --- Dense ---------------------------------------------------------------------------
  Handle* Push(uint32_t table, const pybind11::array& grad);
  Handle* Pull(uint32_t table, std::optional<pybind11::array> out);
  Handle* PushPull(uint32_t table, const pybind11::array& grad,
                   std::optional<pybind11::array> out);
  Handle* Assign(uint32_t table, const pybind11::array& values);

  // --- Sparse --------------------------------------------------------------------------
  Handle* PushSparse(uint32_t table, const pybind11::array& keys, const pybind11::array& rows);
  Handle* PullSparse(uint32_t table, const pybind11::array& keys,
                     std::optional<pybind11::array> out);
  Handle* AssignSparse(uint32_t table, const pybind11::array& keys, const pybind11::array& rows);
  // Several sparse tables in one request (Worker::PushSparseMany/PullSparseMany): one
  // fused message per server. Pushes take (table id, keys, rows) tuples; pulls take
  // (table id, keys) or (table id, keys, out) and their Handle's wait() returns the list
  // of outputs, one (len(keys), dim) array per entry. Checked as push_sparse/pull_sparse
  // check, each error naming its entry.
  Handle* PushSparseMany(const pybind11::sequence& entries);
  Handle* PullSparseMany(const pybind11::sequence& entries);

  // --- GPU memory (Worker::PushDevice...; docs/cuda.md) ----------------------------------
  // Device pointers and a cudaStream_t as integers (torch: tensor.data_ptr(),
  // torch.cuda.current_stream().cuda_stream); `keep` holds the tensors until the request
  // completed. Sizes are element counts, checked against the table as by the host calls.
  // Without CUDA support every call fails with FailedPreconditionError naming why.
  Handle* PushDevice(uint32_t table, uintptr_t grad, size_t n, uintptr_t stream,
                     pybind11::object keep);
  Handle* PullDevice(uint32_t table, uintptr_t out, size_t n, uintptr_t stream,
                     pybind11::object keep);
  Handle* PushSparseDevice(uint32_t table, uintptr_t keys, size_t num_keys, uintptr_t rows,
                           size_t rows_len, uintptr_t stream, pybind11::object keep);
  Handle* PullSparseDevice(uint32_t table, uintptr_t keys, size_t num_keys, uintptr_t out,
                           size_t rows_len, uintptr_t stream, pybind11::object keep);
  // Worker::PushSparseManyDevice/PullSparseManyDevice: entries of (table id, keys
  // pointer, num_keys, rows or output pointer, rows_len).
  Handle* PushSparseManyDevice(const pybind11::sequence& entries, uintptr_t stream,
                               pybind11::object keep);
  Handle* PullSparseManyDevice(const pybind11::sequence& entries, uintptr_t stream,
                               pybind11::object keep);

  // --- Worker to worker ---------------------------------------------------------------
  Handle* SendTo(uint32_t to, uint64_t tag, const pybind11::array& values);
  Handle* RecvFrom(uint32_t from, uint64_t tag, const pybind11::array& out);

  // In place, blocking, GIL released: every participant calls it with the same size.
  void AllReduce(pybind11::array& data, std::optional<double> timeout_s,
                 std::optional<std::vector<uint32_t>> ranks, std::optional<size_t> segment_bytes,
                 const std::string& algorithm);

  pybind11::dict Traffic() const;

  void InstallPlacement(const std::vector<std::pair<std::string, std::vector<uint32_t>>>& layers,
                        std::optional<double> timeout_s);
  pybind11::dict Placement() const;
  std::vector<uint32_t> TableServers(uint32_t table) const { return w().TableServers(table); }

  uint32_t id() const { return w().id(); }
  uint32_t rank() const { return w().rank(); }
  int num_workers() const { return w().num_workers(); }
  int num_servers() const { return w().num_servers(); }
  std::vector<ps::NodeInfo> Nodes() const { return w().Nodes(); }
  size_t parked() const { return state_->orphans.size(); }

  pybind11::dict Stats() const;

  // The C++ worker (WorkerOf, for the Trainer binding).
  ps::Worker& worker() const { return w(); }

  // A request started by another translation unit (SubmitOn).
  Handle* SubmitExternal(std::string what, pybind11::object keep, pybind11::object result,
                         const std::function<ps::Ticket(ps::Worker&)>& start);

 private:
  ps::Worker& w() const { return *state_->worker; }

  // Sends with the GIL released: `send` must not touch Python objects (pointers and sizes
  // are taken before), whose references `keep` holds for the Handle.
  template <typename F>
  Handle* Submit(std::string what, pybind11::object keep, pybind11::object result, F&& send);

  ps::TableSpec Dense(uint32_t table, const char* op) const;
  ps::TableSpec Sparse(uint32_t table, const char* op) const;

  std::shared_ptr<WorkerState> state_;
};

// The ps::Worker inside a layerps._core.Worker object (InvalidArgument for anything else).
ps::Worker& WorkerOf(pybind11::handle core_worker);

// Starts a request of a layerps._core.Worker with the GIL released (`start` must not
// touch Python objects) and returns its layerps._core.Handle: it keeps `keep` alive until
// the request completed, and wait() returns `result`.
pybind11::object SubmitOn(pybind11::handle core_worker, std::string what, pybind11::object keep,
                          pybind11::object result,
                          const std::function<ps::Ticket(ps::Worker&)>& start);

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_WORKER_H_
