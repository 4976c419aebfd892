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

// `what`: "torchrun job", "Kubeflow PyTorchJob pod", ...
Status Require(const char* (*get)(const char*), const std::string& what,
               std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (get(n) == nullptr || *get(n) == '\0') {
      return InvalidArgument(what + ": " + n + " is not set (LayerPS takes its rank, " +
                             "size and scheduler from it; or set LAYERPS_SCHEDULER)");
    }
  }
  return Status::OK();
}

bool Set(const char* (*get)(const char*), const char* name) {
  const char* v = get(name);
  return v != nullptr && *v != '\0';
}

// LAYERPS_ROLE: empty (unset or ""), "scheduler", "server" or "worker".
Status RoleVar(const char* (*get)(const char*), std::string* role) {
  role->clear();
  if (!Set(get, "LAYERPS_ROLE")) return Status::OK();
  const std::string r = get("LAYERPS_ROLE");
  if (r != "scheduler" && r != "server" && r != "worker") {
    return InvalidArgument("LAYERPS_ROLE='" + r +
                           "' is not a role: scheduler, server or worker (docs/kubernetes.md)");
  }
  *role = r;
  return Status::OK();
}

// The scheduler's host for a pod that is not the scheduler: LAYERPS_SCHEDULER_HOST, else
// MASTER_ADDR.
Status SchedulerHostVar(const char* (*get)(const char*), const std::string& what,
                        std::string* host) {
  const char* v = Set(get, "LAYERPS_SCHEDULER_HOST") ? get("LAYERPS_SCHEDULER_HOST")
                  : Set(get, "MASTER_ADDR")          ? get("MASTER_ADDR")
                                                     : nullptr;
  if (v == nullptr) {
    return InvalidArgument(what + ": LAYERPS_SCHEDULER_HOST (or MASTER_ADDR) is not set, so the "
                           "scheduler's host is unknown (e.g. the scheduler's Service name; or "
                           "set LAYERPS_SCHEDULER)");
  }
  *host = v;
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
  std::string role;
  PS_RETURN_IF_ERROR(RoleVar(get, &role));
  // Where the rank and the size came from, for the message of a rank not below the size.
  std::string rank_var, size_var;
  const auto var = [&](const char* layerps, const char* other) {
    return std::string(Set(get, layerps) ? layerps : other);
  };
  if (role == "scheduler" || role == "server") {
    // One role per pod: the launcher variables of workers do not apply.
    e.launcher = "role";
    e.role = role;
    e.size = 1;  // num_workers: what LAYERPS_NUM_WORKERS says, else Options' default
    PS_RETURN_IF_ERROR(IntVar(get, "LAYERPS_NUM_WORKERS", 1, 4096, &e.size));
    PS_RETURN_IF_ERROR(port(29501));
    if (role == "scheduler") {
      e.scheduler_host = "0.0.0.0";  // where it binds: every interface of the pod
      return e;
    }
    PS_RETURN_IF_ERROR(SchedulerHostVar(get, "server pod (LAYERPS_ROLE=server)", &e.scheduler_host));
    PS_RETURN_IF_ERROR(IntVar(get, "LAYERPS_RANK", -1, 4095, &e.rank));
    int servers = 0;
    bool servers_set = false;
    PS_RETURN_IF_ERROR(IntVar(get, "LAYERPS_NUM_SERVERS", 0, 4096, &servers, &servers_set));
    if (servers_set && e.rank >= servers) {
      return InvalidArgument("server pod (LAYERPS_ROLE=server): rank " + std::to_string(e.rank) +
                             " (LAYERPS_RANK) is not below the number of servers " +
                             std::to_string(servers) + " (LAYERPS_NUM_SERVERS)");
    }
    return e;
  }
  if (get("TORCHELASTIC_RUN_ID") != nullptr || (get("RANK") && get("LOCAL_RANK"))) {
    e.launcher = "torchrun";
    rank_var = "RANK";
    size_var = "WORLD_SIZE";
    PS_RETURN_IF_ERROR(Require(get, "torchrun job",
                               {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}));
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
    rank_var = "SLURM_PROCID";
    size_var = "SLURM_NTASKS";
    PS_RETURN_IF_ERROR(Require(get, "Slurm job", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}));
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
    rank_var = ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
    size_var = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
    if (ompi) {
      PS_RETURN_IF_ERROR(Require(get, "mpirun job", {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_RANK", 0, kMax, &e.rank));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_SIZE", 1, kMax, &e.size));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMax, &e.local_rank));
      PS_RETURN_IF_ERROR(IntVar(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMax, &e.local_size));
    } else {
      PS_RETURN_IF_ERROR(Require(get, "mpirun job", {"PMI_RANK", "PMI_SIZE"}));
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
  } else if (Set(get, "RANK") && Set(get, "WORLD_SIZE")) {
    // A Kubeflow PyTorchJob's pod: RANK and WORLD_SIZE without torchrun's LOCAL_RANK. One
    // process per pod; LAYERPS_RANK and LAYERPS_NUM_WORKERS win.
    const std::string what = "Kubeflow PyTorchJob pod";
    e.launcher = "pytorchjob";
    PS_RETURN_IF_ERROR(Require(get, what, {"MASTER_ADDR", "MASTER_PORT"}));
    rank_var = var("LAYERPS_RANK", "RANK");
    size_var = var("LAYERPS_NUM_WORKERS", "WORLD_SIZE");
    PS_RETURN_IF_ERROR(IntVar(get, rank_var.c_str(), rank_var == "RANK" ? 0 : -1, kMax, &e.rank));
    PS_RETURN_IF_ERROR(IntVar(get, size_var.c_str(), 1, kMax, &e.size));
    e.local_rank = 0;
    int master_port = 0;
    PS_RETURN_IF_ERROR(IntVar(get, "MASTER_PORT", 1, 65534, &master_port));
    PS_RETURN_IF_ERROR(SchedulerHostVar(get, what, &e.scheduler_host));
    PS_RETURN_IF_ERROR(port(master_port + 1));
  } else if (get("JOB_COMPLETION_INDEX") != nullptr || role == "worker") {
    // A Kubernetes Indexed Job's pod (the index is the rank), or a pod that says
    // LAYERPS_ROLE=worker (LAYERPS_RANK, or the lowest free rank).
    const bool indexed = get("JOB_COMPLETION_INDEX") != nullptr;
    const std::string what =
        indexed ? "Kubernetes Indexed Job pod" : "worker pod (LAYERPS_ROLE=worker)";
    e.launcher = indexed ? "indexed-job" : "role";
    if (!Set(get, "LAYERPS_NUM_WORKERS")) {
      return InvalidArgument(what + ": LAYERPS_NUM_WORKERS is not set (the job's number of " +
                             "workers" + (indexed ? ", the Job's completions" : "") +
                             "; each worker's rank is checked against it)");
    }
    rank_var = var("LAYERPS_RANK", "JOB_COMPLETION_INDEX");
    size_var = "LAYERPS_NUM_WORKERS";
    if (indexed || rank_var == "LAYERPS_RANK") {
      PS_RETURN_IF_ERROR(
          IntVar(get, rank_var.c_str(), rank_var == "LAYERPS_RANK" ? -1 : 0, kMax, &e.rank));
    }
    PS_RETURN_IF_ERROR(IntVar(get, "LAYERPS_NUM_WORKERS", 1, 4096, &e.size));
    e.local_rank = 0;
    PS_RETURN_IF_ERROR(SchedulerHostVar(get, what, &e.scheduler_host));
    PS_RETURN_IF_ERROR(port(29501));
  } else {
    return e;
  }
  if (e.rank >= e.size) {
    return InvalidArgument(e.launcher + ": rank " + std::to_string(e.rank) + " (" + rank_var +
                           ") is not below the number of workers " + std::to_string(e.size) +
                           " (" + size_var + ")");
  }
  return e;
}

}  // namespace ps
