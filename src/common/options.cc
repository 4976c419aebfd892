// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/options.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <thread>

#include "ps/launcher.h"

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

int MemberOptions::ResolvedStreams() const {
  if (streams > 0) return streams;
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores < 8) return 1;
  return static_cast<int>(std::min(4u, cores / 4));
}

int MemberOptions::ResolvedIoThreads() const {
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
  return Status::OK();
}

Status SchedulerFields::Validate() const {
  // 0: a job of collectives and peer messages only (Horovod's way); declaring a table
  // then fails (TableDirectory).
  if (num_servers < 0 || num_servers > 4096) {
    return InvalidArgument("num_servers=" + std::to_string(num_servers) + " is outside [0, 4096]");
  }
  if (num_workers < 1 || num_workers > 4096) {
    return InvalidArgument("num_workers=" + std::to_string(num_workers) + " is outside [1, 4096]");
  }
  if (max_workers != 0 && (max_workers < num_workers || max_workers > 4096)) {
    return InvalidArgument("max_workers=" + std::to_string(max_workers) +
                           " is outside [num_workers=" + std::to_string(num_workers) +
                           ", 4096] (0: num_workers)");
  }
  if (min_workers < 0 || min_workers > num_workers) {
    return InvalidArgument("min_workers=" + std::to_string(min_workers) +
                           " is outside [0, num_workers=" + std::to_string(num_workers) + "]");
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
  if (scheduler_max_message_bytes < (4 << 10) || scheduler_max_message_bytes > (int64_t{1} << 30)) {
    return InvalidArgument(
        "scheduler_max_message_bytes=" + std::to_string(scheduler_max_message_bytes) +
        " is outside [4 KiB, 1 GiB]");
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
  if (request_timeout_ms < 1 || request_timeout_ms > 3600000) {
    return InvalidArgument("request_timeout_ms is outside [1, 3600000]");
  }
  if (streams < 0 || streams > 16) {
    return InvalidArgument("streams=" + std::to_string(streams) + " is outside [0, 16]");
  }
  if (max_message_bytes < 1024 || max_message_bytes > (int64_t{16} << 30)) {
    return InvalidArgument("max_message_bytes=" + std::to_string(max_message_bytes) +
                           " is outside [1 KiB, 16 GiB]");
  }
  return Status::OK();
}

Status ServerFields::Validate() const {
  if (checkpoint_keep < 1 || checkpoint_keep > 1000) {
    return InvalidArgument("checkpoint_keep=" + std::to_string(checkpoint_keep) +
                           " is outside [1, 1000]");
  }
  if (apply_threads < -1 || apply_threads > 64) {
    return InvalidArgument("apply_threads=" + std::to_string(apply_threads) +
                           " is outside -1 (auto) or [0, 64]");
  }
  return Status::OK();
}

Status WorkerFields::Validate() const {
  if (part_bytes != 0 && (part_bytes < (int64_t{4} << 10) || part_bytes > (int64_t{1} << 30))) {
    return InvalidArgument("part_bytes is outside 0 or [4096, 2^30]");
  }
  if (wait_receive_us < 0 || wait_receive_us > 1000000) {
    return InvalidArgument("wait_receive_us=" + std::to_string(wait_receive_us) +
                           " is outside [0, 1000000]");
  }
  return Status::OK();
}

Status SchedulerOptions::Validate() const {
  PS_RETURN_IF_ERROR(CommonOptions::Validate());
  return SchedulerFields::Validate();
}

Status ServerOptions::Validate() const {
  PS_RETURN_IF_ERROR(MemberOptions::Validate());
  return ServerFields::Validate();
}

Status WorkerOptions::Validate() const {
  PS_RETURN_IF_ERROR(MemberOptions::Validate());
  return WorkerFields::Validate();
}

Status Options::Validate() const {
  PS_RETURN_IF_ERROR(MemberOptions::Validate());
  PS_RETURN_IF_ERROR(SchedulerFields::Validate());
  PS_RETURN_IF_ERROR(ServerFields::Validate());
  return WorkerFields::Validate();
}

SchedulerOptions Options::scheduler() const {
  SchedulerOptions s;
  static_cast<CommonOptions&>(s) = *this;
  static_cast<SchedulerFields&>(s) = *this;
  return s;
}

ServerOptions Options::server() const {
  ServerOptions s;
  static_cast<MemberOptions&>(s) = *this;
  static_cast<ServerFields&>(s) = *this;
  return s;
}

WorkerOptions Options::worker() const {
  WorkerOptions w;
  static_cast<MemberOptions&>(w) = *this;
  static_cast<WorkerFields&>(w) = *this;
  return w;
}

}  // namespace ps
