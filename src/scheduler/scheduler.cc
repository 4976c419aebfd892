// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The scheduler: membership (registration, heartbeats, leave, dead nodes, shutdown) here,
// the table directory (declares, range assignment) in scheduler/table_directory.*,
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
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/cluster_map.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_wire.h"
#include "layerps.pb.h"
#include "metrics/metrics.h"
#include "node/node_runtime.h"
#include "scheduler/barriers.h"
#include "scheduler/checkpoints.h"
#include "scheduler/cluster_state.h"
#include "scheduler/failover.h"
#include "scheduler/recovery.h"
#include "scheduler/table_directory.h"
#include "transport/map_codec.h"
#include "transport/transport.h"

namespace ps {
namespace {

constexpr int kPollMs = 50;
// The scheduler's loop must never stall on one peer (heartbeats of everyone else would
// go unanswered), so its sends give up quickly; a peer that cannot take a control
// message within this time is on its way to being declared dead anyway.
constexpr int kSendTimeoutMs = 200;
// Refused registrants get their answer through a short-lived connection, closed later.
constexpr size_t kMaxRefusedConnections = 64;
constexpr NodeId kRefusedIdBase = 0x80000000u;

bool TokenEquals(const std::string& a, const std::string& b) {
  // Length leaks; content compared in constant time.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

class Scheduler::Impl final : public Failover::Host {
 public:
  explicit Impl(SchedulerOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  Status Start() {
    if (thread_.joinable()) return FailedPrecondition("scheduler already started");
    PS_RETURN_IF_ERROR(options_.Validate());
    RouteProtobufLogs();
    // The scheduler only receives control messages: its socket takes small ones only,
    // which bounds what a connection that never registers can make it buffer.
    CommonOptions transport_options = options_;
    transport_options.max_message_bytes = options_.scheduler_max_message_bytes;
    transport_options.shared_memory = false;  // it sends and accepts no data frames
    transport_ = NewTransport(transport_options);
    StatusOr<std::string> bound =
        transport_->Bind(options_.scheduler_address, options_.advertise_host);
    if (!bound.ok()) return bound.status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      address_ = *bound;
    }
    map_.epoch = 0;
    map_.replace_servers_ms = static_cast<uint32_t>(options_.replace_servers_ms);
    map_.replication = options_.replication;
    map_.nodes.push_back(NodeInfo{kSchedulerId, Role::kScheduler, 0, *bound, "", true});
    {
      std::lock_guard<std::mutex> lock(mu_);
      missing_ = Incomplete();
    }
    StatusOr<std::unique_ptr<metrics::Exporter>> exporter = metrics::MaybeStart(
        options_.metrics_host, options_.metrics_port, "scheduler",
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

  Status InstallPlacement(const std::vector<LayerServers>& placement) {
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

  std::string address() const {
    std::lock_guard<std::mutex> lock(mu_);
    return address_;
  }

  Status Join(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return finished_; })) {
      return Timeout("the cluster is still running");
    }
    return result_;
  }

  void Stop() {
    metrics_.reset();
    if (!thread_.joinable()) return;
    stop_requested_ = true;
    thread_.join();
    transport_->Close();
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) {
      finished_ = true;
      result_ = Aborted("scheduler stopped");
    }
    cv_.notify_all();
  }

  std::vector<NodeInfo> Nodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_snapshot_;
  }

  // One scrape of the metrics endpoint (its HTTP thread): snapshots under mu_ only.
  void CollectMetrics(std::vector<metrics::Sample>* out) const {
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
    out->push_back(Gauge("layerps_scheduler_nodes_alive", "Live nodes by role", servers,
                         {{"role", "server"}}));
    out->push_back(Gauge("layerps_scheduler_nodes_alive", "Live nodes by role", workers,
                         {{"role", "worker"}}));
  }
  std::string MissingNodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return missing_;
  }

  SchedulerStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Member {
    int64_t last_seen_ms = 0;
    bool left = false;
  };

  // At most this many queued messages are read before a heartbeat tick (Loop).
  static constexpr int kMaxDrainedBeforeTick = 4096;

