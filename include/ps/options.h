// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Options of the nodes, per role: CommonOptions (what every node reads), MemberOptions
// (servers and workers), and what one role alone reads (SchedulerFields, ServerFields,
// WorkerFields), composed into SchedulerOptions, ServerOptions and WorkerOptions (each
// holds what its role reads and nothing else), and Options, which holds them all. Each field says its default and
// valid range. Read configuration at the edge of the
// program with Options::FromEnv() (the variables layerps-launch sets) or, in daemons,
// with ps::OptionsFromFlags() from ps/flags.h; LayerPS never reads the environment
// deep inside.
#ifndef PS_OPTIONS_H_
#define PS_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {

// --- What every node needs: the scheduler, servers and workers -------------------------
struct CommonOptions {
  // Scheduler: where it binds ("tcp://HOST:PORT", port 0 = ephemeral, or "ipc://PATH",
  // or "inproc://NAME"). Servers and workers: where they reach the scheduler.
  // Default "tcp://127.0.0.1:0". Env: LAYERPS_SCHEDULER.
  std::string scheduler_address = "tcp://127.0.0.1:0";

  // The host other nodes use to reach this one when it binds a wildcard ("0.0.0.0" or
  // "*"). Empty: this machine's hostname. Env: LAYERPS_ADVERTISE_HOST.
  std::string advertise_host;

  // The cluster's shared secret: a node registering with a different token is refused.
  // Default empty (any node with an empty token joins: the daemons warn about it).
  // Env: LAYERPS_TOKEN.
  std::string token;
  // CURVE encryption and authentication of every ZeroMQ connection (tcp:// and ipc://):
  // a file holding the cluster's secret key (make one with `layerps-keygen FILE`; mode
  // 0600, every node of the cluster uses the same). A node without it, or with another
  // key, cannot exchange a byte with the others. Empty (default): plaintext.
  // Env: LAYERPS_CURVE_KEY_FILE. docs/THREAT_MODEL.md.
  std::string curve_key_file;

  // How often nodes and scheduler exchange heartbeats (ms). 10..60000, default 500.
  // Env: LAYERPS_HEARTBEAT_INTERVAL_MS.
  int heartbeat_interval_ms = 500;
  // A node silent this long (ms) is declared dead. Must exceed 2 * heartbeat_interval_ms.
  // Default 5000. Env: LAYERPS_HEARTBEAT_TIMEOUT_MS.
  int heartbeat_timeout_ms = 5000;
  // Scheduler recovery (docs/recovery.md): how long (ms) a node that lost the scheduler
  // keeps going (its data traffic goes on, its calls to the scheduler wait) while it
  // re-announces itself to the scheduler's address, for a restarted scheduler to take the
  // cluster over. 0 (default): a lost scheduler ends the node at once. 0..86400000.
  // Env: LAYERPS_SCHEDULER_RECOVERY_MS.
  int scheduler_recovery_ms = 0;
  // Stall warning: a barrier or a Join (scheduler) or a synchronous step's pull (server,
  // bsp/ssp tables) waiting longer than this (ms) logs which ranks it waits for, again
  // every stall_warning_ms, and goes on waiting. 0 disables. 0..86400000, default 60000.
  // Env: LAYERPS_STALL_WARNING_MS. (Read by the scheduler and the servers; here, the one
  // part both share, rather than in two role structs that Options would hold twice.)
  int stall_warning_ms = 60000;

  // Prometheus metrics over HTTP (docs/observability.md): the port this node serves
  // GET /metrics on, 0 (default) for none, else 1..65535. A port in use fails Start.
  // Env: LAYERPS_METRICS_PORT.
  int metrics_port = 0;
  // The address the metrics endpoint listens on. Default 127.0.0.1 (this host only: the
  // endpoint is not authenticated); 0.0.0.0 for every interface. Env: LAYERPS_METRICS_HOST.
  std::string metrics_host = "127.0.0.1";

  // ZeroMQ I/O threads of this node's context: 0 (default) for one per stream
  // (MemberOptions::streams; the scheduler: one), or 1..64. Env: LAYERPS_IO_THREADS.
  int io_threads = 0;
  // Same-host fast path: payload frames of 64 KiB..32 MiB to peers reached over ipc://
  // travel through a shared-memory ring (128 MiB of address space per peer, pages used
  // as needed; /dev/shm, mode 0600) instead of the socket; the socket carries a small
  // manifest. Default true. Env: LAYERPS_SHARED_MEMORY (0 or 1).
  bool shared_memory = true;

  // Checks these fields; the message names the first bad one.
  Status Validate() const;

