// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A server takes each data request on its receive thread, in arrival order: the checks
// every request passes (server/request.h), then the synchronization policy
// (server/sync_policy.h) of its table (async, bsp or ssp), which applies it to the store
// (server/store.h) and answers, at once or when the workers' clocks allow. The dense
// requests of async tables are applied by the apply lanes instead (server/apply_lanes.h:
// per 64 KiB span, in arrival order per span); everything else on the receive thread
// runs after the lanes drained, so it sees the store as a one-threaded server would.
// Large updates on the receive thread fan out over TBB inside the store.
#include "ps/server.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/progress.h"
#include "common/wire_type.h"
#include "metrics/metrics.h"
#include "node/node_runtime.h"
#include "server/apply_lanes.h"
#include "server/checkpoint.h"
#include "server/replication.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"
#include "server/sync_state.h"

namespace ps {

namespace {
constexpr int kReplySendTimeoutMs = 1000;

bool IsUpdate(MsgType t) {
  return t == MsgType::kPush || t == MsgType::kPushPull || t == MsgType::kAssign;
}

// ServerOptions::apply_threads: -1 is a quarter of the cores, at most 8: none below 4
// cores, where the receive thread, the ZeroMQ I/O thread and the workers of the host
// already take every core (on 2 cores one lane measured 0.76-1.11x the build before the
// lanes: bench/results/apply-lanes-2026-12-02).
size_t ApplyThreads(int asked) {
  if (asked >= 0) return static_cast<size_t>(asked);
  const unsigned cores = std::thread::hardware_concurrency();
  return std::min<size_t>(cores / 4, 8);
}
}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options) : options_(std::move(options)) {}

  Status Start() {
    if (started_) return FailedPrecondition("server already started (a Server starts once)");
    if (!options_.restore_dir.empty()) {
      // Found and checked before joining: a wrong directory fails Start, not a declare.
      StatusOr<std::unique_ptr<CheckpointSet>> set = CheckpointSet::Open(options_.restore_dir);
      if (!set.ok()) return set.status();
      restore_ = std::move(*set);
      LOG(INFO) << "restoring from checkpoint " << restore_->path() << " (set " << restore_->set()
                << ", written by " << restore_->num_servers() << " server(s))";
    }
    bsp_->SetStallWarning(options_.stall_warning_ms);
    ssp_->SetStallWarning(options_.stall_warning_ms);
    NodeRuntime::Handlers h;
    lanes_ = std::make_unique<ApplyLanes>(
        ApplyThreads(options_.apply_threads), &store_mu_,
        [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
          if (!st.ok()) ++bad_;
          Reply(rh, st, std::move(frames));
        },
        [this](double seconds) { handle_latency_.Observe(seconds); });
    // Every handler but a data request's waits for the apply lanes first (see the top).
    h.on_map = [this](const std::shared_ptr<const ClusterMap>& map) {
      lanes_->Drain();
      return InstallMap(*map);
    };
    h.on_node_dead = [this](NodeId id, const Status& why, bool) {
      if (id != kSchedulerId) lanes_->Drain();  // (the scheduler: heartbeat thread, no-op)
      OnNodeDead(id, why);
    };
    // A joined worker's clock no longer counts (it may still pull): as if it were gone.
    h.on_worker_joined = [this](NodeId id) {
      lanes_->Drain();
      OnNodeDead(id, FailedPrecondition("the worker joined (ran out of data)"));
    };
    h.on_tick = [this] { Tick(); };
    h.on_checkpoint = [this](uint64_t set, const std::string& dir) {
      lanes_->Drain();
      return WriteCheckpointFile(set, dir);
    };
    runtime_ = std::make_unique<NodeRuntime>(options_, Role::kServer, std::move(h),
                                             /*restores=*/!options_.restore_dir.empty());
    for (MsgType t : {MsgType::kPush, MsgType::kPull, MsgType::kPushPull, MsgType::kAssign}) {
      runtime_->Handle(t, [this](Message&& m) { HandleData(std::move(m)); });
    }
    replication_ = std::make_unique<Replication>(
        runtime_.get(), &store_mu_, apply_.get(), restore_.get(), options_.max_message_bytes,
        [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
          Reply(rh, st, std::move(frames));
        });
    runtime_->Handle(MsgType::kReplicate, [this](Message&& m) {
      lanes_->Drain();
      replication_->HandleReplicate(std::move(m));
    });
    runtime_->Handle(MsgType::kReplicateAck, [this](Message&& m) {
      lanes_->Drain();
      replication_->HandleReplicateAck(std::move(m));
    });
    runtime_->Handle(MsgType::kReplicaCopy, [this](Message&& m) {
      lanes_->Drain();
      replication_->HandleReplicaCopy(std::move(m));
    });
    // The metrics endpoint answers from before the cluster is complete (a scrape then says
    // layerps_server_joined 0 with zero counters): a server waiting for its peers is
    // visible, and a port that cannot be bound fails here, before joining.
    StatusOr<std::unique_ptr<metrics::Exporter>> exporter = metrics::MaybeStart(
        options_.metrics_host, options_.metrics_port, "server",
        [this](std::vector<metrics::Sample>* out) { CollectMetrics(out); });
    if (!exporter.ok()) {
      runtime_.reset();
      return exporter.status();
    }
    metrics_ = std::move(*exporter);
    Status s = runtime_->Start();
    if (!s.ok()) {
      metrics_.reset();  // joins the HTTP threads, which read runtime_ only once started_
      runtime_.reset();  // (no data request came: the lanes hold nothing)
      return s;
    }
    started_ = true;  // from here on runtime_ is never replaced
    return s;
  }

  Status Join(std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("server not started");
    return runtime_->WaitShutdown(timeout);
  }

  void Stop() {
    metrics_.reset();
    if (started_) {
      runtime_->Stop(/*send_leave=*/true);  // joins the receive thread: nothing is posted
      lanes_->Drain();
    }
  }

  NodeId id() const { return started_ ? runtime_->id() : kUnassignedId; }
  uint32_t rank() const { return started_ ? runtime_->rank() : 0; }
  std::string endpoint() const { return started_ ? runtime_->endpoint() : ""; }

  TrafficStats traffic() const { return started_ ? runtime_->traffic() : TrafficStats{}; }

  ServerStats stats() const {
    ServerStats s;
    s.messages_received = messages_.load();
    s.bad_messages = bad_.load() + (started_ ? runtime_->bad_messages() : 0);
    s.push_requests = pushes_.load();
    s.pull_requests = pulls_.load();
    s.bytes_received = bytes_in_.load();
    s.bytes_sent = bytes_out_.load();
    s.stall_warnings = bsp_->stall_warnings() + ssp_->stall_warnings();
    if (started_) {  // replication_ is set before
      s.bad_messages += replication_->bad_messages();
      s.backed_up = replication_->backed_up();
      s.copies_sent = replication_->copies_sent();
      s.copies_received = replication_->copies_received();
      s.copy_bytes_sent = replication_->copy_bytes_sent();
    }
    s.checkpoint_bytes_written = checkpoint_bytes_.load();
    if (started_) {  // lanes_ is set before
      s.lane_requests = lanes_->requests();
      s.lane_tasks = lanes_->tasks();
    }
    ReaderLock lock(&store_mu_);
    s.sparse_rows = store_ ? store_->sparse_rows() : 0;
    return s;
  }

  std::map<TableId, SparseTableStats> table_stats() const {
    std::map<TableId, SparseTableStats> out;
    ReaderLock lock(&store_mu_);
    if (!store_) return out;
    for (const auto& kv : store_->SparseStats()) {
      SparseTableStats& t = out[kv.first];
      const TableSpec* spec = store_->Spec(kv.first);
      t.name = spec ? spec->name : std::string();
      t.rows_live = kv.second.rows_live;
      t.evicted = kv.second.evicted;
      t.expired = kv.second.expired;
      t.admitted = kv.second.admitted;
      t.refused = kv.second.refused;
      t.spilled = kv.second.spilled;
      t.reloaded = kv.second.reloaded;
      t.capacity = kv.second.capacity;
    }
    return out;
  }

 private:
  // One scrape of the metrics endpoint (its HTTP thread).
  void CollectMetrics(std::vector<metrics::Sample>* out) const {
    using metrics::Counter;
    using metrics::Gauge;
    const ServerStats s = stats();
    out->push_back(Counter("layerps_server_messages_received_total",
                           "Data messages received", s.messages_received));
    out->push_back(Counter("layerps_server_bad_messages_total",
                           "Messages dropped: malformed, unknown table, range not held...",
                           s.bad_messages));
    out->push_back(Counter("layerps_server_requests_total", "Requests by kind", s.push_requests,
                           {{"kind", "push"}}));
    out->push_back(Counter("layerps_server_requests_total", "Requests by kind", s.pull_requests,
                           {{"kind", "pull"}}));
    out->push_back(Counter("layerps_server_lane_requests_total",
                           "Dense requests applied by the apply lanes (apply_threads)",
                           s.lane_requests));
    out->push_back(Counter("layerps_server_payload_bytes_total",
                           "Payload bytes of accepted requests and of replies", s.bytes_received,
                           {{"direction", "received"}}));
    out->push_back(Counter("layerps_server_payload_bytes_total",
                           "Payload bytes of accepted requests and of replies", s.bytes_sent,
                           {{"direction", "sent"}}));
    out->push_back(Gauge("layerps_server_sparse_rows", "Rows held in sparse tables", s.sparse_rows));
    out->push_back(Counter("layerps_server_stall_warnings_total",
                           "bsp/ssp pulls held longer than stall_warning_ms", s.stall_warnings));
    out->push_back(Gauge("layerps_server_backed_up",
                         "1 when this server's ranges have a complete copy on a backup",
                         s.backed_up ? 1 : 0));
    out->push_back(Counter("layerps_server_replica_copies_total",
                           "Complete copies of a store to a new backup (replication)", s.copies_sent,
                           {{"direction", "sent"}}));
    out->push_back(Counter("layerps_server_replica_copies_total",
                           "Complete copies of a store to a new backup (replication)",
                           s.copies_received, {{"direction", "received"}}));
    handle_latency_.Export("layerps_server_request_seconds",
                           "Time from a request's arrival to its answer, or to its hold for "
                           "a bsp/ssp step",
                           {}, out);
    for (const auto& kv : table_stats()) {
      const std::vector<std::pair<std::string, std::string>> l = {{"table", kv.second.name}};
      const SparseTableStats& t = kv.second;
      out->push_back(Gauge("layerps_server_table_rows", "Rows live in a sparse table", t.rows_live, l));
      out->push_back(Counter("layerps_server_table_rows_evicted_total", "Rows evicted (capacity)", t.evicted, l));
      out->push_back(Counter("layerps_server_table_rows_expired_total", "Rows expired", t.expired, l));
      out->push_back(Counter("layerps_server_table_rows_admitted_total", "Rows created", t.admitted, l));
      out->push_back(Counter("layerps_server_table_rows_refused_total",
                             "Pushed rows dropped: id not admitted", t.refused, l));
    }
    // A checkpoint being written and a store being copied to a backup, while they run
    // (and the last one's figures after).
    const auto transfer = [&](const char* kind, const TransferProgress& p) {
      const std::vector<std::pair<std::string, std::string>> l = {{"transfer", kind}};
      out->push_back(Gauge("layerps_server_transfer_active",
                           "1 while this server writes a checkpoint or copies its store to a backup",
                           p.active() ? 1 : 0, l));
      out->push_back(Gauge("layerps_server_transfer_bytes",
                           "Bytes the running (or last) transfer has moved", p.done(), l));
      out->push_back(Gauge("layerps_server_transfer_expected_bytes",
                           "Bytes the running transfer is expected to move (the last one's "
                           "once done)",
                           p.total(), l));
      out->push_back(Gauge("layerps_server_transfer_bytes_per_second",
                           "Rate of the running (or last) transfer", p.rate(), l));
    };
    transfer("checkpoint", checkpoint_progress_);
    if (replication_) transfer("replica_copy", replication_->copy_progress());  // made before metrics_
    out->push_back(Gauge("layerps_server_joined",
                         "1 once the cluster is complete and this server serves; 0 while it waits",
                         started_ ? 1 : 0));
    if (started_) {
      metrics::AppendTraffic(runtime_->traffic(), out, [this](TableId id) {
        auto m = runtime_->map();
        const TableInfo* t = m ? m->FindTable(id) : nullptr;
        return t ? t->spec.name : std::string();
      });
      out->push_back(Gauge("layerps_map_epoch", "Cluster-map epoch this node has",
                           static_cast<double>(runtime_->map() ? runtime_->map()->epoch : 0)));
    }
  }

  std::vector<std::pair<TableId, Status>> InstallMap(const ClusterMap& map) {
    WriterLock lock(&store_mu_);
    if (!store_) store_ = std::make_unique<Store>(runtime_->id(), options_.cold_dir);
    std::vector<std::pair<TableId, Status>> failed;
    store_->DropAllBut(map.tables);
    for (const auto& kv : map.tables) {
      const bool fresh = !store_->Has(kv.first);
      Status s = store_->Install(kv.second);
      if (s.ok()) s = store_->UpdateLearningRate(kv.second);
      if (s.ok() && fresh && restore_) {
        bool restored = false;
        s = restore_->Restore(kv.first, kv.second.spec, store_.get(), &restored);
        if (s.ok() && restored) {
          LOG(INFO) << "table " << kv.second.spec.name << " restored from " << restore_->path();
        }
        if (!s.ok()) store_->Drop(kv.first);  // not left half restored
      }
      if (!s.ok()) {
        LOG(ERROR) << "cannot install table " << kv.second.spec.name << ": " << s;
        failed.emplace_back(kv.first, s);
      }
    }
    replication_->OnMap(map, store_.get(), &failed);
    epoch_ = map.epoch;
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) p->OnMap(map, runtime_->id());
    std::set<NodeId> live;
    for (const NodeInfo& n : map.nodes) {
      if (n.role == Role::kWorker && n.alive && !gone_.count(n.id)) live.insert(n.id);
    }
    SetWorkers(live, Status::OK());
    return failed;
  }

  // The scheduler's WriteCheckpoint (receive thread: no request is handled meanwhile).
  StatusOr<std::string> WriteCheckpointFile(uint64_t set, const std::string& dir) {
    WriterLock lock(&store_mu_);
    if (!store_) return Unavailable("this server has not received the cluster map yet");
    CheckpointMeta meta;
    meta.set = set;
    meta.epoch = epoch_;
    meta.rank = runtime_->rank();
    std::shared_ptr<const ClusterMap> map = runtime_->map();
    meta.num_servers = map ? static_cast<uint32_t>(map->CountRole(Role::kServer)) : 0;
    const auto start = std::chrono::steady_clock::now();
    StatusOr<std::string> path =
        WriteCheckpoint(dir, meta, options_.checkpoint_keep, store_.get(), &checkpoint_progress_);
    checkpoint_bytes_ += checkpoint_progress_.done();
    if (path.ok()) {
      LOG(INFO) << "checkpoint written to " << *path << " in "
                << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count()
                << " ms";
    } else {
      LOG(ERROR) << "checkpoint " << set << " failed: " << path.status();
    }
    return path;
  }

  // The clocks of bsp/ssp tables count the live workers only: a worker gone (left or
  // dead; `why` when known) stops counting, with one log line. Receive thread; the store
  // lock held (any mode).
  void SetWorkers(const std::set<NodeId>& live, const Status& why) REQUIRES_SHARED(store_mu_) {
    if (live == live_) return;
    std::string gone;
    for (NodeId w : live_) {
      if (!live.count(w)) gone += (gone.empty() ? "" : ", ") + std::to_string(w);
    }
    live_ = live;
    const auto reply = [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
      Reply(rh, st, std::move(frames));
    };
    std::string held_up;
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) {
      const std::string part = p->SetWorkers(live, *store_, reply);
      if (!part.empty()) held_up += (held_up.empty() ? "" : "; ") + part;
    }
    if (gone.empty()) return;
    if (!held_up.empty()) {
      LOG(WARNING) << "worker node " << gone << " is gone"
                   << (why.ok() ? std::string() : " (" + why.message() + ")")
                   << ": its clock no longer counts on this server's bsp/ssp tables ("
                   << live.size() << " live worker(s) left); it held up " << held_up;
    } else {
      VLOG(1) << "worker node " << gone << " is gone; " << live.size() << " live worker(s) left";
    }
  }

  // A worker that left or died (receive thread; the scheduler lost: heartbeat thread,
  // and the server shuts down anyway).
  void OnNodeDead(NodeId id, const Status& why) {
    if (id == kSchedulerId) return;
    ReaderLock lock(&store_mu_);
    gone_.insert(id);
    if (!store_ || !live_.count(id)) return;
    std::set<NodeId> live = live_;
    live.erase(id);
    SetWorkers(live, why);
  }

  // Held requests past their deadline are answered (receive thread).
  void Tick() {
    ReaderLock lock(&store_mu_);
    if (!store_ || bsp_->held() + ssp_->held() == 0) return;
    lanes_->Drain();
    const auto reply = [this](const Header& rh, const Status& st, std::vector<Frame> frames) {
      Reply(rh, st, std::move(frames));
    };
    const int64_t now = sync::NowMs();
    for (SyncPolicy* p : {bsp_.get(), ssp_.get()}) p->Tick(now, *store_, reply);
  }

  // The policy of a request's table. Fused requests never carry a bsp/ssp table (workers
  // send those alone, with their clock): one that does is refused.
  SyncPolicy* PolicyFor(const DataRequest& req, Status* error) REQUIRES_SHARED(store_mu_) {
    if (req.header.fused()) {
      std::vector<TableId> tables;
      for (const FusedSegment& seg : req.segments) tables.push_back(seg.table);
      for (const FusedSparseSegment& seg : req.sparse_segments) tables.push_back(seg.table);
      for (TableId table : tables) {
        const TableSpec* spec = store_->Spec(table);
        if (spec != nullptr && spec->sync != SyncMode::kAsync) {
          *error = InvalidArgument("table '" + spec->name + "' is synchronized (" +
                                   SyncModeName(spec->sync) +
                                   "): its requests travel alone, not fused");
          return nullptr;
        }
      }
      return apply_.get();
    }
    const TableSpec* spec = store_->Spec(req.header.table);
    if (spec != nullptr && spec->sync == SyncMode::kBsp) return bsp_.get();
    if (spec != nullptr && spec->sync == SyncMode::kSsp) return ssp_.get();
    return apply_.get();
  }

  void Reply(const Header& req, const Status& status, std::vector<Frame> frames) {
    Message r;
    r.header = req;
    r.header.type = static_cast<uint16_t>(MsgType::kReply);
    r.header.status = static_cast<int32_t>(status.code());
    if (!status.ok()) {
      frames.clear();
      const std::string& text = status.message();
      frames.push_back(Frame::Copy(text.data(), std::min<size_t>(text.size(), 4096)));
    } else if (req.wire() != 0 && !frames.empty()) {
      // The table's values travel narrowed (TableSpec::wire_dtype): the pulled float32
      // values are narrowed for the reply, which echoes the request's wire type.
      const size_t n = frames[0].size() / sizeof(float);
      std::shared_ptr<uint16_t[]> narrow(new uint16_t[n == 0 ? 1 : n]);
      pack::ToWire(reinterpret_cast<const float*>(frames[0].data()), n,
                   static_cast<pack::WireType>(req.wire()), narrow.get());
      frames[0] = Frame::Borrow(narrow.get(), n * sizeof(uint16_t),
                                std::shared_ptr<const void>(narrow, narrow.get()));
    }
    for (const auto& f : frames) bytes_out_ += f.size();
    r.frames = std::move(frames);
    // Replies are matched by request and part, in any order: the parts of one request
    // spread over the worker's streams (Options::streams).
    r.lane = req.fused() ? 0 : DataLane(req.table, 0) + req.part;
    // A worker that cannot take its reply within a second is not worth stalling every
    // other request for: the reply is dropped and that worker's request times out.
    Status s = runtime_->Send(req.sender, std::move(r), kReplySendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "reply to node " << req.sender << " failed: " << s;
    }
  }

  // Out of memory while serving one request fails that request, not the server.
  void HandleData(Message&& msg) {
    try {
      HandleDataUnguarded(std::move(msg));
    } catch (const std::bad_alloc&) {
      ++bad_;
      LOG_EVERY_N(ERROR, 100) << "out of memory serving a request of node " << msg.header.sender;
      Reply(msg.header, ResourceExhausted("the server ran out of memory for this request"), {});
    }
  }

  void HandleDataUnguarded(Message&& msg) {
    ++messages_;
    ReaderLock lock(&store_mu_);
    if (IsUpdate(msg.header.msg_type()) && replication_->Remembered(msg.header)) {
      // A part this server applied as the backup of the server whose ranges it took
      // over, sent again by a worker that never got the answer: not applied twice. A
      // pushpull is answered as the pull it also is.
      ++resent_duplicates_;
      if (msg.header.msg_type() != MsgType::kPushPull) {
        Reply(msg.header, Status::OK(), {});
        return;
      }
      msg.header.type = static_cast<uint16_t>(MsgType::kPull);
      if (!msg.frames.empty()) msg.frames.pop_back();  // the pushed values
    }
    const Header h = msg.header;
    // Replication: an update is answered once the backup applied it too.
    const NodeId backup = replication_->backup();
    Message forward;
    const bool forwards = backup != kUnassignedId && IsUpdate(h.msg_type());
    if (forwards) {
      forward.header = h;
      forward.frames = msg.frames;  // shared, not copied
    }
    DataRequest req;
    Status valid = !store_
                       ? Unavailable("this server has not received the cluster map yet")
                       : CheckRequest(std::move(msg), *store_, epoch_,
                                      static_cast<uint64_t>(options_.max_message_bytes) / 4, &req);
    if (!valid.ok()) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "refused a request from node " << h.sender << ": " << valid;
      Reply(h, valid, {});
      return;
    }
    if (req.pushes) ++pushes_;
    if (req.pulls) ++pulls_;
    for (const auto& f : req.frames) bytes_in_ += f.size();
    SyncPolicy* policy = PolicyFor(req, &valid);
    if (policy == nullptr) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "refused a request from node " << h.sender << ": " << valid;
      Reply(h, valid, {});
      return;
    }
    const auto handle_start = std::chrono::steady_clock::now();
    if (policy == apply_.get() && lanes_->Takes(req, *store_, forwards)) {
      lanes_->Post(std::move(req), store_.get(), handle_start);  // observed when answered
      return;
    }
    lanes_->Drain();
    const bool replicated = forwards && policy == apply_.get();
    // Observed once, before the first answer leaves (whoever got it finds it counted; a
    // bsp push may answer the held pulls of its step too), or after Handle for a request
    // the policy holds (the time to hold it).
    bool observed = false;
    const auto observe = [this, handle_start, &observed] {
      if (observed) return;
      observed = true;
      handle_latency_.Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - handle_start).count());
    };
    // Called within Handle only (it captures locals); held requests are answered later
    // through the policies' own reply (Reply).
    policy->Handle(std::move(req), *store_,
                   [this, replicated, backup, &forward, &observe](
                       const Header& rh, const Status& s, std::vector<Frame> frames) {
                     if (!s.ok()) ++bad_;
                     observe();
                     if (replicated && s.ok()) {
                       replication_->Forward(backup, std::move(forward), rh, std::move(frames));
                     } else {
                       Reply(rh, s, std::move(frames));
                     }
                   });
    if (!observed) observe();
  }

  const ServerOptions options_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::atomic<bool> started_{false};  // runtime_ is read by other threads only once set
  mutable SharedMutex store_mu_;
  std::unique_ptr<Store> store_ GUARDED_BY(store_mu_);  // installs exclusive, requests shared
  std::unique_ptr<CheckpointSet> restore_;  // --restore: read by installs (store_mu_ exclusive)
  // The sync policies (receive thread only), one per TableSpec::sync.
  const std::unique_ptr<SyncPolicy> apply_ = NewApplyOnArrival();
  const std::unique_ptr<SyncPolicy> bsp_ = NewBspPolicy(options_.request_timeout_ms);
  const std::unique_ptr<SyncPolicy> ssp_ = NewSspPolicy(options_.request_timeout_ms);
  std::set<NodeId> live_;  // receive thread: the workers whose clocks count
  std::set<NodeId> gone_;  // receive thread: workers that left or died (never live again)
  uint64_t epoch_ GUARDED_BY(store_mu_) = 0;
  // Replication (docs/replication.md): made by Start, once runtime_ exists.
  std::unique_ptr<Replication> replication_;
  TransferProgress checkpoint_progress_;  // the checkpoint being written (receive thread)
  std::atomic<uint64_t> checkpoint_bytes_{0};
  std::atomic<uint64_t> resent_duplicates_{0};
  std::atomic<uint64_t> messages_{0}, bad_{0}, pushes_{0}, pulls_{0}, bytes_in_{0}, bytes_out_{0};
  metrics::Latency handle_latency_;
  // The apply lanes (made by Start; their tasks reply through runtime_ and write store_,
  // so they are destroyed before both).
  std::unique_ptr<ApplyLanes> lanes_;
  // Last: its HTTP threads read the members above, so it stops first.
  std::unique_ptr<metrics::Exporter> metrics_;
};

Server::Server(ServerOptions options) : impl_(new Impl(std::move(options))) {}
Server::~Server() { impl_->Stop(); }
Status Server::Start() { return impl_->Start(); }
Status Server::Join(std::chrono::milliseconds timeout) { return impl_->Join(timeout); }
void Server::Stop() { impl_->Stop(); }
NodeId Server::id() const { return impl_->id(); }
uint32_t Server::rank() const { return impl_->rank(); }
std::string Server::endpoint() const { return impl_->endpoint(); }
ServerStats Server::stats() const { return impl_->stats(); }
std::map<TableId, SparseTableStats> Server::table_stats() const { return impl_->table_stats(); }
TrafficStats Server::traffic() const { return impl_->traffic(); }

}  // namespace ps
