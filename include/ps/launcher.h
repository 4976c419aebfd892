// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Jobs started by another launcher than layerps-launch: what torchrun, Slurm and mpirun
// tell each task (docs/launch.md). Options::FromEnv uses it; Python's layerps.launch
// helpers too.
#ifndef PS_LAUNCHER_H_
#define PS_LAUNCHER_H_

#include <string>

#include "ps/status.h"

namespace ps {

// A job started by another launcher than layerps-launch (docs/launch.md): torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
// SLURM_TASKS_PER_NODE, SLURM_JOB_NODELIST / SLURM_NODELIST) or mpirun (Open MPI's
// OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE, or PMI_RANK/PMI_SIZE). Every task is a
// worker: rank and size are the workers'. The scheduler is on `scheduler_host`
// (MASTER_ADDR; Slurm: the job's first node; MPI: LAYERPS_SCHEDULER_HOST or MASTER_ADDR)
// at `scheduler_port` (LAYERPS_PORT, else MASTER_PORT + 1 under torchrun, else 29501).
struct LauncherEnv {
  std::string launcher;  // "torchrun", "slurm", "mpi"; empty: none detected
  int rank = -1;
  int size = 0;
  int local_rank = -1;
  int local_size = 0;  // 0 when the launcher does not say
  std::string scheduler_host;
  int scheduler_port = 0;
  // tcp://scheduler_host:scheduler_port
  std::string scheduler_address() const;
};
// Reads the environment through `getenv` (std::getenv by default; tests pass their own).
// No launcher's variables: an empty `launcher`. A launcher recognized whose environment is
// incomplete or malformed: kInvalidArgument naming the variable.
StatusOr<LauncherEnv> DetectLauncher(const char* (*getenv)(const char*) = nullptr);
// The first host of a Slurm node list ("node[01-04,07],gpu1" -> "node01"), or "".
std::string FirstSlurmNode(const std::string& nodelist);

}  // namespace ps

#endif  // PS_LAUNCHER_H_