 private:
  // Where the node's transport comes from (null: ZeroMQ). Not an option: the in-process
  // cluster tests set it through src/transport/transport.h (SetTransportFactory).
  friend struct TransportHook;
  std::shared_ptr<void> transport_factory_;
  // The clock failure detection runs on (null: the steady clock). Not an option: the
  // in-process cluster tests set a manual one through src/common/clock.h (SetClock).
  friend struct ClockHook;
  std::shared_ptr<void> clock_;
};

// --- What only the scheduler reads: the shape of the cluster and its policies ------------
struct SchedulerFields {
  // Servers (0..4096; 0: collectives only, no tables) and workers (1..4096). Defaults 1, 1.
  // Env: LAYERPS_NUM_SERVERS, LAYERPS_NUM_WORKERS.
  int num_servers = 1;
  int num_workers = 1;
  // Elements per dense chunk (one key of a dense table): the unit in which dense tables
  // are spread over servers. 1..2^30, default 65536.
  uint64_t dense_chunk_elems = 65536;
  // What the death of a worker (a crash or silence past heartbeat_timeout_ms; not a
  // Leave) does to the job. false (default, synchronous training): the job fails at once:
  // every node's pending and later requests, barriers and declares fail with
  // kUnavailable naming the worker, the servers stop and the scheduler's Join fails.
  // true (asynchronous training): the other workers go on (calls waiting on the dead one
  // fail), and the job succeeds if at least one worker finishes with Stop.
  // Env: LAYERPS_TOLERATE_WORKER_LOSS (a boolean).
  bool tolerate_worker_loss = false;
  // Elastic jobs (docs/recovery.md, "Elastic jobs"). max_workers: how many workers may be
  // live at once. 0 (default): num_workers. Above num_workers the job is elastic: it
  // starts once num_workers workers registered, and later workers join the running job
  // (each takes a dead worker's rank if there is one, else the lowest rank no worker ever
  // held) while fewer than max_workers are live; an elastic job tolerates worker loss
  // (as tolerate_worker_loss). 0 or num_workers..4096. Env: LAYERPS_MAX_WORKERS.
  int max_workers = 0;
  // The fewest live workers a running job goes on with: when a worker's death or leave
  // (without Stop's join) leaves fewer live, the scheduler ends the job with
  // kUnavailable naming min_workers and the count. 0 (default): no floor (a job that
  // tolerates worker loss goes on while one worker is live). 0..num_workers.
  // Env: LAYERPS_MIN_WORKERS.
  int min_workers = 0;
  // max_workers as the scheduler uses it (num_workers when 0).
  int MaxWorkers() const { return max_workers > 0 ? max_workers : num_workers; }
  bool elastic() const { return MaxWorkers() > num_workers; }
  // Periodic checkpoints (docs/checkpoints.md): every checkpoint_every_s seconds the
  // scheduler has every server write its shards under checkpoint_dir (a path on the
  // servers' hosts), as Worker::Checkpoint does. checkpoint_dir is also where
  // Worker::Checkpoint("") writes. 0 (default): no periodic checkpoints; 1..604800.
  // Env: LAYERPS_CHECKPOINT_DIR, LAYERPS_CHECKPOINT_EVERY_S.
  std::string checkpoint_dir;
  int checkpoint_every_s = 0;
  // Server replacement (docs/checkpoints.md, "Replacing a server"). 0 (default): a server
  // that dies or leaves before the workers finish fails the job. > 0: the job waits this
  // many ms for a new server (a layerps-server started with --restore=DIR, usually the
  // checkpoint directory) to take the dead one's rank and ranges; workers hold the
  // requests for the dead server meanwhile (each within its request_timeout_ms) and send
  // them to the replacement. No replacement in time: the job fails with kUnavailable.
  // 0..86400000. Env: LAYERPS_REPLACE_SERVERS_MS.
  int replace_servers_ms = 0;
  // Replication (docs/replication.md): every server keeps a copy of the ranges of the
  // live server of the rank before it (rank r backs up rank r - 1 mod num_servers while
  // all live), and a server acknowledges an update only once its backup applied it too.
  // When a server dies, its backup takes over its ranges, and no acknowledged update is
  // lost; the servers whose backup changed then copy their ranges to the new one, so a
  // later death is covered too. Needs num_servers >= 2; asynchronous tables only.
  // Env: LAYERPS_REPLICATION.
  bool replication = false;
  // Largest message part the scheduler's socket accepts (as max_message_bytes for
  // servers and workers); it only ever receives control messages (register, heartbeats,
  // declares, barriers, placements: kilobytes). 4 KiB..1 GiB, default 1 MiB.
  // Env: LAYERPS_SCHEDULER_MAX_MESSAGE_BYTES.
  int64_t scheduler_max_message_bytes = int64_t{1} << 20;

