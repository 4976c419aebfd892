// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <thread>

namespace ps {
namespace {

bool HasScheme(const std::string& a) {
  return a.rfind("tcp://", 0) == 0 || a.rfind("ipc://", 0) == 0 || a.rfind("inproc://", 0) == 0;
}

// A tcp:// address must end in ":PORT" with PORT in 0..65535 or "*" (ZeroMQ would take
// an out-of-range port modulo 2^16, or a random one, without a word).
Status CheckAddress(const char* what, const std::string& a) {
  if (!HasScheme(a)) {
    return InvalidArgument(std::string(what) + " '" + a +
                           "' must start with tcp://, ipc:// or inproc://");
  }
  if (a.rfind("tcp://", 0) != 0) return Status::OK();
  const size_t colon = a.rfind(':');
  const std::string port = colon == std::string::npos || colon < 6 ? "" : a.substr(colon + 1);
  if (port == "*") return Status::OK();
  bool digits = !port.empty() && port.size() <= 5;
  for (char ch : port) digits = digits && ch >= '0' && ch <= '9';
  if (!digits || std::stol(port) > 65535) {
    return InvalidArgument(std::string(what) + " '" + a +
                           "' needs a port in 0..65535 (0 = any free one) after the last ':'");
  }
  return Status::OK();
}

}  // namespace

namespace {

const char* StdGetenv(const char* name) { return std::getenv(name); }

// An integer variable in [lo, hi]; `*out` untouched when absent.
Status IntVar(const char* (*get)(const char*), const char* name, int lo, int hi, int* out,
              bool* present = nullptr) {
  const char* v = get(name);
  if (present) *present = v != nullptr;
  if (v == nullptr) return Status::OK();
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    return InvalidArgument(std::string(name) + "='" + v + "' is not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int>(x);
  return Status::OK();
}

Status Require(const char* (*get)(const char*), const std::string& launcher,
               std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (get(n) == nullptr || *get(n) == '\0') {
      return InvalidArgument(launcher + " job: " + n + " is not set (LayerPS takes its rank, " +
                             "size and scheduler from it; or set LAYERPS_SCHEDULER)");
    }
  }
  return Status::OK();
}

}  // namespace

std::string LauncherEnv::scheduler_address() const {
  const bool v6 = scheduler_host.find(':') != std::string::npos && scheduler_host[0] != '[';
  return "tcp://" + (v6 ? "[" + scheduler_host + "]" : scheduler_host) + ":" +
         std::to_string(scheduler_port);
}

std::string FirstSlurmNode(const std::string& nodelist) {
  // The first entry: up to a ',' outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  // prefix[01-04,07]suffix: the first number of the range, zero padding kept.
  std::string range = first.substr(open + 1, first.find(']') - open - 1);
  const size_t cut = range.find_first_of("-,");
  if (cut != std::string::npos) range.resize(cut);
  const size_t close = first.find(']');
  return first.substr(0, open) + range + (close == std::string::npos ? "" : first.substr(close + 1));
}

StatusOr<LauncherEnv> DetectLauncher(const char* (*get)(const char*)) {
  if (get == nullptr) get = StdGetenv;
  LauncherEnv e;
  constexpr int kMax = 1 << 20;
  const auto port = [&](int fallback) -> Status {
    e.scheduler_port = fallback;
    return IntVar(get, "LAYERPS_PORT", 1, 65535, &e.scheduler_port);
  };
  if (get("TORCHELASTIC_RUN_ID") != nullptr || (get("RANK") && get("LOCAL_RANK"))) {
    e.launcher = "torchrun";
    PS_RETURN_IF_ERROR(
        Require(get, "torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}));
    PS_RETURN_IF_ERROR(IntVar(get, "RANK", 0, kMax, &e.rank));
    PS_RETURN_IF_ERROR(IntVar(get, "WORLD_SIZE", 1, kMax, &e.size));
    PS_RETURN_IF_ERROR(IntVar(get, "LOCAL_RANK", 0, kMax, &e.local_rank));
    PS_RETURN_IF_ERROR(IntVar(get, "LOCAL_WORLD_SIZE", 1, kMax, &e.local_size));
    int master_port = 0;
    PS_RETURN_IF_ERROR(IntVar(get, "MASTER_PORT", 1, 65534, &master_port));
    e.scheduler_host = get("MASTER_ADDR");
    PS_RETURN_IF_ERROR(port(master_port + 1));
  } else if (get("SLURM_PROCID") != nullptr) {
    e.launcher = "slurm";
    PS_RETURN_IF_ERROR(Require(get, "Slurm", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}));
    PS_RETURN_IF_ERROR(IntVar(get, "SLURM_PROCID", 0, kMax, &e.rank));
    PS_RETURN_IF_ERROR(IntVar(get, "SLURM_NTASKS", 1, kMax, &e.size));
    PS_RETURN_IF_ERROR(IntVar(get, "SLURM_LOCALID", 0, kMax, &e.local_rank));
    bool per_node = false;
    PS_RETURN_IF_ERROR(IntVar(get, "SLURM_NTASKS_PER_NODE", 1, kMax, &e.local_size, &per_node));
    if (!per_node && get("SLURM_TASKS_PER_NODE")) {
      e.local_size = std::atoi(get("SLURM_TASKS_PER_NODE"));  // "4(x2)": 4 here
    }
    const char* nodes = get("SLURM_JOB_NODELIST") ? get("SLURM_JOB_NODELIST") : get("SLURM_NODELIST");
    const char* host = get("LAYERPS_SCHEDULER_HOST");
    if (host == nullptr && nodes == nullptr) {
      return InvalidArgument(
          "Slurm job: SLURM_JOB_NODELIST (or SLURM_NODELIST) is not set, so the scheduler's "
          "host is unknown (or set LAYERPS_SCHEDULER_HOST)");
    }
    e.scheduler_host = host ? host : FirstSlurmNode(nodes);
    if (e.scheduler_host.empty()) return InvalidArgument("Slurm job: an empty SLURM_JOB_NODELIST");
    PS_RETURN_IF_ERROR(port(29501));
  } else if (get("OMPI_COMM_WORLD_RANK") != nullptr || get("PMI_RANK") != nullptr) {
    e.launcher = "mpi";
    const bool ompi = get("OMPI_COMM_WORLD_RANK") != nullptr;
    if (ompi) {
      PS_RETURN_IF_ERROR(Require(get, "mpirun", {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_RANK", 0, kMax, &e.rank));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_SIZE", 1, kMax, &e.size));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMax, &e.local_rank));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMax, &e.local_size));
    } else {
      PS_RETURN_IF_ERROR(Require(get, "mpirun", {"PMI_RANK", "PMI_SIZE"}));
      PS_RETURN_IF_ERROR(IntVar(get, "PMI_RANK", 0, kMax, &e.rank));
      PS_RETURN_IF_ERROR(IntVar(get, "PMI_SIZE", 1, kMax, &e.size));
      PS_RETURN_IF_ERROR(IntVar(get, "MPI_LOCALRANKID", 0, kMax, &e.local_rank));
      PS_RETURN_IF_ERROR(IntVar(get, "MPI_LOCALNRANKS", 1, kMax, &e.local_size));
    }
    const char* host = get("LAYERPS_SCHEDULER_HOST") ? get("LAYERPS_SCHEDULER_HOST") : get("MASTER_ADDR");
    if (host == nullptr || *host == '\0') {
      return InvalidArgument(
          "mpirun job: LAYERPS_SCHEDULER_HOST (or MASTER_ADDR) is not set: MPI does not say "
          "which host runs the scheduler (the host of rank 0; e.g. mpirun -x "
          "LAYERPS_SCHEDULER_HOST=node1)");
    }
    e.scheduler_host = host;
    PS_RETURN_IF_ERROR(port(29501));
  } else {
    return e;
  }
  if (e.rank >= e.size) {
    return InvalidArgument(e.launcher + " job: rank " + std::to_string(e.rank) +
                           " is not below the size " + std::to_string(e.size));
  }
  return e;
}

