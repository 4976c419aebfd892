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
// OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE, or PMI_RANK/PMI_SIZE): every task is a
// worker, rank and size are the workers'. The scheduler is on `scheduler_host`
// (MASTER_ADDR; Slurm: the job's first node; MPI: LAYERPS_SCHEDULER_HOST or MASTER_ADDR)
// at `scheduler_port` (LAYERPS_PORT, else MASTER_PORT + 1 under torchrun, else 29501).
//
// Pods (docs/kubernetes.md), each process one role:
// - "role": LAYERPS_ROLE=scheduler|server|worker says the role (BytePS' DMLC_ROLE);
//   LAYERPS_RANK the rank within it (-1 or unset: the lowest free one). A scheduler binds
//   every interface (scheduler_host "0.0.0.0"); the others reach LAYERPS_SCHEDULER_HOST (or
//   MASTER_ADDR). `size` is LAYERPS_NUM_WORKERS (a scheduler and a worker need it).
// - "indexed-job": a Kubernetes Indexed Job's pod (JOB_COMPLETION_INDEX): a worker of that
//   rank (LAYERPS_RANK wins) among LAYERPS_NUM_WORKERS.
// - "pytorchjob": a Kubeflow PyTorchJob's pod (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
//   no LOCAL_RANK, which torchrun would set): a worker of rank RANK among WORLD_SIZE
//   (LAYERPS_RANK, LAYERPS_NUM_WORKERS win); the scheduler at LAYERPS_SCHEDULER_HOST, else
//   MASTER_ADDR, on LAYERPS_PORT, else MASTER_PORT + 1.
// torchrun, Slurm and mpirun win over the pod kinds (torchrun inside a pod is torchrun).
// A scheduler or server role wins over them all.
struct LauncherEnv {
  std::string launcher;  // "torchrun", "slurm", "mpi", "role", "indexed-job", "pytorchjob";
                         // empty: none detected
  std::string role = "worker";  // "scheduler", "server" or "worker"
  int rank = -1;         // within the role; -1: the lowest free one
  int size = 0;          // the workers in the job
  int local_rank = -1;
  int local_size = 0;  // 0 when the launcher does not say
  std::string scheduler_host;
  int scheduler_port = 0;
  // tcp://scheduler_host:scheduler_port
  std::string scheduler_address() const;
};
// Reads the environment through `getenv` (std::getenv by default; tests pass their own).
// No launcher's variables: an empty `launcher`. A launcher recognized whose environment is
// incomplete or malformed, an unknown LAYERPS_ROLE, or a rank not below the size:
// kInvalidArgument naming the variable (and the rank).
StatusOr<LauncherEnv> DetectLauncher(const char* (*getenv)(const char*) = nullptr);
// The first host of a Slurm node list ("node[01-04,07],gpu1" -> "node01"), or "".
std::string FirstSlurmNode(const std::string& nodelist);

}  // namespace ps

#endif  // PS_LAUNCHER_H_
