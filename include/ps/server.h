// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Server: holds shards of tables, applies pushes (aggregate or SGD) and answers pulls.
//
// Lifecycle: construct, Start() (registers with the scheduler and waits until the whole
// cluster is there), then Join() until the scheduler shuts the cluster down, or Stop().
// Thread-safety: every method may be called from any thread.
#ifndef PS_SERVER_H_
#define PS_SERVER_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "ps/export.h"
#include "ps/options.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

struct LAYERPS_EXPORT ServerStats {
  uint64_t messages_received = 0;
  uint64_t bad_messages = 0;  // dropped: malformed, unknown table, range not held...
  uint64_t push_requests = 0;
  uint64_t pull_requests = 0;
  uint64_t bytes_received = 0;  // payload bytes of accepted data messages
  uint64_t bytes_sent = 0;      // payload bytes of replies
  uint64_t sparse_rows = 0;     // rows held in sparse tables
  // Stall warnings logged: a bsp/ssp pull held longer than stall_warning_ms.
  uint64_t stall_warnings = 0;
  // Replication (docs/replication.md): whether this server's ranges have a complete copy
  // on a backup now; the copies of its ranges backups acknowledged (one per new backup,
  // or per takeover that grew its ranges); the complete copies it received as a backup.
  bool backed_up = false;
  uint64_t copies_sent = 0;
  uint64_t copies_received = 0;
  // Bytes of its store (values, rules' state, rows with their ids) in every copy of its
  // ranges handed to the transport for a backup; and
  // of every checkpoint file it wrote (docs/observability.md: the running transfer's
  // progress is in the metrics).
  uint64_t copy_bytes_sent = 0;
  uint64_t checkpoint_bytes_written = 0;
  // Dense requests applied by the apply threads (ServerOptions::apply_threads) rather
  // than on the receive thread, and the span tasks they became.
  uint64_t lane_requests = 0;
  uint64_t lane_tasks = 0;
};

// One sparse table's rows on one server (docs/sparse.md). rows_live = admitted - evicted -
// expired; an unbounded table only ever counts rows_live and admitted.
struct LAYERPS_EXPORT SparseTableStats {
  std::string name;
  uint64_t rows_live = 0;
  uint64_t evicted = 0;   // rows dropped to make room for new ones (capacity)
  uint64_t expired = 0;   // rows dropped by expiry_steps
  uint64_t admitted = 0;  // rows created
  uint64_t refused = 0;   // pushed rows dropped because their id was not admitted
  uint64_t spilled = 0;   // cold tier: evicted rows written to RocksDB
  uint64_t reloaded = 0;  // cold tier: rows read back from RocksDB on a touch
  uint64_t capacity = 0;  // rows this server holds at most (capacity or capacity_bytes); 0: none
};

class LAYERPS_EXPORT Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Registers with the scheduler and waits (options.connect_timeout_ms) until the
  // cluster is complete. Wrong token: kPermissionDenied. No scheduler: kTimeout.
  Status Start();
  // Blocks until the scheduler shuts the cluster down (OK), the scheduler is lost
  // (kUnavailable), or the timeout passes (kTimeout).
  Status Join(std::chrono::milliseconds timeout);
  // Tells the scheduler this server leaves, and stops serving. Idempotent. A server that
  // leaves before the workers finish fails the cluster (its shards are gone): workers'
  // requests to it fail with kUnavailable and the scheduler's Join reports it.
  void Stop();

  NodeId id() const;
  uint32_t rank() const;
  // The endpoint this server's receive socket is bound to.
  std::string endpoint() const;
  ServerStats stats() const;
  // The counters of every sparse table this server holds, by table id (empty before Start).
  std::map<TableId, SparseTableStats> table_stats() const;
  // Bytes and messages exchanged with each peer and per table since Start (also after Stop).
  TrafficStats traffic() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SERVER_H_
