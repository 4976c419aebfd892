// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The scheduler: start, the loop and dispatch, heartbeats, shutdown here; membership
// (registration, rejoin, leave, dead nodes) in scheduler/membership.cc (the two share
// Scheduler::Impl, scheduler/scheduler_impl.h); the table directory (declares, range assignment) in scheduler/table_directory.*,
// synchronization (barriers) in scheduler/barriers.*, server deaths the job survives
// (replication's takeover, replacement) in scheduler/failover.*, and the takeover of a
// running cluster by a restarted scheduler in scheduler/recovery.*. One thread receives
// every control message, dispatches it to its part and runs the periodic work. State is
// touched by that thread only, except the snapshot fields under mu_ that the public
// accessors read.
#include "ps/scheduler.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>

#include "common/hash.h"
#include "common/logging.h"
#include "common/status_wire.h"
#include "node/node_runtime.h"
#include "scheduler/scheduler_impl.h"
#include "transport/map_codec.h"

namespace ps {

Status Scheduler::Impl::Start() {
  if (thread_.joinable()) return FailedPrecondition("scheduler already started");
  PS_RETURN_IF_ERROR(options_.Validate());
  RouteProtobufLogs();
  // Its socket takes control messages only (TransportOptionsOf).
  transport_ = NewTransport(TransportOptionsOf(options_));
  StatusOr<std::string> bound =
      transport_->Bind(options_.scheduler_address, options_.advertise_host);
  if (!bound.ok()) return bound.status();
  {
    MutexLock lock(&mu_);
    address_ = *bound;
  }
  map_.epoch = 0;
  map_.replace_servers_ms = static_cast<uint32_t>(options_.replace_servers_ms);
  map_.replication = options_.replication;
  map_.job = RandomHex(8);
  map_.nodes.push_back(NodeInfo{kSchedulerId, Role::kScheduler, 0, *bound, "", true});
  {
    MutexLock lock(&mu_);
    missing_ = Incomplete();
  }
  StatusOr<std::unique_ptr<metrics::Exporter>> exporter =
      metrics::MaybeStart(options_.metrics_host, options_.metrics_port, "scheduler",
                          [this](std::vector<metrics::Sample>* out) { CollectMetrics(out); });
  if (!exporter.ok()) {
    transport_->Close();
    return exporter.status();
  }
  metrics_ = std::move(*exporter);
  thread_ = std::thread([this] { Loop(); });
  LOG(INFO) << "scheduler listening at " << *bound << " for " << options_.num_servers
            << " server(s) and " << options_.num_workers << " worker(s)";
  return Status::OK();
}

Status Scheduler::Impl::InstallPlacement(const std::vector<LayerServers>& placement) {
  if (thread_.joinable()) {
    return FailedPrecondition(
        "Scheduler::InstallPlacement: call it before Start (at run time a worker installs "
        "one with Worker::InstallPlacement)");
  }
  PS_RETURN_IF_ERROR(ClusterMap::CheckPlacement(placement, options_.num_servers));
  map_.placement.clear();
  for (const auto& l : placement) map_.placement[l.layer] = l.servers;
  return Status::OK();
}

Status Scheduler::Impl::Join(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  if (!cv_.WaitFor(&mu_, timeout, [this]() REQUIRES(mu_) { return finished_; })) {
    return Timeout("the cluster is still running");
  }
  return result_;
}

void Scheduler::Impl::Stop() {
  metrics_.reset();
  if (!thread_.joinable()) return;
  stop_requested_ = true;
  thread_.join();
  transport_->Close();
  MutexLock lock(&mu_);
  if (!finished_) {
    finished_ = true;
    result_ = Aborted("scheduler stopped");
  }
  cv_.SignalAll();
}

void Scheduler::Impl::CollectMetrics(std::vector<metrics::Sample>* out) const {
  using metrics::Counter;
  using metrics::Gauge;
  const SchedulerStats s = stats();
  out->push_back(Counter("layerps_scheduler_messages_received_total", "Control messages received",
                         s.messages_received));
  out->push_back(Counter("layerps_scheduler_bad_messages_total",
                         "Messages dropped: malformed, wrong version, or from unknown peers",
                         s.bad_messages));
  out->push_back(Counter("layerps_scheduler_rejected_registrations_total",
                         "Registrations refused (wrong token, rank taken, cluster full)",
                         s.rejected_registrations));
  out->push_back(Counter("layerps_scheduler_rejected_rejoins_total",
                         "Rejoins refused (not started for recovery, or another job's node)",
                         s.rejected_rejoins));
  out->push_back(Counter("layerps_scheduler_dead_nodes_total",
                         "Nodes declared dead after missing heartbeats for heartbeat_timeout_ms",
                         s.dead_nodes));
  out->push_back(Counter("layerps_scheduler_stall_warnings_total",
                         "Barriers or joins waiting past stall_warning_ms", s.stall_warnings));
  out->push_back(Gauge("layerps_map_epoch", "Cluster-map epoch this node has", s.map_epoch));
  out->push_back(Counter("layerps_scheduler_recoveries_total",
                         "Running clusters taken over from a scheduler that died", s.recoveries));
  const bool complete = MissingNodes().empty();
  out->push_back(Gauge("layerps_scheduler_cluster_complete",
                       "1 once every server and worker registered", complete ? 1 : 0));
  int servers = 0, workers = 0;
  for (const NodeInfo& n : Nodes()) {
    if (!n.alive) continue;
    servers += n.role == Role::kServer;
    workers += n.role == Role::kWorker;
  }
  out->push_back(
      Gauge("layerps_scheduler_nodes_alive", "Live nodes by role", servers, {{"role", "server"}}));
  out->push_back(
      Gauge("layerps_scheduler_nodes_alive", "Live nodes by role", workers, {{"role", "worker"}}));
}

void Scheduler::Impl::Loop() {
  Ticker ticker(clock_.get());
  // A manual clock (tests) moves only when advanced: look at it often.
  const int poll_ms = clock_->manual() ? 1 : kPollMs;
  int64_t last_beat = NowMs();
  while (!stop_requested_ && !done_) {
    Message msg;
    Status s = transport_->Recv(&msg, poll_ms);
    if (s.ok()) {
      Count([](SchedulerStats& st) { ++st.messages_received; });
      Handle(std::move(msg));
    } else if (s.code() == StatusCode::kProtocolError) {
      BadMessage("malformed message: " + s.message());
    }
    if (NowMs() - last_beat >= options_.heartbeat_interval_ms) {
      // What already arrived is read before anyone is judged silent: a scheduler thread
      // that was itself starved (a loaded machine) would otherwise find every node's
      // heartbeat waiting in its queue and declare them all dead.
      for (int i = 0; i < kMaxDrainedBeforeTick && !done_ && !stop_requested_; ++i) {
        Message queued;
        Status q = transport_->Recv(&queued, 0);
        if (q.ok()) {
          Count([](SchedulerStats& st) { ++st.messages_received; });
          Handle(std::move(queued));
        } else if (q.code() == StatusCode::kProtocolError) {
          BadMessage("malformed message: " + q.message());
        } else {
          break;
        }
      }
      if (done_) break;
      last_beat = NowMs();
      Periodic(last_beat);
    }
    ticker.Done(last_beat + options_.heartbeat_interval_ms - 1);
  }
  if (stop_requested_ && !done_) {
    BroadcastShutdown("the scheduler was stopped", true);
    Finish(Aborted("scheduler stopped"));
  }
}

void Scheduler::Impl::Handle(Message&& msg) {
  if (msg.header.msg_type() != MsgType::kControl) {
    BadMessage("data message sent to the scheduler");
    return;
  }
  layerps::pb::Control c;
  Status parsed = ParseControl(msg, &c);
  if (!parsed.ok()) {
    BadMessage(parsed.message());
    return;
  }
  if (c.body_case() == layerps::pb::Control::kRegister) {
    HandleRegister(c.register_(), msg.identity);
    return;
  }
  if (c.body_case() == layerps::pb::Control::kRejoin) {
    HandleRejoin(c.rejoin(), msg.identity);
    return;
  }
  // Who sent it is decided by the connection it came on (the routing id the node
  // registered from), never by the header, which the sender writes.
  auto who = identities_.find(msg.identity);
  if (who == identities_.end()) {
    BadMessage("control message from an unregistered connection");
    return;
  }
  const NodeId from = who->second;
  auto it = members_.find(from);
  if (it == members_.end()) {
    BadMessage("control message from unknown node " + std::to_string(from));
    return;
  }
  it->second.last_seen_ms = NowMs();
  const NodeInfo* node = FindNode(from);
  if (node == nullptr || !node->alive) return;  // late message from a node declared dead
  switch (c.body_case()) {
    case layerps::pb::Control::kHeartbeat:
      break;
    case layerps::pb::Control::kMapAck:
      if (!failover_.OnMapAck(from, c.map_ack())) tables_.OnMapAck(from, c.map_ack());
      break;
    case layerps::pb::Control::kDeclareTable:
      tables_.HandleDeclare(from, c.declare_table());
      break;
    case layerps::pb::Control::kBarrier:
      barriers_.HandleBarrier(from, c.barrier(), NowMs());
      break;
    case layerps::pb::Control::kJoin:
      barriers_.HandleJoin(from, c.join(), NowMs());
      break;
    case layerps::pb::Control::kMembershipQuery:
      // OK once complete, else the nodes still missing.
      ReplyCall(from, c.membership_query().request_id(), /*membership_query=*/true);
      break;
    case layerps::pb::Control::kInstallPlacement:
      if (ReplyCall(from, c.install_placement().request_id())) break;
      tables_.HandleInstallPlacement(from, c.install_placement());
      break;
    case layerps::pb::Control::kDropTable:
      if (ReplyCall(from, c.drop_table().request_id())) break;
      tables_.HandleDrop(from, c.drop_table());
      break;
    case layerps::pb::Control::kSetLearningRate:
      if (ReplyCall(from, c.set_learning_rate().request_id())) break;
      tables_.HandleSetLearningRate(from, c.set_learning_rate());
      break;
    case layerps::pb::Control::kCheckpoint:
      if (ReplyCall(from, c.checkpoint().request_id())) break;
      checkpoints_.HandleRequest(from, c.checkpoint(), NowMs());
      break;
    case layerps::pb::Control::kCheckpointDone:
      checkpoints_.HandleDone(from, c.checkpoint_done(), NowMs());
      break;
    case layerps::pb::Control::kLeave:
      HandleLeave(from);
      break;
    default:
      BadMessage("unexpected control message from node " + std::to_string(from));
  }
}

void Scheduler::Impl::BroadcastMap() {
  ++map_.epoch;
  layerps::pb::Control c;
  MapToProto(map_, c.mutable_map_update()->mutable_map());
  for (const auto& n : map_.nodes) {
    if (n.id != kSchedulerId && n.alive) SendControl(n.id, c);
  }
  MutexLock lock(&mu_);
  nodes_snapshot_ = map_.nodes;
  stats_.map_epoch = map_.epoch;
}

void Scheduler::Impl::MaybeFinish() {
  if (!complete_) return;
  for (const auto& n : map_.nodes) {
    if (n.role == Role::kWorker && n.alive) return;
  }
  // Tolerated worker losses fail the job only when no worker finished.
  if (first_failure_.ok() && dead_workers_ > 0 && dead_workers_ == map_.CountRole(Role::kWorker)) {
    first_failure_ = Unavailable("every worker died");
  }
  const bool failed = !first_failure_.ok();
  BroadcastShutdown(failed ? first_failure_.message() : "every worker finished", failed);
  Finish(first_failure_);
}

void Scheduler::Impl::BroadcastShutdown(const std::string& reason, bool failed, StatusCode code) {
  layerps::pb::Control c;
  c.mutable_shutdown()->set_reason(reason);
  c.mutable_shutdown()->set_failed(failed);
  if (failed && code != StatusCode::kAborted)
    c.mutable_shutdown()->set_code(static_cast<int>(code));
  for (const auto& n : map_.nodes) {
    if (n.id != kSchedulerId && n.alive) SendControl(n.id, c);
  }
}

void Scheduler::Impl::Finish(const Status& result) {
  done_ = true;
  LOG(INFO) << "scheduler finished: " << result;
  MutexLock lock(&mu_);
  finished_ = true;
  result_ = result;
  cv_.SignalAll();
}

void Scheduler::Impl::Periodic(int64_t now) {
  // Close refusal connections after their answer had time to leave.
  while (!refused_.empty() &&
         (now - refused_.front().second > 2000 || refused_.size() > kMaxRefusedConnections)) {
    transport_->Disconnect(refused_.front().first);
    refused_.pop_front();
  }
  if (recovery_.active()) MaybeFinishRecovery(now);
  if (!complete_) return;
  layerps::pb::Control beat;
  beat.mutable_heartbeat();
  std::vector<NodeId> dead;
  for (const auto& n : map_.nodes) {
    if (n.id == kSchedulerId || !n.alive) continue;
    SendControl(n.id, beat);
    if (now - members_[n.id].last_seen_ms > options_.heartbeat_timeout_ms) dead.push_back(n.id);
  }
  for (NodeId id : dead) {
    MarkDead(id, "no heartbeat for " + std::to_string(now - members_[id].last_seen_ms) + " ms");
  }
  if (done_) return;
  if (Status late = failover_.CheckDeadlines(now); !late.ok()) {
    FailJob(late);
    return;
  }
  checkpoints_.Tick(now);
  const int warnings = barriers_.Tick(now, options_.stall_warning_ms);
  if (warnings > 0) Count([warnings](SchedulerStats& st) { st.stall_warnings += warnings; });
}

Scheduler::Scheduler(SchedulerOptions options) {
  EnsureLogging();
  impl_.reset(new Impl(std::move(options)));
}
Scheduler::~Scheduler() = default;
Status Scheduler::Start() { return impl_->Start(); }
Status Scheduler::InstallPlacement(const std::vector<LayerServers>& placement) {
  return impl_->InstallPlacement(placement);
}
std::string Scheduler::address() const { return impl_->address(); }
Status Scheduler::Join(std::chrono::milliseconds timeout) { return impl_->Join(timeout); }
void Scheduler::Stop() { impl_->Stop(); }
std::vector<NodeInfo> Scheduler::Nodes() const { return impl_->Nodes(); }
std::string Scheduler::MissingNodes() const { return impl_->MissingNodes(); }
SchedulerStats Scheduler::stats() const { return impl_->stats(); }

}  // namespace ps