StatusOr<Options> Options::FromEnv() {
  Options o;
  for (const OptionInfo& info : OptionTable()) {
    const char* v = std::getenv(info.env.c_str());
    if (v != nullptr) PS_RETURN_IF_ERROR(SetOption(&o, info.name, v, info.env));
  }
  if (std::getenv("LAYERPS_SCHEDULER") == nullptr) {
    StatusOr<LauncherEnv> launcher = DetectLauncher();
    if (!launcher.ok()) return launcher.status();
    if (!launcher->launcher.empty()) {
      o.scheduler_address = launcher->scheduler_address();
      if (std::getenv("LAYERPS_RANK") == nullptr) o.rank = launcher->rank;
      if (std::getenv("LAYERPS_NUM_WORKERS") == nullptr) o.num_workers = launcher->size;
    }
  }
  PS_RETURN_IF_ERROR(o.Validate());
  return o;
}

int CommonOptions::ResolvedStreams() const {
  if (streams > 0) return streams;
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores < 8) return 1;
  return static_cast<int>(std::min(4u, cores / 4));
}

int CommonOptions::ResolvedIoThreads() const {
  return io_threads > 0 ? io_threads : ResolvedStreams();
}

Status CommonOptions::Validate() const {
  PS_RETURN_IF_ERROR(CheckAddress("--scheduler (Options::scheduler_address)", scheduler_address));
  if (heartbeat_interval_ms < 10 || heartbeat_interval_ms > 60000) {
    return InvalidArgument("heartbeat_interval_ms=" + std::to_string(heartbeat_interval_ms) +
                           " is outside [10, 60000]");
  }
  if (heartbeat_timeout_ms <= 2 * heartbeat_interval_ms) {
    return InvalidArgument(
        "heartbeat_timeout_ms=" + std::to_string(heartbeat_timeout_ms) +
        " must exceed 2 * heartbeat_interval_ms=" + std::to_string(2 * heartbeat_interval_ms));
  }
  if (io_threads < 0 || io_threads > 64) {
    return InvalidArgument("io_threads=" + std::to_string(io_threads) + " is outside [0, 64]");
  }
  if (streams < 0 || streams > 16) {
    return InvalidArgument("streams=" + std::to_string(streams) + " is outside [0, 16]");
  }
  if (checkpoint_keep < 1 || checkpoint_keep > 1000) {
    return InvalidArgument("checkpoint_keep=" + std::to_string(checkpoint_keep) +
                           " is outside [1, 1000]");
  }
  if (max_message_bytes < 1024 || max_message_bytes > (int64_t{16} << 30)) {
    return InvalidArgument("max_message_bytes=" + std::to_string(max_message_bytes) +
                           " is outside [1 KiB, 16 GiB]");
  }
  if (scheduler_max_message_bytes < (4 << 10) || scheduler_max_message_bytes > (int64_t{1} << 30)) {
    return InvalidArgument(
        "scheduler_max_message_bytes=" + std::to_string(scheduler_max_message_bytes) +
        " is outside [4 KiB, 1 GiB]");
  }
  return Status::OK();
}

