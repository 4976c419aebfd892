// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The Worker facade: it owns the node runtime (membership, the cluster map), the request
// tracker (tickets, parts, completion, expiry) and the PS requests (slicing by the map),
// and wires them together. What a request does lives in worker/ps_requests.* (host
// memory) and worker/device_path.cc (GPU memory); how it completes in
// worker/request_tracker.*.
#include "ps/worker.h"

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "common/mutex.h"
#include "node/node_runtime.h"
#include "worker/collectives.h"
#include "worker/communicator_impl.h"
#include "worker/peer_messages.h"
#include "worker/ps_requests.h"
#include "worker/request_tracker.h"
#include "worker/timeline.h"

namespace ps {

class Worker::Impl {
 public:
  explicit Impl(WorkerOptions options)
      : options_(std::move(options)),
        tracker_(options_, [this](NodeId to, Message&& m) { return SendData(to, std::move(m)); }),
        ps_(&tracker_,
            [this]() -> std::shared_ptr<const ClusterMap> {
              return started_ ? runtime_->map() : nullptr;
            },
            options_.part_bytes),
        peers_(
            &tracker_, [this](NodeId to, Message&& m) { return SendData(to, std::move(m)); },
            kPeerBufferBytes),
        collectives_(
            &peers_, &tracker_, options_,
            [this]() -> std::shared_ptr<const ClusterMap> {
              return started_ ? runtime_->map() : nullptr;
            },
            [this]() { return started_ ? runtime_->id() : kUnassignedId; }),
        communicator_(std::make_unique<Communicator::Impl>(
            Communicator::Impl::Host{
                [this]() -> std::shared_ptr<const ClusterMap> {
                  return started_ ? runtime_->map() : nullptr;
                },
                [this]() { return started_ ? runtime_->id() : kUnassignedId; },
                [this](NodeId id) {
                  MutexLock lock(&gone_mu_);
                  return gone_.count(id) != 0;
                },
                [this]() {
                  return failed_.load(std::memory_order_acquire) ? failure_ : Status::OK();
                }},
            &tracker_, &peers_, &collectives_)) {}

  Status Start() {
    if (ever_started_) return FailedPrecondition("worker already started (a Worker starts once)");
    NodeRuntime::Handlers h;
    h.on_node_dead = [this](NodeId id, const Status& why, bool left) {
      OnNodeDead(id, why, left);
    };
    // Before the runtime refuses sends to it: a collective's send that fails from then on
    // fails because the member left (Collectives::MarkLeft).
    h.on_node_left = [this](NodeId id) { collectives_.MarkLeft(id); };
    h.on_server_replaceable = [this](NodeId id, NodeId successor) {
      OnServerReplaceable(id, successor);
    };
    h.on_map = [this](const std::shared_ptr<const ClusterMap>& map) {
      OnMap(map);
      return std::vector<std::pair<TableId, Status>>();
    };
    h.on_failure = [this](const Status& why) { OnClusterFailed(why); };
    h.on_tick = [this] { Expire(); };
    auto rt = std::make_unique<NodeRuntime>(options_, Role::kWorker, std::move(h));
    rt->Handle(MsgType::kReply, [this](Message&& m) { tracker_.OnReply(std::move(m)); });
    rt->Handle(MsgType::kPeerTensor, [this](Message&& m) { peers_.OnMessage(std::move(m)); });
    // Handlers may run as soon as Start begins receiving: publish runtime_ first.
    runtime_ = std::move(rt);
    Status s = runtime_->Start();
    if (!s.ok()) {
      runtime_.reset();
      return s;
    }
    if (options_.wait_receive_us > 0) {
      // A small request's waiter may handle its own replies (NodeRuntime::ReceiveWhile).
      NodeRuntime* rt_ptr = runtime_.get();
      const auto budget = std::chrono::microseconds(options_.wait_receive_us);
      tracker_.SetWaitReceiver(
          [rt_ptr, budget](Ticket ticket, const std::function<bool()>& done) {
            return rt_ptr->ReceiveWhile(
                [ticket](const Message& m) {
                  return m.header.msg_type() == MsgType::kReply && m.header.request_id == ticket;
                },
                done, budget);
          },
          [rt_ptr] { rt_ptr->WakeReceiver(); });
    }
    tracker_.Start();
    started_ = true;
    ever_started_ = true;
    // Observability (docs/observability.md): a port in use or an unwritable timeline
    // fails Start, after which the worker leaves again.
    Status extras = StartObservability();
    if (!extras.ok()) {
      Stop();
      return extras;
    }
    return Status::OK();
  }

