// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/launcher.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace ps {

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

}  // namespace ps
