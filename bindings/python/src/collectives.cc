// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core's typed collectives (ps/collectives.h): module functions taking a
// layerps._core.Worker and numpy arrays, used in place. Each *_async function returns a
// Handle (wait() returns the output array, the list of outputs, or a GatherResult);
// join_collectives, barrier_collective and the hybrid's row exchanges
// (allgather_rows, rows_to_owners, rows_to_root, pull_rows_through_root) block with the
// GIL released. The element type
// is named by the caller ("float32", "bfloat16"...) and every array, input or output, must
// hold exactly that type: an output of another dtype is refused (InvalidArgumentError
// naming both), never filled with reinterpreted bits. bfloat16 has no numpy dtype, so its
// arrays come as 2-byte integer views. Ranks (root, the process set's ranks) are taken as
// signed integers and checked here, so that -1 is an InvalidArgumentError naming the
// valid range rather than pybind's TypeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bind.h"
#include "errors.h"
#include "ps/ps.h"
#include "worker.h"

namespace py = pybind11;

namespace layerps_python {
namespace {

ps::DataType TypeNamed(const std::string& name) {
  ps::StatusOr<ps::DataType> t = ps::ParseDataType(name);
  ThrowIfError(t.status());
  return *t;
}

// True when numpy dtype `d` holds elements of `type` (bfloat16: any 2-byte integer view).
bool Holds(const py::dtype& d, ps::DataType type) {
  const char kind = d.kind();
  const auto size = static_cast<size_t>(d.itemsize());
  if (size != ps::DataTypeSize(type)) return false;
  switch (type) {
    case ps::DataType::kFloat32:
    case ps::DataType::kFloat16:
    case ps::DataType::kFloat64:
      return kind == 'f';
    case ps::DataType::kBFloat16:
      return kind == 'i' || kind == 'u';
    case ps::DataType::kInt32:
    case ps::DataType::kInt64:
      return kind == 'i';
    case ps::DataType::kUInt8:
      return kind == 'u';
  }
  return false;
}

// The array's element type in words: its numpy dtype ("int32"), or "bfloat16" for the
// 2-byte integer view a bfloat16 tensor arrives as when bfloat16 was expected.
// (No other 2-byte integer type is a collective's: the Python layer refuses them.)
std::string DtypeName(const py::array& a) {
  const py::dtype d = a.dtype();
  if (d.itemsize() == 2 && (d.kind() == 'i' || d.kind() == 'u')) return "bfloat16";
  return d.attr("name").cast<std::string>();
}

// A C-contiguous array of `type` elements (writable when `writable`). A wrong dtype is
// an error, never a reinterpretation of the bits, even when the element sizes agree.
void CheckArray(const py::array& a, ps::DataType type, const std::string& what, bool writable) {
  if (!Holds(a.dtype(), type)) {
    ThrowInvalid(what + ": the array's dtype is " + DtypeName(a) + ", the collective's " +
                 ps::DataTypeName(type) + " (a wrong dtype is an error, never a conversion)");
  }
  if ((a.flags() & py::array::c_style) == 0) ThrowInvalid(what + ": the array must be C-contiguous");
  if (writable && !a.writeable()) ThrowInvalid(what + ": the output array is read-only");
}

// An output beside its input, both of `type` (the input's): the output must be of the
// input's dtype (the message names both), C-contiguous and writable.
void CheckOutput(const py::array& out, ps::DataType type, const std::string& what) {
  if (!Holds(out.dtype(), type)) {
    ThrowInvalid(what + ": the output's dtype " + DtypeName(out) + " differs from the input's " +
                 ps::DataTypeName(type) + " (a wrong dtype is an error, never a conversion)");
  }
  CheckArray(out, type, what + " output", true);
}

std::string ShapeText(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    s += (d ? ", " : "") + std::to_string(a.shape(d));
  }
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// Same shape (an all-reduce's output is like its input).
void CheckSameShape(const py::array& in, const py::array& out, const std::string& what) {
  if (in.size() != out.size()) {
    ThrowInvalid(what + ": the input has " + std::to_string(in.size()) + " elements, the output " +
                 std::to_string(out.size()));
  }
  bool same = in.ndim() == out.ndim();
  for (py::ssize_t d = 0; same && d < in.ndim(); ++d) same = in.shape(d) == out.shape(d);
  if (!same) {
    ThrowInvalid(what + ": the output's shape " + ShapeText(out) + " differs from the input's " +
                 ShapeText(in));
  }
}

// Number of workers of the cluster (the valid ranks are 0..workers-1).
size_t NumWorkers(py::handle worker) { return WorkerOf(worker).num_workers(); }

// A rank argument (`what`: "broadcast: root"), given as any Python int: 0..workers-1, or
// InvalidArgumentError naming the value and the range.
uint32_t RankArg(py::handle worker, int64_t rank, const std::string& what) {
  const size_t workers = NumWorkers(worker);  // 0 before Start: the core says so
  if (rank < 0 || rank > int64_t{0xffffffff} ||
      (workers > 0 && static_cast<uint64_t>(rank) >= workers)) {
    ThrowInvalid(what + " " + std::to_string(rank) + " is not a worker rank (valid: 0.." +
                 std::to_string(static_cast<int64_t>(workers) - 1) + ")");
  }
  return static_cast<uint32_t>(rank);
}

// A process set's ranks, each checked as RankArg does (None stays None: every worker).
std::optional<std::vector<uint32_t>> RanksArg(py::handle worker,
                                              const std::optional<std::vector<int64_t>>& ranks) {
  if (!ranks) return std::nullopt;
  std::vector<uint32_t> out;
  out.reserve(ranks->size());
  for (int64_t r : *ranks) out.push_back(RankArg(worker, r, "process set: rank"));
  return out;
}

ps::CollectiveOptions Options(py::handle worker, const std::optional<std::vector<int64_t>>& ranks,
                              const std::string& algorithm, std::optional<size_t> segment_bytes,
                              std::optional<double> timeout_s, const std::string& name) {
  ps::CollectiveOptions o;
  if (auto checked = RanksArg(worker, ranks)) o.ranks = std::move(*checked);
  if (algorithm == "ring") {
    o.algorithm = ps::AllReduceAlgorithm::kRing;
  } else if (algorithm == "direct") {
    o.algorithm = ps::AllReduceAlgorithm::kDirect;
  } else if (algorithm != "auto") {
    ThrowInvalid("algorithm must be 'auto', 'ring' or 'direct', not '" + algorithm + "'");
  }
  if (segment_bytes) o.segment_bytes = *segment_bytes;
  if (timeout_s) {
    if (!(*timeout_s >= 0) || *timeout_s > 1e9) ThrowInvalid("timeout must be >= 0 seconds (or None)");
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0 + 0.5));
    if (o.timeout.count() == 0) o.timeout = std::chrono::milliseconds(1);
  }
  o.name = name;
  return o;
}

