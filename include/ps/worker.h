// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Worker: the user's training process's handle on the cluster. Declares tables, pushes
// gradients and pulls values, dense and sparse, asynchronously. Its collectives and peer
// messages (the Horovod half) are those of its Communicator (`communicator()`,
// ps/communicator.h).
//
// Lifecycle: construct, Start() (registers and waits until the cluster is complete),
// use, Stop() (leaves; the cluster shuts down when every worker has left).
//
// Requests: Push/Pull/PushPull/Assign return a Ticket at once; Wait(ticket, timeout)
// returns the request's Status. Errors found before sending (unknown table, size
// mismatch, not started) are reported by Wait too, and nothing is sent.
//
// Blocking: the calls return once the request is queued; when a server's send queue is
// full (100000 messages) they wait for room, at most options.request_timeout_ms.
//
// Buffers: the caller's buffers are used in place (pushed bytes are sent without a
// copy; pulled values are written straight into the output). They must stay valid and
// unmodified until the request completes: Wait returned anything but kTimeout, or the
// callback ran. After kTimeout the request is still in flight: Wait again.
//
// Callback form: pass a Callback and it runs once when the request completes: on the
// worker's network thread or its completion thread (never a ZeroMQ or server thread),
// or on the calling thread before the call returns when the request fails before
// anything is sent (bad arguments). It must be quick and must not call Wait. A ticket with a
// callback is released when the callback returns (Wait on it returns kNotFound).
//
// Bookkeeping: a request without a callback stays registered until Wait returns its
// status; wait on every ticket (or use callbacks) so that memory stays bounded.
//
// Thread-safety: every method may be called from several threads at once.
#ifndef PS_WORKER_H_
#define PS_WORKER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ps/collectives.h"
#include "ps/communicator.h"
#include "ps/export.h"
#include "ps/options.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

struct LAYERPS_EXPORT WorkerStats {
  uint64_t requests_sent = 0;  // messages to servers
  uint64_t replies_received = 0;
  uint64_t bad_messages = 0;    // dropped replies: malformed, unknown request...
  uint64_t bytes_sent = 0;      // payload bytes pushed
  uint64_t bytes_received = 0;  // payload bytes pulled
  uint64_t payload_copies = 0;  // pushes whose payload had to be copied (sparse coalescing)
  // Worker caches (TableSpec::cache_rows, docs/sparse.md): unique ids of sparse pulls
  // answered from the cache, and sent to the servers.
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // Request parts sent again to a dead server's replacement (replace_servers_ms).
  uint64_t resent = 0;
  // Replies handled by the thread that waited for them (WorkerOptions::wait_receive_us),
  // without crossing from the receive thread.
  uint64_t replies_in_wait = 0;
};

class LAYERPS_EXPORT Worker {
 public:
  using Callback = std::function<void(const Status&)>;

  explicit Worker(WorkerOptions options);
  ~Worker();  // Stop()s if running
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Registers and waits (options.connect_timeout_ms) until the cluster is complete.
  Status Start();
  // Fails every pending request with kAborted, leaves the cluster. Idempotent.
  void Stop();

  // Membership as of the last cluster map seen (still valid after Stop()); before a
  // successful Start(): kUnassignedId, 0, 0, 0, empty. In Nodes(), a node this worker was
  // told is dead or has left (a worker's departure changes no map) has alive == false.
  NodeId id() const;
  uint32_t rank() const;  // 0..num_workers()-1
  int num_workers() const;
  int num_servers() const;
  std::vector<NodeInfo> Nodes() const;

  // Declares a table, or finds the one already declared under spec.name with the same
  // spec (every worker may declare the same tables). A different spec under the same
  // name: kAlreadyExists. Blocks up to options.request_timeout_ms.
  StatusOr<TableId> DeclareTable(const TableSpec& spec);
  // Sets the learning rate the servers' update rule uses for `table` (a schedule stepped
  // by the training loop: warm-up, decay...). Every server and worker has the new rate
  // when this returns, so pushes issued after it are applied with it; pushes in flight
  // may be applied with either. The rule's state (momentum, Adam's moments) is kept.
  // kInvalidArgument for a rule without a learning rate (sum, elastic) or a rate that is
  // not finite and >= 0 (> 0 for ftrl); kNotFound for an unknown table. One map update
  // per call: meant for once a step or less, not per request. Blocks up to
  // options.request_timeout_ms.
  Status SetLearningRate(TableId table, float learning_rate);
  // Drops the table declared under `name` from the cluster: the scheduler takes it out of
  // the map, every server frees its share when the new map reaches it, and the name may
  // be declared again (a new id, values from the initializer). Returns once this worker's
  // map no longer lists it. Requests on the old id then fail with kNotFound; drop a table
  // when no request on it is in flight (one held by a bsp/ssp step waits for its deadline).
  // kNotFound for a name no table has. Blocks up to options.request_timeout_ms.
  Status DropTable(const std::string& name);
  // Has every server write its shards of every table (values, the rule's state, the
  // specs) as one checkpoint set under `dir`, a directory on the servers' hosts (empty:
  // the scheduler's checkpoint_dir); returns the set's directory, <dir>/ckpt-<set>, once
  // every server's file is on disk (written atomically, fsynced). A cluster started with
  // servers' --restore pointing there (or at `dir`: its newest complete set) starts from
  // these values (docs/checkpoints.md). Each server writes its file between two requests,
  // so for one consistent cut call it when no push is in flight (e.g. after a barrier).
  // Errors: kInvalidArgument (no directory anywhere), kFailedPrecondition (a checkpoint
  // to another directory is in progress), kIoError (a server could not write: the
  // message names its rank and the reason), kUnavailable (a server died meanwhile),
  // kTimeout. Blocks up to `timeout`.
  StatusOr<std::string> Checkpoint(const std::string& dir, std::chrono::milliseconds timeout);
  // The spec of a declared table; kNotFound for an unknown id.
  StatusOr<TableSpec> GetTableSpec(TableId table) const;

