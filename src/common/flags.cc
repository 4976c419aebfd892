// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/flags.h"

#include <gflags/gflags.h>

// One flag per row of the option table (ps/options.h: OptionTable), same name; their help,
// defaults and environment variables are printed from the table (tools/cli.h), so the
// texts here are short. The gflags defaults are placeholders: a flag only counts when
// given on the command line.

DEFINE_string(scheduler, "",
              "Scheduler address (tcp://HOST:PORT, ipc://PATH). Scheduler: where "
              "it binds (port 0 = ephemeral). Others: where to reach it. Default: "
              "$LAYERPS_SCHEDULER, else tcp://127.0.0.1:0");
DEFINE_string(bind, "",
              "Where this node's receive socket binds, e.g. tcp://0.0.0.0:0. "
              "Default: $LAYERPS_BIND, else tcp://127.0.0.1:0 (or ipc/inproc after the "
              "scheduler's scheme)");
DEFINE_string(advertise_host, "",
              "Host other nodes use to reach this one when --bind is a "
              "wildcard. Default: $LAYERPS_ADVERTISE_HOST, else the hostname");
DEFINE_int32(num_servers, 0,
             "Scheduler: servers in the cluster, 1..4096. Default: "
             "$LAYERPS_NUM_SERVERS, else 1");
DEFINE_int32(num_workers, 0,
             "Scheduler: workers in the cluster, 1..4096. Default: "
             "$LAYERPS_NUM_WORKERS, else 1");
DEFINE_int32(max_workers, 0,
             "Scheduler: workers live at once at most; above --num_workers the job is "
             "elastic (later workers join the running job). Default: $LAYERPS_MAX_WORKERS, "
             "else 0 (= num_workers)");
DEFINE_int32(min_workers, 0,
             "Scheduler: fewer live workers than this end a running job with an error "
             "naming min_workers. Default: $LAYERPS_MIN_WORKERS, else 0 (no floor)");
DEFINE_string(token, "",
              "Cluster secret; nodes with another token are refused. Default: "
              "$LAYERPS_TOKEN, else empty");
DEFINE_string(curve_key_file, "",
              "Encrypt and authenticate every connection with CURVE, with the cluster's key "
              "in this file (layerps-keygen FILE makes one). Default: $LAYERPS_CURVE_KEY_FILE");
DEFINE_string(cold_dir, "",
              "Servers: directory of the RocksDB cold tiers of sparse tables declared with "
              "cold_tier (<cold_dir>/<table name>). Default: $LAYERPS_COLD_DIR, else empty");
DEFINE_string(restore, "",
              "Servers: restore the tables from the checkpoints in this directory (a set, "
              "or a directory of sets: the newest complete one). Default: $LAYERPS_RESTORE");
DEFINE_int32(checkpoint_keep, 0, "Servers: checkpoint sets kept per directory. Default 3");
DEFINE_int32(apply_threads, -1,
             "Servers: threads that apply the dense requests of async tables beside the "
             "receive thread, per 64 KiB span in arrival order (0: none). Default: "
             "$LAYERPS_APPLY_THREADS, else -1 (a quarter of the cores, at most 8)");
DEFINE_string(checkpoint_dir, "",
              "Scheduler: where servers write checkpoints (periodic ones, and a worker's "
              "Checkpoint without a directory). Default: $LAYERPS_CHECKPOINT_DIR");
DEFINE_int32(checkpoint_every_s, 0,
             "Scheduler: a checkpoint every this many seconds (0: never). Default 0");
DEFINE_int32(replace_servers_ms, 0,
             "Scheduler: wait this long (ms) for a new server started with --restore to "
             "take a dead server's place (0: a dead server fails the job). Default 0");
DEFINE_int32(rank, -1,
             "Servers and workers: the rank to ask for within the role, or -1 for the "
             "lowest free one. Default: $LAYERPS_RANK, else -1");
DEFINE_int32(heartbeat_interval_ms, 0, "Heartbeat period, 10..60000. Default 500");
DEFINE_int32(heartbeat_timeout_ms, 0,
             "Silence after which a node is dead; > 2x interval. "
             "Default 5000");