// Members of a collective's set: its ranks, or every worker when none are named. The C++
// calls that take fixed-size outputs write members x n elements: the arrays are checked
// against this before a byte moves.
size_t SetSize(py::handle worker, const std::optional<std::vector<int64_t>>& ranks) {
  return ranks && !ranks->empty() ? ranks->size() : WorkerOf(worker).num_workers();
}

// True when the byte ranges of two arrays overlap.
bool Overlap(const py::array& a, const py::array& b) {
  const auto* a0 = static_cast<const uint8_t*>(a.data());
  const auto* b0 = static_cast<const uint8_t*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

ps::AllReduceOptions ReduceOptions(const ps::CollectiveOptions& base, const std::string& op,
                                   double prescale, double postscale, const std::string& wire) {
  ps::AllReduceOptions o;
  static_cast<ps::CollectiveOptions&>(o) = base;
  ps::StatusOr<ps::ReduceOp> r = ps::ParseReduceOp(op);
  ThrowIfError(r.status());
  o.op = *r;
  o.prescale = prescale;
  o.postscale = postscale;
  ps::StatusOr<ps::WireDType> w = ps::ParseWireDType(wire);
  ThrowIfError(w.status());
  o.wire_dtype = *w;
  return o;
}

#define LAYERPS_COLLECTIVE_ARGS                                                          \
  py::arg("ranks") = py::none(), py::arg("algorithm") = "auto",                          \
  py::arg("segment_bytes") = py::none(), py::arg("timeout") = py::none(), py::arg("name") = ""

}  // namespace