  void Stop() {
    metrics_.reset();
    if (!started_.exchange(false)) return;
    runtime_->Stop(/*send_leave=*/true);
    tracker_.Stop(Aborted("the worker stopped"));
    tracker_.SetTimeline(nullptr);
    if (timeline_) timeline_->Close();
  }

  Status StartObservability() {
    if (!options_.timeline.empty()) {
      const std::string path = Timeline::FileName(options_.timeline, rank(),
                                                  CountRole(Role::kWorker) > 1);
      StatusOr<std::shared_ptr<Timeline>> t =
          Timeline::Open(path, rank(), [this](TableId id) { return TableName(id); });
      if (!t.ok()) return t.status();
      timeline_ = *t;
      tracker_.SetTimeline(timeline_);
    }
    StatusOr<std::unique_ptr<metrics::Exporter>> exporter = metrics::MaybeStart(
        options_.metrics_host, options_.metrics_port, "worker",
        [this](std::vector<metrics::Sample>* out) { CollectMetrics(out); });
    if (!exporter.ok()) return exporter.status();
    metrics_ = std::move(*exporter);
    return Status::OK();
  }

  // A table's name as the cluster map this node has gives it ("" when unknown).
  std::string TableName(TableId id) const {
    auto m = runtime_->map();
    const TableInfo* t = m ? m->FindTable(id) : nullptr;
    return t ? t->spec.name : std::string();
  }

  void CollectMetrics(std::vector<metrics::Sample>* out) const {
    using metrics::Counter;
    const WorkerStats s = stats();
    out->push_back(Counter("layerps_worker_requests_sent_total", "Messages sent to servers",
                           s.requests_sent));
    out->push_back(Counter("layerps_worker_replies_received_total", "Replies received",
                           s.replies_received));
    out->push_back(Counter("layerps_worker_bad_messages_total",
                           "Replies dropped: malformed, unknown request...", s.bad_messages));
    out->push_back(Counter("layerps_worker_payload_bytes_total", "Payload bytes pushed and pulled",
                           s.bytes_sent, {{"direction", "sent"}}));
    out->push_back(Counter("layerps_worker_payload_bytes_total", "Payload bytes pushed and pulled",
                           s.bytes_received, {{"direction", "received"}}));
    tracker_.CollectMetrics(out);
    metrics::AppendTraffic(traffic(), out, [this](TableId id) { return TableName(id); });
    auto m = runtime_->map();
    out->push_back(metrics::Gauge("layerps_map_epoch", "Cluster-map epoch this node has",
                                  static_cast<double>(m ? m->epoch : 0)));
  }