DEFINE_int32(scheduler_recovery_ms, 0,
             "A node that lost the scheduler waits this long (ms) for a restarted one "
             "(same address) to take the cluster over; 0: a lost scheduler ends the node. "
             "Default 0");
DEFINE_int32(stall_warning_ms, 0,
             "Scheduler and servers: a barrier, join or synchronous step waiting longer "
             "(ms) logs the ranks it waits for, then keeps waiting; 0: off. Default: "
             "$LAYERPS_STALL_WARNING_MS, else 60000");
DEFINE_int32(metrics_port, 0, "Serve Prometheus metrics on this port (GET /metrics); 0: none");
DEFINE_string(metrics_host, "", "Address the metrics endpoint listens on. Default 127.0.0.1");
DEFINE_string(timeline, "", "Workers: write a Chrome trace of pushes and pulls to this file");
DEFINE_int32(connect_timeout_ms, 0, "How long Start() waits for the cluster. Default 30000");
DEFINE_int32(request_timeout_ms, 0, "How long a request may wait for its reply. Default 60000");
DEFINE_int64(part_bytes, 0,
             "Workers: a dense request's share for one server above this many bytes goes as "
             "several messages in flight at once; 0 never splits, else 4 KiB..1 GiB. "
             "Default: $LAYERPS_PART_BYTES, else 1048576 (1 MiB)");
DEFINE_int32(wait_receive_us, 0,
             "Workers: a thread waiting for a small request takes the receive socket for up "
             "to this many microseconds and handles its reply itself; 0 off, 0..1000000. "
             "Default: $LAYERPS_WAIT_RECEIVE_US, else 2000");
DEFINE_uint64(dense_chunk_elems, 0, "Scheduler: elements per dense chunk, 1..2^30. Default 65536");
DEFINE_int32(io_threads, 0,
             "ZeroMQ I/O threads, 0 (one per stream, see --streams) or 1..64. "
             "Default: $LAYERPS_IO_THREADS, else 0");
DEFINE_int32(streams, 0,
             "Connections to each peer over tcp://, requests striped over them by the range "
             "they touch; 0: from the core count (1 below 8 cores, else min(4, cores / 4)), "
             "or 1..16. Default: $LAYERPS_STREAMS, else 0");
DEFINE_bool(shared_memory, true,
            "Send large frames to ipc:// peers through shared memory. "
            "Default: $LAYERPS_SHARED_MEMORY, else true");
DEFINE_int64(max_message_bytes, 0,
             "Servers and workers: largest message part accepted (bytes, 1 KiB..16 GiB); "
             "also the largest share of a table per server one push can carry. Default: "
             "$LAYERPS_MAX_MESSAGE_BYTES, else 268435456 (256 MiB)");
DEFINE_bool(replication, false,
            "Scheduler: every server backs up the ranges of the rank before it, updates are "
            "acknowledged once both applied them, and a dead server's backup takes over. "
            "Default: $LAYERPS_REPLICATION, else false");
DEFINE_bool(tolerate_worker_loss, false,
            "Scheduler: a dead worker does not fail the job (asynchronous training); "
            "without it, the death of a worker fails every node's calls at once. "
            "Default: $LAYERPS_TOLERATE_WORKER_LOSS, else false");
DEFINE_int64(scheduler_max_message_bytes, 0,
             "Scheduler: largest control message accepted (bytes, 4 KiB..1 GiB). Default: "
             "$LAYERPS_SCHEDULER_MAX_MESSAGE_BYTES, else 1048576 (1 MiB)");

namespace ps {
namespace {
bool IsSet(const char* name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name, &info) && !info.is_default;
}
}  // namespace

StatusOr<Options> OptionsFromFlags() {
  StatusOr<Options> env = Options::FromEnv();
  if (!env.ok()) return env.status();
  Options o = *env;
  for (const OptionInfo& info : OptionTable()) {
    if (!IsSet(info.name.c_str())) continue;
    std::string value;
    if (!gflags::GetCommandLineOption(info.name.c_str(), &value)) continue;
    PS_RETURN_IF_ERROR(SetOption(&o, info.name, value, "--" + info.name));
  }
  PS_RETURN_IF_ERROR(o.Validate().WithContext("bad flag"));
  return o;
}

}  // namespace ps
