// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core's value types: StatusCode and the other enums, Options (with from_env,
// validate), TableSpec, and the module functions about options (set_log_level,
// detect_launcher, option_table).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bind.h"
#include "errors.h"
#include "ps/ps.h"

namespace py = pybind11;

namespace layerps_python {

void BindOptions(py::module_& m) {
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
      .value("ELASTIC", ps::UpdateRule::kElastic)
      .value("ROWWISE_ADAGRAD", ps::UpdateRule::kRowwiseAdagrad);
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
      .def_readwrite("apply_threads", &ps::Options::apply_threads)
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
      .def_readwrite("wait_receive_us", &ps::Options::wait_receive_us)
      .def_readwrite("io_threads", &ps::Options::io_threads)
      .def_readwrite("streams", &ps::Options::streams)
      .def_readwrite("max_message_bytes", &ps::Options::max_message_bytes)
      .def_readwrite("rank", &ps::Options::rank)
      .def_readwrite("shared_memory", &ps::Options::shared_memory)
      .def_readwrite("scheduler_max_message_bytes", &ps::Options::scheduler_max_message_bytes)
      .def_readwrite("tolerate_worker_loss", &ps::Options::tolerate_worker_loss)
      .def_readwrite("max_workers", &ps::Options::max_workers)
      .def_readwrite("min_workers", &ps::Options::min_workers)
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
}

}  // namespace layerps_python