  Status Validate() const;
};

// --- What servers and workers (the members of a cluster) need besides ------------------------
struct MemberOptions : CommonOptions {
  // Where this node's receive socket binds. For tcp the port is usually 0 (ephemeral);
  // the bound port is reported to the scheduler. An empty value derives one from
  // scheduler_address's scheme: tcp -> "tcp://127.0.0.1:0", ipc -> a fresh path under
  // /tmp, inproc -> a fresh name. Env: LAYERPS_BIND.
  std::string bind_address;

  // The rank to ask for within the role (0..count-1), or -1 for the lowest free one. Two
  // nodes asking for the same rank: the second is refused. layerps-launch sets it so
  // that "[worker i]" in its output is rank i. Env: LAYERPS_RANK.
  int rank = -1;

  // Start(): how long (ms) to wait for the scheduler and for the whole cluster to
  // register. 1..3600000, default 30000. Env: LAYERPS_CONNECT_TIMEOUT_MS.
  int connect_timeout_ms = 30000;
  // A request without a reply this long (ms) fails. 1..3600000, default 60000.
  // Env: LAYERPS_REQUEST_TIMEOUT_MS.
  int request_timeout_ms = 60000;
  // Connections (streams) a node opens to each server or worker it sends to over tcp://
  // (or over ipc:// with shared_memory off). Requests are striped over them by the range
  // they touch: every message on one dense range of a table (one part of it), and every
  // message of one sparse table, takes the same stream, so a pull never overtakes an
  // earlier push of the same values; different ranges may overtake each other.
  // Control messages, fused and peer messages take the first stream. 0 (default): from
  // the core count, 1 below 8 cores, else min(4, cores / 4); or 1..16.
  // Env: LAYERPS_STREAMS.
  int streams = 0;
  // Largest message part (frame) the receive socket of a server or a worker accepts, in
  // bytes: ZeroMQ drops the connection of a peer that announces a bigger one, before
  // reading it. It also bounds what one connection that has not authenticated can make
  // the node buffer. A received message whose header and frames together exceed it (or
  // that has more parts than any LayerPS message) is dropped and counted as bad. A worker
  // refuses to send a part above it (ResourceExhausted), so it caps a table's share per
  // server: 256 MiB = 64M float32 elements. 1 KiB..16 GiB, default 256 MiB.
  // Env: LAYERPS_MAX_MESSAGE_BYTES.
  int64_t max_message_bytes = int64_t{256} << 20;

  // Checks these fields and the common ones.
  Status Validate() const;
  // `streams` and `io_threads` as this machine resolves their 0 (from its core count).
  int ResolvedStreams() const;
  int ResolvedIoThreads() const;
};

// --- What only servers read ----------------------------------------------------------------
struct ServerFields {
  // The directory under which tables declared with TableSpec::cold_tier keep
  // their RocksDB stores (<cold_dir>/<table name>; docs/sparse.md "Cold tier"). Empty:
  // declaring a cold-tier table fails (kFailedPrecondition). Env: LAYERPS_COLD_DIR.
  std::string cold_dir;
  // Restore the tables from the checkpoints under this directory
  // (docs/checkpoints.md): a set's directory (".../ckpt-<set>"), or a directory of sets,
  // of which the newest complete one is taken. A table declared in the restored cluster
  // whose name the set holds starts from its values (and its rule's state); a different
  // layout (kind, size, dim, rule) fails its declaration with the reason. Empty (default):
  // no restore. Start() fails when the directory holds no complete set.
  // Env: LAYERPS_RESTORE.
  std::string restore_dir;
  // How many checkpoint sets to keep under a checkpoint directory; a server
  // deletes its own files of older sets after writing a new one. 1..1000, default 3.
  // Env: LAYERPS_CHECKPOINT_KEEP.
  int checkpoint_keep = 3;
  // Threads beside the receive thread that apply the dense requests of async tables
  // (server/apply_lanes.h): a table is cut into 64 KiB spans, each always applied by the
  // same thread, so requests that share elements are applied in the order they arrived
  // while the others, and the spans of one large request, run side by side. 0: every
  // request on the receive thread; -1 (default): a quarter of this host's cores, at most 8
  // (none below 4 cores). 0..64.
  // Env: LAYERPS_APPLY_THREADS.
  int apply_threads = -1;

  Status Validate() const;
};