  // --- Dense: n must equal the table's size -------------------------------------------
  Ticket Push(TableId table, const float* grad, size_t n, Callback cb = nullptr);
  Ticket Pull(TableId table, float* out, size_t n, Callback cb = nullptr);
  // Push, then pull the values after this push was applied, in one round trip.
  Ticket PushPull(TableId table, const float* grad, float* out, size_t n, Callback cb = nullptr);
  // Overwrites the server's values (no update rule): for initialization and broadcast.
  Ticket Assign(TableId table, const float* values, size_t n, Callback cb = nullptr);

  // --- Sparse: rows is num_keys x dim, row-major; rows_len must be num_keys * dim -----
  // Duplicate keys are summed before sending. num_keys may be 0.
  Ticket PushSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                    size_t rows_len, Callback cb = nullptr);
  // Row i of the output receives the value of keys[i] (duplicates each get a copy).
  Ticket PullSparse(TableId table, const Key* keys, size_t num_keys, float* rows, size_t rows_len,
                    Callback cb = nullptr);
  // Overwrites rows (for duplicate keys the last row wins).
  Ticket AssignSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                      size_t rows_len, Callback cb = nullptr);

  // --- Many dense tensors of one step in one request -------------------------------------
  // Each tensor as Push/Pull/PushPull would do it, but every slice smaller than 256 KiB
  // bound for the same server travels in one fused message (its values copied once into
  // it); larger slices are sent in place. One ticket for the whole group; the request
  // succeeds only if every tensor's does. PushPullMany pairs grads[i] with outs[i], which
  // must name the same table.
  Ticket PushMany(const std::vector<DenseRef>& tensors, Callback cb = nullptr);
  Ticket PullMany(const std::vector<DenseOut>& tensors, Callback cb = nullptr);
  Ticket PushPullMany(const std::vector<DenseRef>& grads, const std::vector<DenseOut>& outs,
                      Callback cb = nullptr);

  // --- Many sparse tables of one step in one request ------------------------------------
  // Each entry as PushSparse/PullSparse would do it, but for every table at once: entries
  // naming the same table are merged first (a push sums the rows of a key repeated across
  // them; a pull asks for each unique key once and gives every entry its rows), and the
  // unique keys of every table bound for one server travel in one fused message
  // (docs/wire-format.md, "Fused sparse messages"), or several when that server's share
  // is above Options::part_bytes: one message per server per call instead of one per
  // table and server. One ticket; the request succeeds only if every part does (a failed
  // request may have been applied on the servers that answered OK). Every entry is
  // checked before anything is sent: an unknown or dense table, rows_len != num_keys *
  // dim or a null pointer with num_keys > 0 fail the whole call with kInvalidArgument
  // naming the entry's index and its table, and nothing is sent.
  // Entries travel as PushSparse/PullSparse parts of their own, inside the same request,
  // for tables whose values are narrowed on the wire (wire_dtype fp16/bf16) or that the
  // servers synchronize (sync bsp/ssp: their clocks count this call as one step); tables
  // with a worker cache (cache_rows) are served through it as by PullSparse (only the ids
  // it cannot answer are pulled; a push ticks its clock). Host memory; the device
  // variants are PushSparseManyDevice/PullSparseManyDevice below.
  // Order: with Options::streams > 1 fused messages take the first connection and a
  // single-table sparse request its table's, so a PushSparse followed by a PullSparseMany
  // of the same table (or the reverse) without a Wait between them may be served in
  // either order; with one stream, or between *Many calls, requests keep their order.
  Ticket PushSparseMany(const std::vector<SparseRef>& entries, Callback cb = nullptr);
  Ticket PullSparseMany(const std::vector<SparseOut>& entries, Callback cb = nullptr);

  // --- GPU memory (builds with CUDA; see docs/cuda.md) -------------------------------------
  // The same requests with the caller's data in GPU memory. `stream` is the cudaStream_t
  // (as void*; nullptr = the default stream) on which the data is produced or consumed.
  // Pushes pack on the GPU (sparse: coalesce and bucket by server) into pinned host
  // memory (a process-wide pool keeps it for reuse) that is sent without a further copy;
  // sparse pulls deduplicate and group their keys on the GPU the same way. The call waits
  // for that packing on `stream` only (never the whole device) and then returns the
  // ticket. Pulls: when the request completes OK, the values have been copied (sparse:
  // scattered, duplicates included) into `out` by work enqueued on `stream`; synchronize
  // the stream or order later work after it before reading them. Sizes are checked as in
  // the host calls.
  // Without CUDA support (see DeviceSupport), every one fails with kFailedPrecondition.
  Ticket PushDevice(TableId table, const float* grad, size_t n, void* stream,
                    Callback cb = nullptr);
  Ticket PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb = nullptr);
  Ticket PushSparseDevice(TableId table, const Key* keys, size_t num_keys, const float* rows,
                          size_t rows_len, void* stream, Callback cb = nullptr);
  Ticket PullSparseDevice(TableId table, const Key* keys, size_t num_keys, float* rows,
                          size_t rows_len, void* stream, Callback cb = nullptr);
  // PushSparseMany/PullSparseMany with every entry's keys and rows in GPU memory: the
  // keys (and a push's rows) are copied to pinned host memory on `stream`, which the call
  // waits for; the fused messages are then built on the CPU as by the host calls (the
  // coalescing of several tables runs there, not on the GPU as for one table); a pull's
  // rows are copied up to every entry's output on `stream` when the request completes OK.
  // Every entry is checked as by the host calls before anything is copied.
  Ticket PushSparseManyDevice(const std::vector<SparseRef>& entries, void* stream,
                              Callback cb = nullptr);
  Ticket PullSparseManyDevice(const std::vector<SparseOut>& entries, void* stream,
                              Callback cb = nullptr);
  // True when this build has the CUDA path and a GPU is usable by this process.
  static bool DeviceSupport();

  // --- Collectives and peer messages --------------------------------------------------------
  // The worker's communicator (ps/communicator.h): sends and receives between workers and
  // the collectives among them. It lives as long as this Worker; its tickets may be waited
  // for with Wait below as well as with its own.
  Communicator& communicator();
  const Communicator& communicator() const;

  // The request's Status; kTimeout if it is still in flight after timeout (Wait again),
  // kNotFound for an unknown or already-waited ticket.
  Status Wait(Ticket ticket, std::chrono::milliseconds timeout);
  // Waits until every Push/Pull/PushPull/Assign (dense, sparse, many, device) this worker
  // started before the call has completed, whether its ticket was waited for or not: a
  // worker that pushes without waiting flushes before a point where its updates must be
  // on the servers (Flush, then a barrier: every worker's pushes are applied). The
  // requests' tickets stay valid; each one's error is its Wait's (or callback's), not
  // Flush's; a request with a callback counts as complete once its callback has returned
  // (so a callback must not Flush: it would wait for itself until the timeout). Peer
  // sends and receives are not waited for. kTimeout, saying how many are still in
  // flight, when `timeout` passes first (Flush again to go on waiting).
  Status Flush(std::chrono::milliseconds timeout);

  // --- Placement ----------------------------------------------------------------------------
  // Makes `placement` the one in force for the whole cluster: tables of the listed layers
  // declared from now on live on the listed server ranks only (a new cluster-map epoch,
  // seen by every node). Refused with kFailedPrecondition when a table already declared
  // would have to move, kInvalidArgument for a bad rank or list.
  Status InstallPlacement(const std::vector<LayerServers>& placement,
                          std::chrono::milliseconds timeout);
  // The placement in force (as of the last cluster map this worker saw), by layer name.
  std::vector<LayerServers> Placement() const;
  // The server ranks holding a table's ranges, in key order (empty for an unknown table).
  std::vector<uint32_t> TableServers(TableId table) const;

  // Blocks until every node of the group reached the barrier, or the timeout passes.
  // Workers that joined (Join) are not waited for; `participants` (when not null)
  // receives, on OK, how many nodes took part. Errors: kTimeout (the timeout passed;
  // the message names the ranks not arrived, and this worker no longer counts as
  // arrived), kUnavailable (a member died, or a worker of the group left with Stop()
  // without joining: the barrier can never complete; the message names its rank),
  // kFailedPrecondition (not started, or this worker has joined). A barrier waiting
  // longer than stall_warning_ms makes the scheduler log the ranks it waits for.
  Status Barrier(Group group, std::chrono::milliseconds timeout);
  Status Barrier(Group group, std::chrono::milliseconds timeout, int* participants);

  // Uneven inputs, as Horovod's join: this worker ran out of data. From now on the other
  // workers' barriers and synchronous steps (bsp/ssp tables' clocks on the servers) go on
  // without it; it may still pull. Blocks until every live worker has joined (or the
  // timeout: kTimeout naming the workers that have not), then returns; `joined` (when
  // not null) receives how many workers joined. Call Stop() afterwards. A worker that
  // Stop()s without joining makes the other workers' barriers fail (kUnavailable
  // naming its rank) rather than pass without it, unless the scheduler's
  // tolerate_worker_loss is on (then the barriers go on without it).
  Status Join(std::chrono::milliseconds timeout, int* joined = nullptr);

  WorkerStats stats() const;
  // Bytes and messages exchanged with each peer and per table since Start (also after Stop).
  TrafficStats traffic() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_WORKER_H_