  void Loop() {
    int64_t last_beat = SteadyMillis();
    while (!stop_requested_ && !done_) {
      Message msg;
      Status s = transport_->Recv(&msg, kPollMs);
      if (s.ok()) {
        Count([](SchedulerStats& st) { ++st.messages_received; });
        Handle(std::move(msg));
      } else if (s.code() == StatusCode::kProtocolError) {
        BadMessage("malformed message: " + s.message());
      }
      if (SteadyMillis() - last_beat >= options_.heartbeat_interval_ms) {
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
        last_beat = SteadyMillis();
        Periodic(last_beat);
      }
    }
    if (stop_requested_ && !done_) {
      BroadcastShutdown("the scheduler was stopped", true);
      Finish(Aborted("scheduler stopped"));
    }
  }

  void Count(const std::function<void(SchedulerStats&)>& f) {
    std::lock_guard<std::mutex> lock(mu_);
    f(stats_);
  }

  void BadMessage(const std::string& why) {
    Count([](SchedulerStats& st) { ++st.bad_messages; });
    LOG_EVERY_N(WARNING, 100) << "scheduler dropped a message: " << why;
  }

  void SendControl(NodeId to, const layerps::pb::Control& c) {
    Status s = transport_->Send(to, MakeControl(kSchedulerId, c), kSendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 20) << "scheduler: send to " << to << " failed: " << s;
    }
  }

  void Handle(Message&& msg) {
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
    it->second.last_seen_ms = SteadyMillis();
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
        barriers_.HandleBarrier(from, c.barrier(), SteadyMillis());
        break;
      case layerps::pb::Control::kJoin:
        barriers_.HandleJoin(from, c.join(), SteadyMillis());
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
        checkpoints_.HandleRequest(from, c.checkpoint(), SteadyMillis());
        break;
      case layerps::pb::Control::kCheckpointDone:
        checkpoints_.HandleDone(from, c.checkpoint_done(), SteadyMillis());
        break;
      case layerps::pb::Control::kLeave:
        HandleLeave(from);
        break;
      default:
        BadMessage("unexpected control message from node " + std::to_string(from));
    }
  }

  NodeInfo* FindNode(NodeId id) { return map_.FindNodeMutable(id); }

  // ClusterState, for the table directory and the barriers.
  ClusterMap& map() override { return map_; }
  bool complete() const override { return complete_; }
  void Send(NodeId to, const layerps::pb::Control& c) override { SendControl(to, c); }

  // Failover::Host, for server deaths the job survives.
  void Forget(NodeId id) override {
    if (!members_[id].left) Count([](SchedulerStats& st) { ++st.dead_nodes; });
    transport_->Disconnect(id);
  }
  void Release(NodeId id) override {
    barriers_.Drop(id);
    checkpoints_.OnServerDead(id, SteadyMillis());
  }

  void HandleRegister(const layerps::pb::Register& r, const std::string& identity) {
    // The session secret names the connection the node registers from; a registration
    // arriving on another connection, or a session seen before, is not answered.
    const std::string& session = r.session();
    if (session.size() < 16 || session.size() > 64 || identity != "r" + session) {
      BadMessage("registration with a bad session");
      return;
    }
    if (auto known = identities_.find(identity); known != identities_.end()) {
      // The same registration again (a node waiting for its map sends it every second
      // under scheduler_recovery_ms): the same answer.
      const NodeInfo* n = FindNode(known->second);
      if (n == nullptr || !n->alive || complete_) {
        BadMessage("registration replayed on a registered connection");
        return;
      }
      layerps::pb::Control again;
      auto* rr = again.mutable_register_reply();
      rr->set_ok(true);
      rr->set_id(n->id);
      rr->set_rank(n->rank);
      rr->set_tag(map_.tags[n->id]);
      SendControl(n->id, again);
      return;
    }
    if (recovery_.active()) return;  // taking a running cluster over: the node asks again later
    std::string refusal;
    const Role role = static_cast<Role>(r.role());
    const int have_servers = map_.CountRole(Role::kServer);
    const int have_workers = map_.CountRole(Role::kWorker);
    if (!TokenEquals(r.token(), options_.token)) {
      refusal = "wrong cluster token";
    } else if (role != Role::kServer && role != Role::kWorker) {
      refusal = "a node must register as server or worker";
    } else if (r.endpoint().empty() || r.endpoint().size() > 1024) {
      refusal = "bad endpoint";
    } else if (complete_ && role == Role::kWorker && options_.tolerate_worker_loss &&
               DeadWorker(-1) != nullptr) {
      // A restarted worker: it takes a dead worker's rank (below).
    } else if (complete_ && (role != Role::kServer || !failover_.vacant())) {
      refusal = "the cluster is already complete";
    } else if (complete_ && failover_.joining()) {
      refusal = "another replacement server is joining; retry in a moment";
    } else if (complete_) {
      // A replacement: it takes a dead server's rank (the one asked for, or the first).
    } else if (role == Role::kServer && have_servers >= options_.num_servers) {
      refusal = "all " + std::to_string(options_.num_servers) + " server slots are taken";
    } else if (role == Role::kWorker && have_workers >= options_.num_workers) {
      refusal = "all " + std::to_string(options_.num_workers) + " worker slots are taken";
    }
    const int count = role == Role::kServer ? options_.num_servers : options_.num_workers;
    int rank = -1;
    const Failover::Vacancy* vacancy = nullptr;
    const NodeInfo* dead_worker = nullptr;
    if (refusal.empty() && complete_ && role == Role::kWorker) {
      dead_worker = DeadWorker(r.requested_rank());
      if (dead_worker == nullptr) {
        refusal = "worker rank " + std::to_string(r.requested_rank()) +
                  " is alive; a restarted worker takes the rank of a dead one";
      } else {
        rank = static_cast<int>(dead_worker->rank);
      }
    } else if (refusal.empty() && complete_) {
      vacancy = failover_.FindVacancy(r.requested_rank(), &refusal);
      if (vacancy != nullptr) rank = static_cast<int>(vacancy->rank);
    } else if (refusal.empty()) {
      if (r.requested_rank() >= 0) {
        if (r.requested_rank() >= count) {
          refusal = "rank " + std::to_string(r.requested_rank()) +
                    " asked for, but the cluster has " + std::to_string(count) + " " +
                    RoleName(role) + "(s)";
        } else if (RankTaken(role, r.requested_rank())) {
          refusal = std::string(RoleName(role)) + " rank " + std::to_string(r.requested_rank()) +
                    " is taken";
        } else {
          rank = r.requested_rank();
        }
      } else {
        rank = 0;
        while (RankTaken(role, rank)) ++rank;  // the lowest free rank
      }
    }
    layerps::pb::Control reply;
    auto* rr = reply.mutable_register_reply();
    if (!refusal.empty()) {
      Count([](SchedulerStats& st) { ++st.rejected_registrations; });
      LOG(WARNING) << "refused a node at " << r.endpoint() << ": " << refusal;
      rr->set_ok(false);
      rr->set_error(refusal);
      if (r.endpoint().empty() || r.endpoint().size() > 1024) return;
      const NodeId temp =
          kRefusedIdBase + static_cast<NodeId>(refused_counter_++ % kMaxRefusedConnections);
      if (transport_->Connect(temp, r.endpoint(), "s" + session).ok()) {
        SendControl(temp, reply);
        refused_.push_back({temp, SteadyMillis()});
      }
      return;
    }
    NodeInfo info;
    info.id = next_id_++;
    info.role = role;
    info.rank = static_cast<uint32_t>(rank);
    info.endpoint = r.endpoint();
    info.hostname = r.hostname();
    info.alive = true;
    Status connected = transport_->Connect(info.id, info.endpoint, "s" + session);
    if (!connected.ok()) {
      LOG(WARNING) << "cannot reach registrant at " << info.endpoint << ": " << connected;
      --next_id_;
      return;
    }
    if (vacancy != nullptr) {
      failover_.AcceptReplacement(info, *vacancy, r.restores(), identity);
      return;
    }
    if (dead_worker != nullptr) {
      AcceptRestartedWorker(info, dead_worker->id, identity);
      return;
    }
    map_.nodes.push_back(info);
    map_.tags[info.id] = RandomHex(16);
    identities_[identity] = info.id;
    members_[info.id] = Member{SteadyMillis(), false};
    rr->set_ok(true);
    rr->set_id(info.id);
    rr->set_rank(info.rank);
    rr->set_tag(map_.tags[info.id]);
    SendControl(info.id, reply);
    LOG(INFO) << "registered " << RoleName(role) << " rank " << info.rank << " as node " << info.id
              << " at " << info.endpoint;
    const bool now_complete = map_.CountRole(Role::kServer) == options_.num_servers &&
                              map_.CountRole(Role::kWorker) == options_.num_workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      missing_ = now_complete ? std::string() : Incomplete();
    }
    if (now_complete) {
      complete_ = true;
      const int64_t now = SteadyMillis();
      for (auto& kv : members_) kv.second.last_seen_ms = now;
      LOG(INFO) << "cluster complete: " << options_.num_servers << " server(s), "
                << options_.num_workers << " worker(s)";
      BroadcastMap();
    }
  }

  // --- Scheduler recovery (docs/recovery.md) -------------------------------------------
  // A scheduler started on the address of one that died hears from the live nodes of the
  // old cluster: each sends a Rejoin (its id, rank, data tag, session, newest map and the
  // barriers it passed) every heartbeat interval. The newest map among them is the
  // cluster's; once every live server and worker of it rejoined, or twice
  // heartbeat_timeout_ms after the first Rejoin, the cluster is rebuilt from it: the nodes keep their ids,
  // ranks and tags (their data connections and data are untouched), the nodes that did
  // not rejoin are declared dead (as any dead node: a backup takes over, a replacement is
  // awaited, or the job fails), and everyone gets the map of a new epoch. The nodes then
  // send again the calls the old scheduler never answered.
  void HandleRejoin(const layerps::pb::Rejoin& r, const std::string& identity) {
    if (complete_ && !recovery_.active()) {
      // A node that thought this scheduler lost (a stall): its Rejoin is a heartbeat.
      auto who = identities_.find(identity);
      if (who != identities_.end() && members_.count(who->second)) {
        members_[who->second].last_seen_ms = SteadyMillis();
      }
      return;
    }
    if (recovery_.rejoined(r.id())) return;  // sent again before the cluster was rebuilt
    if (!TokenEquals(r.token(), options_.token)) {
      BadMessage("a rejoin with the wrong cluster token");
      return;
    }
    StatusOr<Recovery::Rejoiner> rejoiner =
        Recovery::Check(r, identity, options_.num_servers, options_.num_workers, kRefusedIdBase, map_);
    if (!rejoiner.ok()) {
      BadMessage(rejoiner.status().message());
      return;
    }
    const NodeInfo& info = rejoiner->node;
    Status connected = transport_->Connect(info.id, info.endpoint, "s" + r.session());
    if (!connected.ok()) {
      LOG(WARNING) << "cannot reach rejoining node " << info.id << " at " << info.endpoint << ": "
                   << connected;
      return;
    }
    const int64_t now = SteadyMillis();
    if (!recovery_.active()) {
      LOG(WARNING) << "nodes of a running cluster rejoin: this scheduler takes the cluster over";
    }
    recovery_.Add(*rejoiner, r, now);
    map_.nodes.push_back(info);
    map_.tags[info.id] = rejoiner->tag;
    identities_[identity] = info.id;
    members_[info.id] = Member{now, false};
    next_id_ = std::max<NodeId>(next_id_, info.id + 1);
    LOG(INFO) << RoleName(info.role) << " rank " << info.rank << " (node " << info.id
              << ") rejoined with map epoch " << rejoiner->map->epoch;
    MaybeFinishRecovery(now);
  }

  // Nodes notice the silence at different times (each heartbeat_timeout_ms after its own
  // last word from the old scheduler): twice that is left for the last of them.
  int64_t RejoinWindowMs() const { return 2 * int64_t{options_.heartbeat_timeout_ms}; }

  void MaybeFinishRecovery(int64_t now) {
    if (!recovery_.Due(now, RejoinWindowMs())) return;
    const std::vector<NodeId> missing = recovery_.Missing();
    map_ = recovery_.Rebuild(map_, options_.replication, static_cast<uint32_t>(options_.replace_servers_ms));
    for (const NodeInfo& n : map_.nodes) {
      if (n.id != kSchedulerId && !members_.count(n.id)) members_[n.id] = Member{now, false};
      next_id_ = std::max<NodeId>(next_id_, n.id + 1);
      if (n.role == Role::kWorker && !n.alive) ++dead_workers_;
    }
    tables_.Recover(recovery_.epochs());
    barriers_.Recover(recovery_.barriers_passed());
    complete_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      missing_.clear();
      ++stats_.recoveries;
    }
    LOG(WARNING) << "took the cluster over from " << recovery_.epochs().size()
                 << " live node(s) after " << now - recovery_.started_ms()
                 << " ms (their newest map had epoch " << recovery_.newest_epoch() << "); "
                 << missing.size() << " did not rejoin";
    BroadcastMap();
    for (NodeId id : missing) {
      if (done_) break;
      MarkDead(id, "did not rejoin the restarted scheduler within " + std::to_string(RejoinWindowMs()) + " ms");
    }
    tables_.Resolve();
  }

  // Calls that need a complete cluster: while it is not, answers `request_id` with
  // kFailedPrecondition naming the missing nodes and returns true; once it is, returns
  // false (the caller handles the call) except for a membership query, answered OK.
  bool ReplyCall(NodeId to, uint64_t request_id, bool membership_query = false) {
    if (complete_ && !membership_query) return false;
    layerps::pb::Control r;
    r.mutable_call_reply()->set_request_id(request_id);
    if (!complete_) {
      r.mutable_call_reply()->set_code(static_cast<int>(StatusCode::kFailedPrecondition));
      r.mutable_call_reply()->set_error(Incomplete());
    }
    SendControl(to, r);
    return true;
  }

  bool RankTaken(Role role, int rank) const {
    for (const auto& n : map_.nodes) {
      if (n.role == role && static_cast<int>(n.rank) == rank) return true;
    }
    return false;
  }

  void BroadcastMap() override {
    ++map_.epoch;
    layerps::pb::Control c;
    MapToProto(map_, c.mutable_map_update()->mutable_map());
    for (const auto& n : map_.nodes) {
      if (n.id != kSchedulerId && n.alive) SendControl(n.id, c);
    }
    std::lock_guard<std::mutex> lock(mu_);
    nodes_snapshot_ = map_.nodes;
    stats_.map_epoch = map_.epoch;
  }

  void HandleLeave(NodeId from) {
    NodeInfo* n = FindNode(from);
    members_[from].left = true;
    n->alive = false;
    LOG(INFO) << RoleName(n->role) << " node " << from << " left";
    if (n->role == Role::kServer) {
      MarkDead(from, "the server left the cluster");
      return;
    }
    transport_->Disconnect(from);
    barriers_.Forget(from);  // a leaving node no longer waits anywhere
    // Nothing more will come from it: peers waiting on it (worker-to-worker receives)
    // fail now rather than at their deadline.
    layerps::pb::Control gone;
    gone.mutable_node_dead()->set_id(from);
    gone.mutable_node_dead()->set_reason("the worker left the cluster");
    gone.mutable_node_dead()->set_left(true);
    for (const auto& m : map_.nodes) {
      if (m.id != kSchedulerId && m.alive) SendControl(m.id, gone);
    }
    MaybeFinish();
  }

  // "the cluster is not complete: missing server rank 1 and worker ranks 2, 3 (1 of 2
  // servers and 2 of 4 workers registered)".
  std::string Incomplete() const {
    std::string missing, counts;
    for (Role role : {Role::kServer, Role::kWorker}) {
      const int want = role == Role::kServer ? options_.num_servers : options_.num_workers;
      std::vector<bool> have(static_cast<size_t>(want), false);
      int registered = 0;
      for (const auto& n : map_.nodes) {
        if (n.role != role || n.id == kSchedulerId) continue;
        ++registered;
        if (n.rank < have.size()) have[n.rank] = true;
      }
      std::string ranks;
      int count = 0;
      for (int r = 0; r < want; ++r) {
        if (have[r]) continue;
        if (count < 16) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        ++count;
      }
      if (count > 16) ranks += ", ... (" + std::to_string(count) + " in all)";
      const std::string name = role == Role::kServer ? "server" : "worker";
      if (count > 0) {
        missing += std::string(missing.empty() ? "" : " and ") + name + (count > 1 ? " ranks " : " rank ") + ranks;
      }
      counts += std::string(counts.empty() ? "" : " and ") + std::to_string(registered) + " of " +
                std::to_string(want) + " " + name + "s";
    }
    return "the cluster is not complete: missing " + missing + " (" + counts + " registered)";
  }

  void MarkDead(NodeId id, const std::string& reason) {
    NodeInfo* n = FindNode(id);
    if (n == nullptr) return;
    if (failover_.OnTakeoverDead(n, reason)) return;  // both copies of some ranges are gone
    if (n->role == Role::kServer && complete_ && !done_ &&
        failover_.OnServerDead(n, reason, SteadyMillis())) {
      return;
    }
    n->alive = false;
    // A server gone before the workers finished takes its shards with it: the cluster
    // has failed whether it crashed or left. Only a crash counts as a dead node. (A
    // worker that leaves never comes here: HandleLeave.)
    if (!members_[id].left) Count([](SchedulerStats& st) { ++st.dead_nodes; });
    const bool lost_worker = n->role == Role::kWorker;
    if (lost_worker) ++dead_workers_;
    if (first_failure_.ok() && !(lost_worker && options_.tolerate_worker_loss)) {
      first_failure_ = Unavailable(std::string(RoleName(n->role)) + " node " + std::to_string(id) +
                                   (lost_worker ? " (rank " + std::to_string(n->rank) + ")" : "") +
                                   (members_[id].left ? " left: " : " died: ") + reason +
                                   (lost_worker ? "; the job does not tolerate worker loss "
                                                  "(tolerate_worker_loss is off)"
                                                : ""));
    }
    LOG(WARNING) << RoleName(n->role) << " node " << id << " is dead: " << reason;
    transport_->Disconnect(id);
    layerps::pb::Control c;
    c.mutable_node_dead()->set_id(id);
    c.mutable_node_dead()->set_reason(reason);
    for (const auto& m : map_.nodes) {
      if (m.id != kSchedulerId && m.alive) SendControl(m.id, c);
    }
    BroadcastMap();
    barriers_.FailAll(Unavailable(std::string(RoleName(n->role)) + " rank " +
                                  std::to_string(n->rank) + " (node " + std::to_string(id) +
                                  ") died during the barrier"));
    barriers_.Drop(id);
    if (n->role == Role::kServer) checkpoints_.OnServerDead(id, SteadyMillis());
    tables_.Resolve();
    if (lost_worker && !options_.tolerate_worker_loss && complete_) {
      // A synchronous job cannot go on with a smaller global batch: end it now, so every
      // node's pending and later calls fail with this reason instead of training on.
      BroadcastShutdown(first_failure_.message(), true, StatusCode::kUnavailable);
      Finish(first_failure_);
      return;
    }
    MaybeFinish();
  }

  // A new map epoch, sent to `node` alone: a server taking over ranges (a backup or a
  // replacement) gets it first, the others once it acknowledged. Returns the epoch.
  uint64_t SendNewMapTo(NodeId node) override {
    ++map_.epoch;
    layerps::pb::Control c;
    MapToProto(map_, c.mutable_map_update()->mutable_map());
    SendControl(node, c);
    std::lock_guard<std::mutex> lock(mu_);
    nodes_snapshot_ = map_.nodes;
    stats_.map_epoch = map_.epoch;
    return map_.epoch;
  }

  // A registrant takes dead node `dead`'s entry in the map (its rank; a new id and data
  // tag) and gets its RegisterReply.
  void TakePlace(const NodeInfo& info, NodeId dead, const std::string& identity) override {
    map_.nodes.erase(std::remove_if(map_.nodes.begin(), map_.nodes.end(),
                                    [&](const NodeInfo& n) { return n.id == dead; }),
                     map_.nodes.end());
    map_.tags.erase(dead);
    map_.nodes.push_back(info);
    map_.tags[info.id] = RandomHex(16);
    identities_[identity] = info.id;
    members_[info.id] = Member{SteadyMillis(), false};
    layerps::pb::Control reply;
    auto* rr = reply.mutable_register_reply();
    rr->set_ok(true);
    rr->set_id(info.id);
    rr->set_rank(info.rank);
    rr->set_tag(map_.tags[info.id]);
    SendControl(info.id, reply);
  }

  // A dead worker of rank `rank` (-1: the lowest), when the job tolerates worker loss.
  const NodeInfo* DeadWorker(int rank) const {
    const NodeInfo* best = nullptr;
    for (const NodeInfo& n : map_.nodes) {
      if (n.role != Role::kWorker || n.alive || members_.at(n.id).left) continue;
      if (rank >= 0 && static_cast<int>(n.rank) != rank) continue;
      if (best == nullptr || n.rank < best->rank) best = &n;
    }
    return best;
  }

  // A worker restarted after a crash (tolerate_worker_loss): it takes the dead worker's
  // rank, and every node learns of it with the next map (asynchronous tables only: its
  // bsp/ssp clocks would start again at zero).
  void AcceptRestartedWorker(NodeInfo info, NodeId dead, const std::string& identity) {
    TakePlace(info, dead, identity);
    if (dead_workers_ > 0) --dead_workers_;
    LOG(INFO) << "worker node " << info.id << " at " << info.endpoint << " takes the place of "
              << "dead worker rank " << info.rank << " (node " << dead << ")";
    BroadcastMap();
  }

  // Ends the job as failed: every node's pending and later calls fail with `why`.
  void FailJob(const Status& why) override {
    if (first_failure_.ok()) first_failure_ = why;
    BroadcastShutdown(first_failure_.message(), true, first_failure_.code());
    Finish(first_failure_);
  }

  // The cluster is done when no worker is alive any more.
  void MaybeFinish() override {
    if (!complete_) return;
    for (const auto& n : map_.nodes) {
      if (n.role == Role::kWorker && n.alive) return;
    }
    // Tolerated worker losses fail the job only when no worker finished.
    if (first_failure_.ok() && dead_workers_ > 0 &&
        dead_workers_ == map_.CountRole(Role::kWorker)) {
      first_failure_ = Unavailable("every worker died");
    }
    const bool failed = !first_failure_.ok();
    BroadcastShutdown(failed ? first_failure_.message() : "every worker finished", failed);
    Finish(first_failure_);
  }

  // `code`: what the members fail their calls with (kAborted when not given).
  void BroadcastShutdown(const std::string& reason, bool failed,
                         StatusCode code = StatusCode::kAborted) {
    layerps::pb::Control c;
    c.mutable_shutdown()->set_reason(reason);
    c.mutable_shutdown()->set_failed(failed);
    if (failed && code != StatusCode::kAborted)
      c.mutable_shutdown()->set_code(static_cast<int>(code));
    for (const auto& n : map_.nodes) {
      if (n.id != kSchedulerId && n.alive) SendControl(n.id, c);
    }
  }

  void Finish(const Status& result) {
    done_ = true;
    LOG(INFO) << "scheduler finished: " << result;
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    result_ = result;
    cv_.notify_all();
  }

  void Periodic(int64_t now) {
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

  const SchedulerOptions options_;
  std::unique_ptr<Transport> transport_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};

  // Loop-thread state.
  ClusterMap map_;
  bool complete_ = false;
  bool done_ = false;
  NodeId next_id_ = 1;
  TableId next_table_id_ = 0;
  uint64_t refused_counter_ = 0;
  std::deque<std::pair<NodeId, int64_t>> refused_;
  std::map<NodeId, Member> members_;
  std::map<std::string, NodeId> identities_;  // registration routing id -> node
  TableDirectory tables_{this, options_.dense_chunk_elems};
  Barriers barriers_{this, options_.tolerate_worker_loss};
  Checkpoints checkpoints_{this, options_.checkpoint_dir, options_.checkpoint_every_s};
  Status first_failure_;
  int dead_workers_ = 0;  // workers declared dead (crashed or silent; not those that left)
  Failover failover_{this, &tables_, options_};
  Recovery recovery_;  // nodes of a running cluster rejoin (HandleRejoin)

  // Shared with callers of the public accessors.
  mutable std::mutex mu_;
  // Serves CollectMetrics while the scheduler runs (reset first in Stop).
  std::unique_ptr<metrics::Exporter> metrics_;
  std::condition_variable cv_;
  std::string address_;                   // guarded by mu_
  std::vector<NodeInfo> nodes_snapshot_;  // guarded by mu_
  std::string missing_;                   // guarded by mu_: Incomplete(), "" once complete
  SchedulerStats stats_;                  // guarded by mu_
  bool finished_ = false;                 // guarded by mu_
  Status result_;                         // guarded by mu_
};

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