// --- What only workers read ----------------------------------------------------------------
struct WorkerFields {
  // Write a Chrome trace (JSON; Perfetto, chrome://tracing) of every push and
  // pull to this file ("%r" is replaced by the worker's rank; without it ".<rank>" is put
  // before the extension when the file is shared). Empty (default): none.
  // Env: LAYERPS_TIMELINE.
  std::string timeline;
  // A dense push, pull or pushpull whose share for one server is larger than
  // this many bytes (on the wire) goes to that server as several messages of at most
  // this size, all in flight at once, each received into its own buffer; the request
  // completes when every part is answered and fails if any part fails (docs/wire-format.md,
  // "Parts"). Tables with sync bsp/ssp are never split. 0: never split. 0 or
  // 4 KiB..1 GiB, default 1 MiB (measured on a 2-core VM: bench/RESULTS.md, issue 14).
  // Env: LAYERPS_PART_BYTES.
  int64_t part_bytes = int64_t{1} << 20;
  // Receiving in the waiting thread: a thread in Worker::Wait for a small request
  // (at most 64 KiB of values over at most 4 servers) takes the worker's receive socket
  // from its receive thread for up to this many microseconds and handles its reply
  // itself, so that the reply does not cross threads (docs/architecture.md, "Receiving
  // in the waiting thread"). 0: off (the receive thread hands every reply over).
  // 0..1000000, default 2000. Env: LAYERPS_WAIT_RECEIVE_US.
  int wait_receive_us = 2000;

  Status Validate() const;
};

// --- Per role: what ps::Scheduler, ps::Server and ps::Worker are built from -----------------
// Each holds the fields its role reads and no other.
struct SchedulerOptions : CommonOptions, SchedulerFields {
  Status Validate() const;
};
struct ServerOptions : MemberOptions, ServerFields {
  Status Validate() const;
};
struct WorkerOptions : MemberOptions, WorkerFields {
  Status Validate() const;
};

// --- Every option of every role ------------------------------------------------------------

// What a launcher hands to all the nodes it starts, what Options::FromEnv reads and what
// the daemons' flags fill (ps/flags.h). It converts to each role's options, so
// `ps::Worker worker(options)` takes the worker's part.
struct Options : MemberOptions, SchedulerFields, ServerFields, WorkerFields {
  // Reads the LAYERPS_* variables named above over the defaults; a malformed value is
  // an InvalidArgument naming the variable. The result is validated. Without
  // LAYERPS_SCHEDULER, a job of torchrun, Slurm or mpirun (DetectLauncher) gives the
  // scheduler address, the rank (unless LAYERPS_RANK) and num_workers (unless
  // LAYERPS_NUM_WORKERS).
  static StatusOr<Options> FromEnv();

  // Checks every field; the message names the first bad one.
  Status Validate() const;

  SchedulerOptions scheduler() const;
  ServerOptions server() const;
  WorkerOptions worker() const;
  operator SchedulerOptions() const { return scheduler(); }  // NOLINT: implicit by design
  operator ServerOptions() const { return server(); }        // NOLINT
  operator WorkerOptions() const { return worker(); }        // NOLINT
};

// --- The option table: every field of Options by name --------------------------------------
// One row per field: the name (also the daemons' flag and the Python keyword), its
// LAYERPS_* variable, who reads it and a one-line description. Options::FromEnv, the
// daemons' flags (ps/flags.h), layerps-launch (which forwards every row not marked
// per_node to all the nodes it starts) and the Python package are all driven by it.
struct OptionInfo {
  std::string name;     // the flag: "heartbeat_interval_ms", "scheduler"
  std::string field;    // the member of Options: "heartbeat_interval_ms", "scheduler_address"
  std::string env;      // "LAYERPS_HEARTBEAT_INTERVAL_MS"
  std::string type;     // "string", "int" or "bool"
  std::string help;     // what it is, its range
  bool scheduler = false, server = false, worker = false;  // the roles that read it
  bool per_node = false;  // differs per node (rank, bind address): a launcher sets it itself
};
const std::vector<OptionInfo>& OptionTable();
// The field's value as text (booleans "true"/"false"); empty for an unknown name.
std::string OptionValue(const Options& options, const std::string& name);
// Sets the field from text, checking the type and the field's range (an integer outside
// it, or not an integer, is an InvalidArgument naming `what`, e.g. the variable). Booleans
// take 1/0, true/false, yes/no, on/off (any case). kNotFound for an unknown name.
Status SetOption(Options* options, const std::string& name, const std::string& value,
                 const std::string& what = "");

// Parses a boolean as SetOption does.
Status ParseBool(const std::string& text, const std::string& what, bool* out);

}  // namespace ps

#endif  // PS_OPTIONS_H_