  // These report the last cluster map this worker saw, also after Stop(). runtime_ is
  // read only once a Start() succeeded (it is never replaced after that).
  NodeId id() const { return ever_started_ ? runtime_->id() : kUnassignedId; }
  uint32_t rank() const { return ever_started_ ? runtime_->rank() : 0; }
  int CountRole(Role r) const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    return m ? m->CountRole(r) : 0;
  }
  std::vector<NodeInfo> Nodes() const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    std::vector<NodeInfo> nodes = m ? m->nodes : std::vector<NodeInfo>{};
    MutexLock lock(&gone_mu_);
    for (NodeInfo& n : nodes) {
      if (gone_.count(n.id)) n.alive = false;
    }
    return nodes;
  }

  StatusOr<TableId> DeclareTable(const TableSpec& spec) {
    if (!started_) return FailedPrecondition("DeclareTable: the worker is not started");
    return runtime_->DeclareTable(spec, std::chrono::milliseconds(options_.request_timeout_ms));
  }

  Status SetLearningRate(TableId table, float learning_rate) {
    if (!started_) return FailedPrecondition("SetLearningRate: the worker is not started");
    return runtime_->SetLearningRate(table, learning_rate,
                                     std::chrono::milliseconds(options_.request_timeout_ms));
  }

  StatusOr<std::string> Checkpoint(const std::string& dir, std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("Checkpoint: the worker is not started");
    return runtime_->Checkpoint(dir, timeout);
  }

  Status DropTable(const std::string& name) {
    if (!started_) return FailedPrecondition("DropTable: the worker is not started");
    return runtime_->DropTable(name, std::chrono::milliseconds(options_.request_timeout_ms));
  }

  StatusOr<TableSpec> GetTableSpec(TableId table) const {
    if (!started_) {
      return FailedPrecondition(ever_started_ ? "the worker has stopped"
                                              : "the worker is not started (call Start first)");
    }
    auto m = runtime_->map();
    const TableInfo* t = m ? m->FindTable(table) : nullptr;
    if (!t) return NotFound("no table with id " + std::to_string(table));
    return t->spec;
  }

  Status InstallPlacement(const std::vector<LayerServers>& placement,
                          std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("InstallPlacement: the worker is not started");
    return runtime_->InstallPlacement(placement, timeout);
  }

  std::vector<LayerServers> Placement() const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    std::vector<LayerServers> out;
    if (m) {
      for (const auto& kv : m->placement) out.push_back(LayerServers{kv.first, kv.second});
    }
    return out;
  }

  std::vector<uint32_t> TableServers(TableId table) const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    const TableInfo* t = m ? m->FindTable(table) : nullptr;
    std::vector<uint32_t> out;
    if (t) {
      for (const KeyRange& r : t->ranges) {
        const NodeInfo* n = m->FindNode(r.server);
        if (n) out.push_back(n->rank);
      }
    }
    return out;
  }

  Status Barrier(Group group, std::chrono::milliseconds timeout, int* participants) {
    if (!started_) return FailedPrecondition("Barrier: the worker is not started");
    return runtime_->Barrier(group, timeout, participants);
  }

  Status Join(std::chrono::milliseconds timeout, int* joined) {
    if (!started_) return FailedPrecondition("Join: the worker is not started");
    return runtime_->Join(timeout, joined);
  }

  WorkerStats stats() const {
    const TrackerStats& t = tracker_.stats();
    WorkerStats s;
    s.requests_sent = t.sent.load();
    s.replies_received = t.replies.load();
    s.bad_messages = t.bad.load() + (ever_started_ ? runtime_->bad_messages() : 0);
    s.bytes_sent = t.bytes_out.load();
    s.bytes_received = t.bytes_in.load();
    s.payload_copies = t.copies.load();
    s.cache_hits = t.cache_hits.load();
    s.cache_misses = t.cache_misses.load();
    s.resent = t.resent.load();
    s.replies_in_wait = ever_started_ ? runtime_->messages_in_wait() : 0;
    return s;
  }

  TrafficStats traffic() const { return ever_started_ ? runtime_->traffic() : TrafficStats{}; }

  RequestTracker& tracker() { return tracker_; }
  PsRequests& ps() { return ps_; }
  Communicator& communicator() { return communicator_; }

 private:
  // Every data message (requests, peer tensors) leaves through here: once the cluster
  // failed, nothing more is sent and the request fails with the reason.
  Status SendData(NodeId to, Message&& m) {
    if (failed_.load(std::memory_order_acquire)) return failure_;
    return runtime_->Send(to, std::move(m));
  }

  // The scheduler ended the cluster as failed: what is pending fails now, what comes
  // later fails when it is sent (SendData) or, for receives, at once (PeerOp).
  void OnClusterFailed(const Status& why) {
    if (!failed_.load()) {
      failure_ = why;  // written once, before failed_ publishes it
      failed_.store(true, std::memory_order_release);
    }
    collectives_.OnNodeDead(kSchedulerId, why);
    tracker_.FailMatching([](const Part&) { return true; }, why);
    // Nothing more goes to the cluster: drop every data connection, so that frames still
    // queued for a peer (one that died with the cluster, or a successor that never took
    // over) are discarded and the caller buffers they borrow are released. Without
    // this a push whose frames sat in the queue of a dead peer never completed.
    if (std::shared_ptr<const ClusterMap> map = runtime_ ? runtime_->map() : nullptr) {
      for (const NodeInfo& n : map->nodes) {
        if (n.id != kSchedulerId) runtime_->DropConnection(n.id);
      }
    }
  }

  static bool HoldsRanges(const ClusterMap& map, NodeId server) {
    for (const auto& kv : map.tables) {
      for (const KeyRange& r : kv.second.ranges) {
        if (r.server == server) return true;
      }
    }
    return false;
  }

  // Server replacement (docs/checkpoints.md). Receive thread.
  void OnServerReplaceable(NodeId id, NodeId successor) {
    std::shared_ptr<const ClusterMap> map = runtime_ ? runtime_->map() : nullptr;
    const NodeInfo* n = map ? map->FindNode(id) : nullptr;
    if (n == nullptr || n->role != Role::kServer) return;
    tracker_.Park(id, n->rank, successor);
  }

  // A parked server's parts go to its successor (replication) or to the new server of
  // its rank (replacement) once the map names it alive.
  void OnMap(const std::shared_ptr<const ClusterMap>& map) {
    tracker_.SetRetain(map->replace_servers_ms > 0 || map->replication);
    for (const auto& kv : tracker_.Parked()) {
      if (HoldsRanges(*map, kv.first)) continue;  // not yet handed over
      for (const NodeInfo& n : map->nodes) {
        if (n.role != Role::kServer || !n.alive || n.id == kv.first) continue;
        const bool takes_over = kv.second.successor != kUnassignedId
                                    ? n.id == kv.second.successor
                                    : n.rank == kv.second.rank;
        if (takes_over) tracker_.Retarget(kv.first, n.id, map->epoch);
      }
    }
  }

  void OnNodeDead(NodeId id, const Status& why, bool left) {
    // Every collective including it, not only its neighbours. First: a collective must
    // know the member left before its sends there fail below.
    collectives_.OnNodeDead(id, why, left);
    if (id == kSchedulerId) {
      tracker_.FailMatching([](const Part&) { return true; }, why);
      return;
    }
    {
      // A worker that leaves changes no map: Nodes() learns it from here.
      MutexLock lock(&gone_mu_);
      gone_.insert(id);
    }
    // A server awaiting its replacement: what is outstanding for it waits (OnMap).
    if (tracker_.IsParked(id)) return;
    // The runtime already refuses new sends to it; fail what is outstanding.
    tracker_.FailMatching([id](const Part& p) { return p.server == id; }, why);
  }

  // Drops the connections to peers that did not answer in time: ZeroMQ then discards
  // what is still queued for them and releases the caller buffers those frames borrow,
  // so the expired requests complete. The next request reconnects.
  void Expire() {
    collectives_.Tick();
    tracker_.Expire([this](NodeId silent) { runtime_->DropConnection(silent); });
  }

  const WorkerOptions options_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::atomic<bool> started_{false};
  std::atomic<bool> ever_started_{false};
  mutable Mutex gone_mu_;
  std::set<NodeId> gone_ GUARDED_BY(gone_mu_);  // nodes declared dead or gone
  // Tensors received before their RecvFrom are kept up to this many bytes.
  static constexpr uint64_t kPeerBufferBytes = uint64_t{1} << 30;

  std::atomic<bool> failed_{false};  // the scheduler ended the cluster as failed
  Status failure_;                   // why; written once before failed_ is set
  RequestTracker tracker_;
  PsRequests ps_;
  PeerMessages peers_;
  Collectives collectives_;
  Communicator communicator_;  // over peers_, collectives_ and tracker_
  std::shared_ptr<Timeline> timeline_;  // set in Start when options_.timeline is given
  // Last: its HTTP threads read the members above, so it stops first.
  std::unique_ptr<metrics::Exporter> metrics_;
};