void BindCollectives(py::module_& m) {
  py::class_<ps::GatherResult, std::shared_ptr<ps::GatherResult>>(m, "GatherResult",
                                                                 py::buffer_protocol())
      .def_readonly("counts", &ps::GatherResult::counts)
      .def_buffer([](ps::GatherResult& r) {
        return py::buffer_info(r.data.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(r.data.size())}, {1});
      });

  m.def("reduce_scatter_block", &ps::Communicator::ReduceScatterBlock, py::arg("n"), py::arg("members"),
        py::arg("position"));
  m.def("reduce_scatter_offset", &ps::Communicator::ReduceScatterOffset, py::arg("n"),
        py::arg("members"), py::arg("position"));

  m.def(
      "allreduce_async",
      [](py::handle worker, py::array in, py::array out, const std::string& dtype,
         const std::string& op, double prescale, double postscale, const std::string& wire,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "allreduce input", false);
        CheckOutput(out, t, "allreduce");
        CheckSameShape(in, out, "allreduce");
        const ps::AllReduceOptions o =
            ReduceOptions(Options(worker, ranks, algorithm, segment_bytes, timeout, name), op,
                          prescale, postscale, wire);
        const void* src = in.data();
        void* dst = out.mutable_data();
        const size_t n = out.size();
        return SubmitOn(worker, "allreduce", py::make_tuple(in, out), out, [&](ps::Worker& w) {
          return w.communicator().AllReduceAsync(src, dst, n, t, o);
        });
      },
      py::arg("worker"), py::arg("input"), py::arg("output"), py::arg("dtype"),
      py::arg("op") = "sum", py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
      py::arg("wire") = "fp32", LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "grouped_allreduce_async",
      [](py::handle worker, std::vector<py::array> ins, std::vector<py::array> outs,
         std::vector<std::string> dtypes, const std::string& op, double prescale, double postscale,
         const std::string& wire, std::optional<std::vector<int64_t>> ranks,
         const std::string& algorithm, std::optional<size_t> segment_bytes,
         std::optional<double> timeout, const std::string& name) {
        if (ins.size() != outs.size() || ins.size() != dtypes.size()) {
          ThrowInvalid("grouped_allreduce: as many inputs, outputs and dtypes, please");
        }
        std::vector<ps::CollectiveTensor> tensors;
        for (size_t i = 0; i < ins.size(); ++i) {
          const ps::DataType t = TypeNamed(dtypes[i]);
          const std::string which = "grouped_allreduce tensor " + std::to_string(i);
          CheckArray(ins[i], t, which + " input", false);
          CheckOutput(outs[i], t, which);
          CheckSameShape(ins[i], outs[i], which);
          tensors.push_back({ins[i].data(), outs[i].mutable_data(), static_cast<size_t>(outs[i].size()), t});
        }
        const ps::AllReduceOptions o =
            ReduceOptions(Options(worker, ranks, algorithm, segment_bytes, timeout, name), op,
                          prescale, postscale, wire);
        py::list result;
        for (auto& a : outs) result.append(a);
        return SubmitOn(worker, "grouped_allreduce", py::make_tuple(py::cast(ins), result), result,
                        [&](ps::Worker& w) { return w.communicator().GroupedAllReduceAsync(tensors, o); });
      },
      py::arg("worker"), py::arg("inputs"), py::arg("outputs"), py::arg("dtypes"),
      py::arg("op") = "sum", py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
      py::arg("wire") = "fp32", LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "allgather_async",
      [](py::handle worker, py::array in, py::array out, const std::string& dtype,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "allgather input", false);
        CheckOutput(out, t, "allgather");
        const ps::CollectiveOptions o =
            Options(worker, ranks, algorithm, segment_bytes, timeout, name);
        const void* src = in.data();
        void* dst = out.mutable_data();
        const size_t n = in.size();
        const size_t members = SetSize(worker, ranks);
        if (static_cast<size_t>(out.size()) != members * n) {
          ThrowInvalid("allgather: the output must hold members (" + std::to_string(members) +
                       ") x " + std::to_string(n) + " elements, not " + std::to_string(out.size()));
        }
        return SubmitOn(worker, "allgather", py::make_tuple(in, out), out,
                        [&](ps::Worker& w) { return w.communicator().AllGatherAsync(src, n, t, dst, o); });
      },
      py::arg("worker"), py::arg("input"), py::arg("output"), py::arg("dtype"),
      LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "allgatherv_async",
      [](py::handle worker, py::array in, const std::string& dtype,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "allgather input", false);
        const ps::CollectiveOptions o =
            Options(worker, ranks, algorithm, segment_bytes, timeout, name);
        auto result = std::make_shared<ps::GatherResult>();
        ps::GatherResult* r = result.get();
        const void* src = in.data();
        const size_t n = in.size();
        return SubmitOn(worker, "allgather", py::make_tuple(in), py::cast(result),
                        [&](ps::Worker& w) { return w.communicator().AllGatherVAsync(src, n, t, r, o); });
      },
      py::arg("worker"), py::arg("input"), py::arg("dtype"), LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "broadcast_async",
      [](py::handle worker, py::array data, const std::string& dtype, int64_t root_arg,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(data, t, "broadcast", true);
        const uint32_t root = RankArg(worker, root_arg, "broadcast: root");
        const ps::CollectiveOptions o =
            Options(worker, ranks, algorithm, segment_bytes, timeout, name);
        void* d = data.mutable_data();
        const size_t n = data.size();
        return SubmitOn(worker, "broadcast", py::make_tuple(data), data,
                        [&](ps::Worker& w) { return w.communicator().BroadcastAsync(d, n, t, root, o); });
      },
      py::arg("worker"), py::arg("data"), py::arg("dtype"), py::arg("root"),
      LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "alltoall_async",
      [](py::handle worker, py::array in, py::array out, const std::string& dtype,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "alltoall input", false);
        CheckOutput(out, t, "alltoall");
        const size_t members = SetSize(worker, ranks);
        if (in.size() != out.size() || members == 0 || in.size() % members != 0) {
          ThrowInvalid("alltoall: input and output must both hold members (" +
                       std::to_string(members) + ") x n elements; they hold " +
                       std::to_string(in.size()) + " and " + std::to_string(out.size()));
        }
        if (Overlap(in, out)) ThrowInvalid("alltoall: the output must not overlap the input");
        const ps::CollectiveOptions o =
            Options(worker, ranks, algorithm, segment_bytes, timeout, name);
        const void* src = in.data();
        void* dst = out.mutable_data();
        const size_t n = in.size() / members;
        return SubmitOn(worker, "alltoall", py::make_tuple(in, out), out,
                        [&](ps::Worker& w) { return w.communicator().AllToAllAsync(src, n, t, dst, o); });
      },
      py::arg("worker"), py::arg("input"), py::arg("output"), py::arg("dtype"),
      LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "alltoallv_async",
      [](py::handle worker, py::array in, std::vector<size_t> send_counts, const std::string& dtype,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "alltoall input", false);
        uint64_t total = 0;
        for (size_t c : send_counts) total += c;
        if (total != static_cast<uint64_t>(in.size())) {
          ThrowInvalid("alltoall: the send counts add up to " + std::to_string(total) +
                       " elements, the input has " + std::to_string(in.size()));
        }
        const ps::CollectiveOptions o =
            Options(worker, ranks, algorithm, segment_bytes, timeout, name);
        auto result = std::make_shared<ps::GatherResult>();
        ps::GatherResult* r = result.get();
        const void* src = in.data();
        return SubmitOn(worker, "alltoall", py::make_tuple(in), py::cast(result), [&](ps::Worker& w) {
          return w.communicator().AllToAllVAsync(src, send_counts, t, r, o);
        });
      },
      py::arg("worker"), py::arg("input"), py::arg("send_counts"), py::arg("dtype"),
      LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "reducescatter_async",
      [](py::handle worker, py::array in, py::array out, const std::string& dtype,
         const std::string& op, double prescale, double postscale,
         std::optional<std::vector<int64_t>> ranks, const std::string& algorithm,
         std::optional<size_t> segment_bytes, std::optional<double> timeout,
         const std::string& name) {
        const ps::DataType t = TypeNamed(dtype);
        CheckArray(in, t, "reducescatter input", false);
        CheckOutput(out, t, "reducescatter");
        const ps::AllReduceOptions o =
            ReduceOptions(Options(worker, ranks, algorithm, segment_bytes, timeout, name), op,
                          prescale, postscale, "fp32");
        const void* src = in.data();
        void* dst = out.mutable_data();
        const size_t n = in.size();
        return SubmitOn(worker, "reducescatter", py::make_tuple(in, out), out, [&](ps::Worker& w) {
          return w.communicator().ReduceScatterAsync(src, n, t, dst, o);
        });
      },
      py::arg("worker"), py::arg("input"), py::arg("output"), py::arg("dtype"),
      py::arg("op") = "sum", py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
      LAYERPS_COLLECTIVE_ARGS);

  m.def(
      "barrier_collective",
      [](py::handle worker, std::optional<std::vector<int64_t>> ranks,
         std::optional<double> timeout, const std::string& name) {
        const ps::CollectiveOptions o = Options(worker, ranks, "auto", std::nullopt, timeout, name);
        ps::Worker& w = WorkerOf(worker);
        ps::Status s;
        {
          py::gil_scoped_release release;
          s = w.communicator().CollectiveBarrier(o);
        }
        ThrowIfError(s);
      },
      py::arg("worker"), py::arg("ranks") = py::none(), py::arg("timeout") = py::none(),
      py::arg("name") = "");

  m.def(
      "join_collectives",
      [](py::handle worker, std::optional<std::vector<int64_t>> ranks,
         std::optional<double> timeout) {
        const ps::CollectiveOptions o =
            Options(worker, ranks, "auto", std::nullopt, std::nullopt, "");
        std::chrono::milliseconds limit(int64_t{1} << 36);  // no limit of our own: ~2 years
        if (timeout) {
          if (!(*timeout >= 0)) ThrowInvalid("timeout must be >= 0 seconds (or None)");
          limit = std::chrono::milliseconds(static_cast<int64_t>(*timeout * 1000.0 + 0.5));
        }
        ps::Worker& w = WorkerOf(worker);
        uint32_t last = 0;
        ps::Status s;
        {
          py::gil_scoped_release release;
          s = w.communicator().JoinCollectives(o, limit, &last);
        }
        ThrowIfError(s);
        return last;
      },
      py::arg("worker"), py::arg("ranks") = py::none(), py::arg("timeout") = py::none());

  // --- The hybrid's row exchanges (ps/sparse_exchange.h) -----------------------------------
  // ids: int64 (n); values: float32 (n, dim) or (n * dim); blocking, the GIL released.
  // Each returns (ids, values) as new numpy arrays, values shaped (m, dim).
  auto rows_in = [](const py::array& ids, const py::array& values, size_t dim, const char* what) {
    CheckArray(ids, ps::DataType::kInt64, std::string(what) + " ids", false);
    CheckArray(values, ps::DataType::kFloat32, std::string(what) + " values", false);
    if (static_cast<size_t>(values.size()) != static_cast<size_t>(ids.size()) * dim) {
      ThrowInvalid(std::string(what) + ": " + std::to_string(values.size()) + " values for " +
                   std::to_string(ids.size()) + " ids of width " + std::to_string(dim));
    }
  };
  auto rows_out = [](ps::SparseRows&& r) {
    py::array_t<int64_t> ids(static_cast<py::ssize_t>(r.ids.size()));
    if (!r.ids.empty()) std::memcpy(ids.mutable_data(), r.ids.data(), r.ids.size() * sizeof(int64_t));
    py::array_t<float> values(
        {static_cast<py::ssize_t>(r.ids.size()), static_cast<py::ssize_t>(r.dim)});
    if (!r.values.empty()) {
      std::memcpy(values.mutable_data(), r.values.data(), r.values.size() * sizeof(float));
    }
    return py::make_tuple(ids, values);
  };
  using Exchange = ps::Status (*)(ps::Communicator&, const int64_t*, const float*, size_t, size_t,
                                  const ps::CollectiveOptions&, ps::SparseRows*);
  const std::pair<const char*, Exchange> exchanges[] = {{"allgather_rows", &ps::AllGatherRows},
                                                        {"rows_to_owners", &ps::RowsToOwners}};
  for (const auto& [name, fn] : exchanges) {
    m.def(
        name,
        [rows_in, rows_out, what = std::string(name), fn = fn](
            py::handle worker, py::array ids, py::array values, size_t dim,
            std::optional<std::vector<int64_t>> ranks, std::optional<double> timeout,
            const std::string& cname) {
          rows_in(ids, values, dim, what.c_str());
          ps::Communicator& w = WorkerOf(worker).communicator();
          const ps::CollectiveOptions o =
              Options(worker, ranks, "auto", std::nullopt, timeout, cname);
          ps::SparseRows out;
          ps::Status s;
          {
            py::gil_scoped_release release;
            s = fn(w, static_cast<const int64_t*>(ids.data()), static_cast<const float*>(values.data()),
                   static_cast<size_t>(ids.size()), dim, o, &out);
          }
          ThrowIfError(s);
          return rows_out(std::move(out));
        },
        py::arg("worker"), py::arg("ids"), py::arg("values"), py::arg("dim"),
        py::arg("ranks") = py::none(), py::arg("timeout") = py::none(), py::arg("name") = "");
  }
  m.def(
      "rows_to_root",
      [rows_in, rows_out](py::handle worker, py::array ids, py::array values, size_t dim,
                          int64_t root_arg, std::optional<std::vector<int64_t>> ranks,
                          std::optional<double> timeout, const std::string& cname) {
        rows_in(ids, values, dim, "rows_to_root");
        const uint32_t root = RankArg(worker, root_arg, "rows_to_root: root");
        ps::Communicator& w = WorkerOf(worker).communicator();
        const ps::CollectiveOptions o =
            Options(worker, ranks, "auto", std::nullopt, timeout, cname);
        ps::SparseRows out;
        ps::Status s;
        {
          py::gil_scoped_release release;
          s = ps::RowsToRoot(w, static_cast<const int64_t*>(ids.data()),
                             static_cast<const float*>(values.data()), static_cast<size_t>(ids.size()),
                             dim, root, o, &out);
        }
        ThrowIfError(s);
        return rows_out(std::move(out));
      },
      py::arg("worker"), py::arg("ids"), py::arg("values"), py::arg("dim"), py::arg("root"),
      py::arg("ranks") = py::none(), py::arg("timeout") = py::none(), py::arg("name") = "");
  // pull(ids: int64 array, ascending unique) -> float32 array of len(ids) * dim values,
  // called on root only, with the GIL held; what it raises fails every member (kAborted).
  m.def(
      "pull_rows_through_root",
      [](py::handle worker, py::array ids, size_t dim, int64_t root_arg, py::object pull,
         std::optional<std::vector<int64_t>> ranks, std::optional<double> timeout,
         const std::string& cname) {
        CheckArray(ids, ps::DataType::kInt64, "pull_rows_through_root ids", false);
        const uint32_t root = RankArg(worker, root_arg, "pull_rows_through_root: root");
        ps::Communicator& w = WorkerOf(worker).communicator();
        const ps::CollectiveOptions o =
            Options(worker, ranks, "auto", std::nullopt, timeout, cname);
        const size_t n = static_cast<size_t>(ids.size());
        py::array_t<float> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(dim)});
        float* dst = out.mutable_data();
        ps::RowSource source;
        if (!pull.is_none()) {
          source = [&pull, dim](const std::vector<int64_t>& want, float* rows) {
            py::gil_scoped_acquire hold;
            try {
              py::array_t<int64_t> arg(static_cast<py::ssize_t>(want.size()));
              std::memcpy(arg.mutable_data(), want.data(), want.size() * sizeof(int64_t));
              py::array_t<float, py::array::c_style | py::array::forcecast> got = pull(arg);
              if (static_cast<size_t>(got.size()) != want.size() * dim) {
                return ps::InvalidArgument("pull returned " + std::to_string(got.size()) +
                                           " values for " + std::to_string(want.size()) +
                                           " rows of " + std::to_string(dim));
              }
              std::memcpy(rows, got.data(), want.size() * dim * sizeof(float));
              return ps::Status::OK();
            } catch (py::error_already_set& e) {
              return ps::Aborted(std::string("pull raised: ") + e.what());
            }
          };
        }
        ps::Status s;
        {
          py::gil_scoped_release release;
          s = ps::PullRowsThroughRoot(w, static_cast<const int64_t*>(ids.data()), n, dim, root,
                                      source, dst, o);
        }
        ThrowIfError(s);
        return out;
      },
      py::arg("worker"), py::arg("ids"), py::arg("dim"), py::arg("root"),
      py::arg("pull") = py::none(), py::arg("ranks") = py::none(), py::arg("timeout") = py::none(),
      py::arg("name") = "");
}

#undef LAYERPS_COLLECTIVE_ARGS

}  // namespace layerps_python