Status ClusterShape::Validate() const {
  if (num_servers < 1 || num_servers > 4096) {
    return InvalidArgument("num_servers=" + std::to_string(num_servers) + " is outside [1, 4096]");
  }
  if (num_workers < 1 || num_workers > 4096) {
    return InvalidArgument("num_workers=" + std::to_string(num_workers) + " is outside [1, 4096]");
  }
  if (dense_chunk_elems < 1 || dense_chunk_elems > (uint64_t{1} << 30)) {
    return InvalidArgument("dense_chunk_elems is outside [1, 2^30]");
  }
  if (checkpoint_every_s < 0 || checkpoint_every_s > 604800) {
    return InvalidArgument("checkpoint_every_s=" + std::to_string(checkpoint_every_s) +
                           " is outside [0, 604800]");
  }
  if (checkpoint_every_s > 0 && checkpoint_dir.empty()) {
    return InvalidArgument("checkpoint_every_s needs a checkpoint_dir");
  }
  if (replication && num_servers < 2) {
    return InvalidArgument("replication needs num_servers >= 2 (a server's backup is another server)");
  }
  if (replace_servers_ms < 0 || replace_servers_ms > 86400000) {
    return InvalidArgument("replace_servers_ms=" + std::to_string(replace_servers_ms) +
                           " is outside [0, 86400000]");
  }
  return Status::OK();
}

Status MemberOptions::Validate() const {
  PS_RETURN_IF_ERROR(CommonOptions::Validate());
  if (!bind_address.empty()) PS_RETURN_IF_ERROR(CheckAddress("--bind (Options::bind_address)", bind_address));
  if (rank < -1 || rank > 4095)
    return InvalidArgument("rank=" + std::to_string(rank) + " is outside [-1, 4095]");
  if (connect_timeout_ms < 1 || connect_timeout_ms > 3600000) {
    return InvalidArgument("connect_timeout_ms is outside [1, 3600000]");
  }
  if (part_bytes != 0 && (part_bytes < (int64_t{4} << 10) || part_bytes > (int64_t{1} << 30))) {
    return InvalidArgument("part_bytes is outside 0 or [4096, 2^30]");
  }
  if (request_timeout_ms < 1 || request_timeout_ms > 3600000) {
    return InvalidArgument("request_timeout_ms is outside [1, 3600000]");
  }
  return Status::OK();
}

Status SchedulerOptions::Validate() const {
  PS_RETURN_IF_ERROR(CommonOptions::Validate());
  return ClusterShape::Validate();
}

Status Options::Validate() const {
  PS_RETURN_IF_ERROR(MemberOptions::Validate());
  return ClusterShape::Validate();
}

SchedulerOptions Options::scheduler() const {
  SchedulerOptions s;
  static_cast<CommonOptions&>(s) = *this;
  static_cast<ClusterShape&>(s) = *this;
  return s;
}

ServerOptions Options::server() const {
  ServerOptions s;
  static_cast<MemberOptions&>(s) = *this;
  return s;
}

WorkerOptions Options::worker() const {
  WorkerOptions w;
  static_cast<MemberOptions&>(w) = *this;
  return w;
}

}  // namespace ps