Worker::Worker(WorkerOptions options) : impl_(new Impl(std::move(options))) {}
Worker::~Worker() { impl_->Stop(); }
Status Worker::Start() { return impl_->Start(); }
void Worker::Stop() { impl_->Stop(); }
NodeId Worker::id() const { return impl_->id(); }
uint32_t Worker::rank() const { return impl_->rank(); }
int Worker::num_workers() const { return impl_->CountRole(Role::kWorker); }
int Worker::num_servers() const { return impl_->CountRole(Role::kServer); }
std::vector<NodeInfo> Worker::Nodes() const { return impl_->Nodes(); }
StatusOr<TableId> Worker::DeclareTable(const TableSpec& spec) { return impl_->DeclareTable(spec); }
Status Worker::DropTable(const std::string& name) { return impl_->DropTable(name); }
StatusOr<std::string> Worker::Checkpoint(const std::string& dir,
                                         std::chrono::milliseconds timeout) {
  return impl_->Checkpoint(dir, timeout);
}
Status Worker::SetLearningRate(TableId table, float learning_rate) {
  return impl_->SetLearningRate(table, learning_rate);
}
StatusOr<TableSpec> Worker::GetTableSpec(TableId table) const { return impl_->GetTableSpec(table); }

Ticket Worker::Push(TableId table, const float* grad, size_t n, Callback cb) {
  return impl_->ps().Dense(MsgType::kPush, table, grad, nullptr, n, std::move(cb));
}
Ticket Worker::Pull(TableId table, float* out, size_t n, Callback cb) {
  return impl_->ps().Dense(MsgType::kPull, table, nullptr, out, n, std::move(cb));
}
Ticket Worker::PushPull(TableId table, const float* grad, float* out, size_t n, Callback cb) {
  return impl_->ps().Dense(MsgType::kPushPull, table, grad, out, n, std::move(cb));
}
Ticket Worker::Assign(TableId table, const float* values, size_t n, Callback cb) {
  return impl_->ps().Dense(MsgType::kAssign, table, values, nullptr, n, std::move(cb));
}
Ticket Worker::PushSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                          size_t rows_len, Callback cb) {
  return impl_->ps().Sparse(MsgType::kPush, table, keys, num_keys, rows, nullptr, rows_len,
                            std::move(cb));
}
Ticket Worker::PullSparse(TableId table, const Key* keys, size_t num_keys, float* rows,
                          size_t rows_len, Callback cb) {
  return impl_->ps().Sparse(MsgType::kPull, table, keys, num_keys, nullptr, rows, rows_len,
                            std::move(cb));
}
Ticket Worker::AssignSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                            size_t rows_len, Callback cb) {
  return impl_->ps().Sparse(MsgType::kAssign, table, keys, num_keys, rows, nullptr, rows_len,
                            std::move(cb));
}
Ticket Worker::PushMany(const std::vector<DenseRef>& tensors, Callback cb) {
  std::vector<TableId> tables;
  std::vector<const float*> ins;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    tables.push_back(t.table);
    ins.push_back(t.data);
    sizes.push_back(t.size);
  }
  return impl_->ps().Many(MsgType::kPush, tables, ins, std::vector<float*>(tensors.size()), sizes,
                          std::move(cb));
}
Ticket Worker::PullMany(const std::vector<DenseOut>& tensors, Callback cb) {
  std::vector<TableId> tables;
  std::vector<float*> outs;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    tables.push_back(t.table);
    outs.push_back(t.data);
    sizes.push_back(t.size);
  }
  return impl_->ps().Many(MsgType::kPull, tables, std::vector<const float*>(tensors.size()), outs,
                          sizes, std::move(cb));
}
Ticket Worker::PushPullMany(const std::vector<DenseRef>& grads, const std::vector<DenseOut>& outs,
                            Callback cb) {
  if (grads.size() != outs.size()) {
    return impl_->tracker().Failed(
        InvalidArgument("PushPullMany: " + std::to_string(grads.size()) + " gradients but " +
                        std::to_string(outs.size()) + " outputs"),
        std::move(cb));
  }
  std::vector<TableId> tables;
  std::vector<const float*> ins;
  std::vector<float*> out_ptrs;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < grads.size(); ++i) {
    // A pushpull reads and writes one table: both sides must name the same table and size.
    if (grads[i].table != outs[i].table || grads[i].size != outs[i].size) {
      return impl_->tracker().Failed(
          InvalidArgument("PushPullMany: tensor " + std::to_string(i) +
                          " names different tables or sizes for grad and out"),
          std::move(cb));
    }
    tables.push_back(grads[i].table);
    ins.push_back(grads[i].data);
    out_ptrs.push_back(outs[i].data);
    sizes.push_back(grads[i].size);
  }
  return impl_->ps().Many(MsgType::kPushPull, tables, ins, out_ptrs, sizes, std::move(cb));
}
Ticket Worker::PushSparseMany(const std::vector<SparseRef>& entries, Callback cb) {
  std::vector<PsRequests::SparseEntry> e;
  e.reserve(entries.size());
  for (const auto& r : entries)
    e.push_back({r.table, r.keys, r.num_keys, r.rows, nullptr, r.rows_len});
  return impl_->ps().SparseMany(MsgType::kPush, e, std::move(cb));
}
Ticket Worker::PullSparseMany(const std::vector<SparseOut>& entries, Callback cb) {
  std::vector<PsRequests::SparseEntry> e;
  e.reserve(entries.size());
  for (const auto& o : entries)
    e.push_back({o.table, o.keys, o.num_keys, nullptr, o.rows, o.rows_len});
  return impl_->ps().SparseMany(MsgType::kPull, e, std::move(cb));
}
Ticket Worker::PushSparseManyDevice(const std::vector<SparseRef>& entries, void* stream,
                                    Callback cb) {
  std::vector<PsRequests::SparseEntry> e;
  e.reserve(entries.size());
  for (const auto& r : entries)
    e.push_back({r.table, r.keys, r.num_keys, r.rows, nullptr, r.rows_len});
  return impl_->ps().SparseManyDevice(MsgType::kPush, e, stream, std::move(cb));
}
Ticket Worker::PullSparseManyDevice(const std::vector<SparseOut>& entries, void* stream,
                                    Callback cb) {
  std::vector<PsRequests::SparseEntry> e;
  e.reserve(entries.size());
  for (const auto& o : entries)
    e.push_back({o.table, o.keys, o.num_keys, nullptr, o.rows, o.rows_len});
  return impl_->ps().SparseManyDevice(MsgType::kPull, e, stream, std::move(cb));
}
Ticket Worker::PushDevice(TableId table, const float* grad, size_t n, void* stream, Callback cb) {
  return impl_->ps().PushDevice(table, grad, n, stream, std::move(cb));
}
Ticket Worker::PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb) {
  return impl_->ps().PullDevice(table, out, n, stream, std::move(cb));
}
Ticket Worker::PushSparseDevice(TableId table, const Key* keys, size_t num_keys, const float* rows,
                                size_t rows_len, void* stream, Callback cb) {
  return impl_->ps().SparseDevice(MsgType::kPush, table, keys, num_keys, rows, nullptr, rows_len,
                                  stream, std::move(cb));
}
Ticket Worker::PullSparseDevice(TableId table, const Key* keys, size_t num_keys, float* rows,
                                size_t rows_len, void* stream, Callback cb) {
  return impl_->ps().SparseDevice(MsgType::kPull, table, keys, num_keys, nullptr, rows, rows_len,
                                  stream, std::move(cb));
}
Communicator& Worker::communicator() { return impl_->communicator(); }
const Communicator& Worker::communicator() const { return impl_->communicator(); }

Status Worker::Wait(Ticket ticket, std::chrono::milliseconds timeout) {
  return impl_->tracker().Wait(ticket, timeout);
}
Status Worker::Flush(std::chrono::milliseconds timeout) {
  return impl_->tracker().Flush(timeout);
}
Status Worker::Barrier(Group group, std::chrono::milliseconds timeout) {
  return impl_->Barrier(group, timeout, nullptr);
}
Status Worker::Barrier(Group group, std::chrono::milliseconds timeout, int* participants) {
  return impl_->Barrier(group, timeout, participants);
}
Status Worker::Join(std::chrono::milliseconds timeout, int* joined) {
  return impl_->Join(timeout, joined);
}
WorkerStats Worker::stats() const { return impl_->stats(); }
TrafficStats Worker::traffic() const { return impl_->traffic(); }
Status Worker::InstallPlacement(const std::vector<LayerServers>& placement,
                                std::chrono::milliseconds timeout) {
  return impl_->InstallPlacement(placement, timeout);
}
std::vector<LayerServers> Worker::Placement() const { return impl_->Placement(); }
std::vector<uint32_t> Worker::TableServers(TableId table) const {
  return impl_->TableServers(table);
}

}  // namespace ps
