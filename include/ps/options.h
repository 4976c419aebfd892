// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Options: everything a Scheduler, Server or Worker needs to know, in one typed struct.
// Each field says its default and valid range. Read configuration at the edge of the
// program with Options::FromEnv() (the variables layerps-launch sets) or, in daemons,
// with ps::OptionsFromFlags() from ps/flags.h; LayerPS never reads the environment
// deep inside.
#ifndef PS_OPTIONS_H_
#define PS_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "ps/status.h"

namespace ps {

// Makes a node's transport (src/transport/transport.h). Internal: tests pass in-process
// and fault-injecting factories; applications leave Options::transport_factory null.
class TransportFactory;

struct Options {
  // --- Cluster membership -----------------------------------------------------------
  // Scheduler: where it binds ("tcp://HOST:PORT", port 0 = ephemeral, or "ipc://PATH",
  // or "inproc://NAME"). Servers and workers: where they reach the scheduler.
  // Default "tcp://127.0.0.1:0". Env: LAYERPS_SCHEDULER.
  std::string scheduler_address = "tcp://127.0.0.1:0";

  // Where this node's receive socket binds. For tcp the port is usually 0 (ephemeral);
  // the bound port is reported to the scheduler. An empty value derives one from
  // scheduler_address's scheme: tcp -> "tcp://127.0.0.1:0", ipc -> a fresh path under
  // /tmp, inproc -> a fresh name. Env: LAYERPS_BIND.
  std::string bind_address;

  // The host other nodes use to reach this one when bind_address binds a wildcard
  // ("0.0.0.0" or "*"). Empty: this machine's hostname. Env: LAYERPS_ADVERTISE_HOST.
  std::string advertise_host;

  // Scheduler only: how many servers and workers make up the cluster (1..4096 each).
  // Defaults 1 and 1. Env: LAYERPS_NUM_SERVERS, LAYERPS_NUM_WORKERS.
  int num_servers = 1;
  int num_workers = 1;

  // The cluster's shared secret: a node registering with a different token is refused.
  // Default empty (any node with an empty token joins). Env: LAYERPS_TOKEN.
  std::string token;

  // Servers and workers: the rank to ask for within the role (0..count-1), or -1 for
  // the lowest free one. Two nodes asking for the same rank: the second is refused.
  // layerps-launch sets it so that "[worker i]" in its output is rank i. Env: LAYERPS_RANK.
  int rank = -1;

  // --- Timing (milliseconds) -----------------------------------------------------------
  // How often nodes and scheduler exchange heartbeats. 10..60000, default 500.
  // Env: LAYERPS_HEARTBEAT_INTERVAL_MS.
  int heartbeat_interval_ms = 500;
  // A node silent this long is declared dead. Must exceed 2 * heartbeat_interval_ms.
  // Default 5000. Env: LAYERPS_HEARTBEAT_TIMEOUT_MS.
  int heartbeat_timeout_ms = 5000;
  // Start(): how long to wait for the scheduler and for the whole cluster to register.
  // 1..3600000, default 30000. Env: LAYERPS_CONNECT_TIMEOUT_MS.
  int connect_timeout_ms = 30000;
  // A request without a reply this long fails with kTimeout. 1..3600000, default 60000.
  // Env: LAYERPS_REQUEST_TIMEOUT_MS.
  int request_timeout_ms = 60000;

  // --- Data layout ---------------------------------------------------------------------
  // Scheduler only: elements per dense chunk (one key of a dense table). The unit in
  // which dense tables are spread over servers. 1..2^30, default 65536.
  uint64_t dense_chunk_elems = 65536;

  // --- Transport -----------------------------------------------------------------------
  // ZeroMQ I/O threads of this node's context. 1..64, default 1.
  int io_threads = 1;
  // Same-host fast path: payload frames of 64 KiB..32 MiB to peers reached over ipc://
  // travel through a shared-memory ring (128 MiB of address space per peer, pages used
  // as needed; /dev/shm, mode 0600) instead of the socket; the socket carries a small
  // manifest. Default true. Env: LAYERPS_SHARED_MEMORY (0 or 1).
  bool shared_memory = true;
  // Largest message this node accepts, in bytes; bigger ones are dropped unread.
  // 1 KiB..16 GiB, default 4 GiB.
  int64_t max_message_bytes = int64_t{4} << 30;
  // Where the node's transport comes from. Default null: ZeroMQ. Not read from the
  // environment or flags; the in-process cluster tests set it.
  std::shared_ptr<TransportFactory> transport_factory;

  // Reads the LAYERPS_* variables named above over the defaults; a malformed value is
  // an InvalidArgument naming the variable. The result is validated.
  static StatusOr<Options> FromEnv();

  // Checks every field; the message names the first bad one.
  Status Validate() const;
};

}  // namespace ps

#endif  // PS_OPTIONS_H_
