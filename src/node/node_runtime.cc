// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// NodeRuntime (node_runtime.h): start and stop, sends, the receive loop and the dispatch
// of data messages, and the scheduler's control messages. The calls to the scheduler are
// in node_runtime_calls.cc; heartbeats and scheduler recovery in node_runtime_heartbeat.cc.
#include "node/node_runtime.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/hash.h"
#include "common/logging.h"
#include "common/host.h"
#include "common/status_wire.h"
#include "layerps.pb.h"
#include "node/scheduler_probe.h"
#include "transport/map_codec.h"

namespace ps {

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {
constexpr int kRecvPollMs = 50;

// A node as a reader names it: "worker rank 2 (node 4)", or "node 4" when the map does
// not know it.
std::string NodeName(const ClusterMap* map, NodeId id) {
  const NodeInfo* n = map ? map->FindNode(id) : nullptr;
  if (n == nullptr) return "node " + std::to_string(id);
  return std::string(RoleName(n->role)) + " rank " + std::to_string(n->rank) + " (node " +
         std::to_string(id) + ")";
}
}  // namespace

NodeRuntime::NodeRuntime(const MemberOptions& options, Role role, Handlers handlers,
                         bool restores)
    : options_(options), role_(role), restores_(restores), handlers_(std::move(handlers)) {
  EnsureLogging();
}

NodeRuntime::~NodeRuntime() { Stop(false); }

void NodeRuntime::Handle(MsgType type, DataHandler handler) {
  data_handlers_[static_cast<uint16_t>(type)] = std::move(handler);
}

Status NodeRuntime::Start() {
  if (running_) return FailedPrecondition("already started");
  PS_RETURN_IF_ERROR(options_.Validate());
  // Port 0 is where a scheduler binds, never where one is found: nothing said where the
  // scheduler is (the default address). Say so now rather than time out later.
  const std::string& sched = options_.scheduler_address;
  if (sched.rfind("tcp://", 0) == 0 && sched.size() >= 2 &&
      sched.compare(sched.size() - 2, 2, ":0") == 0) {
    return FailedPrecondition(
        "no scheduler to join: scheduler_address is " + sched +
        " (port 0); set LAYERPS_SCHEDULER=tcp://HOST:PORT (daemons: --scheduler=...), or start "
        "the program under layerps-launch, which sets it");
  }
  // A host name that does not resolve will not resolve in 30 s either: say so now.
  PS_RETURN_IF_ERROR(probe::ResolveHost(sched));
  RouteProtobufLogs();
  transport_ = NewTransport(TransportOptionsOf(options_));
  StatusOr<std::string> bound =
      transport_->Bind(DefaultBindAddress(options_.bind_address, options_.scheduler_address),
                       options_.advertise_host);
  if (!bound.ok()) return bound.status();
  endpoint_ = *bound;
  secret_ = RandomHex(16);
  PS_RETURN_IF_ERROR(transport_->Connect(kSchedulerId, options_.scheduler_address, "r" + secret_));

  running_ = true;
  stopping_ = false;
  recv_thread_ = std::thread([this] { ReceiveLoop(); });

  layerps::pb::Control c;
  auto* reg = c.mutable_register_();
  reg->set_token(options_.token);
  reg->set_role(static_cast<layerps::pb::Role>(role_));
  reg->set_endpoint(endpoint_);
  reg->set_hostname(LocalHostname());
  reg->set_requested_rank(options_.rank);
  reg->set_session(secret_);
  reg->set_restores(restores_);
  // One deadline for the whole start: the Register must leave and be answered within
  // connect_timeout_ms. A send that cannot leave by then (no connection to the scheduler
  // took it: a refused CURVE handshake drops the queue) is the same failure as no answer,
  // and says so with Timeout, not with the transport's own, longer send timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  const std::string no_answer = "no answer from the scheduler at " + options_.scheduler_address +
                                " within " + std::to_string(options_.connect_timeout_ms) + " ms";
  Status sent = SendToScheduler(MakeControl(kUnassignedId, c),
                                std::min(kControlSendTimeoutMs, options_.connect_timeout_ms));
  if (sent.code() == StatusCode::kUnavailable) {
    sent = Timeout(no_answer + " (the registration could not be sent: " + sent.message() + ")");
  }

  Status result = sent;
  bool was_registered = false;
  if (sent.ok()) {
    MutexLock lock(&mu_);
    const auto ready_now = [this]() REQUIRES(mu_) {
      return !register_status_.ok() || (registered_ && map_ != nullptr) || shutdown_;
    };
    // The wait is cut in slices: with scheduler_recovery_ms, a scheduler restarted before
    // the cluster was complete knows nothing of this node, so the Register goes again
    // every second until the map arrives (a scheduler that has it answers again with the
    // same registration); and every 10 s a registered node says at INFO what
    // the cluster still lacks (a daemon started by hand is not silent while it waits).
    // Until the scheduler answers, its port is probed every second: refused for
    // kRefusedWarn says at WARNING that nothing listens there (the wait goes on: a
    // scheduler may be slow to start), and the final error says so too.
    constexpr auto kWaitReport = std::chrono::milliseconds(10000);
    constexpr auto kRefusedWarn = std::chrono::milliseconds(2000);
    auto next_report = std::chrono::steady_clock::now() + kWaitReport;
    std::chrono::steady_clock::time_point refused_since{};
    bool refused = false, warned = false;
    bool ready = false;
    while (!(ready = ready_now()) && std::chrono::steady_clock::now() < deadline) {
      auto until = std::min(deadline, next_report);
      if (options_.scheduler_recovery_ms > 0 || !registered_) {
        until = std::min(until, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      }
      cv_.WaitUntil(&mu_, until, ready_now);
      const auto now = std::chrono::steady_clock::now();
      if (ready_now() || now >= deadline) continue;
      const bool report = registered_ && now >= next_report;
      const bool unanswered = !registered_;
      if (now >= next_report) next_report = now + kWaitReport;
      lock.Unlock();
      if (unanswered && probe::Refused(sched, 300)) {
        if (!refused) refused_since = now;
        refused = true;
        if (!warned && now - refused_since >= kRefusedWarn) {
          warned = true;
          LOG(WARNING) << RoleName(role_) << ": nothing accepts connections at " << sched
                       << " (refused for "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(now - refused_since)
                              .count()
                       << " ms): is the scheduler running there? Still waiting up to "
                       << options_.connect_timeout_ms << " ms in all";
        }
      } else if (unanswered) {
        refused = false;
      }
      if (options_.scheduler_recovery_ms > 0) {
        SendToScheduler(MakeControl(kUnassignedId, c), kControlSendTimeoutMs);
      }
      if (report) {
        StatusOr<uint32_t> who = CallScheduler(
            [](uint64_t call_id, void* msg) {
              static_cast<layerps::pb::Control*>(msg)->mutable_membership_query()->set_request_id(
                  call_id);
            },
            std::chrono::milliseconds(1000), "membership query");
        LOG(INFO) << RoleName(role_) << " rank " << rank() << " (node " << id()
                  << ") registered; waiting for the cluster ("
                  << (who.ok() ? std::string("complete") : who.status().message()) << ")";
      }
      lock.Lock();
    }
    ready = ready_now();
    if (!register_status_.ok()) {
      result = register_status_;
    } else if (shutdown_) {
      result =
          shutdown_status_.ok() ? Aborted("the cluster shut down during start") : shutdown_status_;
    } else if (!ready) {
      result = registered_ ? Timeout("registered, but the cluster did not complete within " +
                                     std::to_string(options_.connect_timeout_ms) + " ms")
                           : Timeout(no_answer + (refused ? "; nothing accepted connections "
                                                            "there (connection refused): is the "
                                                            "scheduler running at that address?"
                                                          : ""));
    }
    was_registered = registered_;
  }
  if (result.code() == StatusCode::kTimeout && was_registered) {
    // Name who is missing: one short question to the scheduler.
    StatusOr<uint32_t> who = CallScheduler(
        [](uint64_t call_id, void* msg) {
          static_cast<layerps::pb::Control*>(msg)->mutable_membership_query()->set_request_id(call_id);
        },
        std::chrono::milliseconds(1000), "membership query");
    if (!who.ok() && who.status().code() == StatusCode::kFailedPrecondition) {
      result = Timeout(result.message() + "; " + who.status().message());
    }
  }
  if (!result.ok()) {
    // What is still queued for the scheduler (a Register it never took) is dropped now:
    // closing would otherwise linger up to 2 s to deliver it, past connect_timeout_ms.
    transport_->Disconnect(kSchedulerId);
    Stop(false);
    return result;
  }
  last_scheduler_contact_ms_ = clock_->NowMs();
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  LOG(INFO) << RoleName(role_) << " rank " << rank() << " up at " << endpoint_ << " (node " << id()
            << ")";
  return Status::OK();
}

void NodeRuntime::Stop(bool send_leave) {
  if (!running_.exchange(false)) return;
  bool registered, cluster_over;
  {
    MutexLock lock(&mu_);
    registered = registered_;
    cluster_over = shutdown_;  // the scheduler is gone or going: nobody to tell
  }
  if (send_leave && registered && !cluster_over) {
    layerps::pb::Control c;
    c.mutable_leave();
    SendToScheduler(MakeControl(id(), c), kControlSendTimeoutMs);
  }
  stopping_ = true;
  cv_.SignalAll();
  {
    // A waiting thread that holds the receive side gives it back within its budget
    // (sooner: it is woken, and sees stopping_) before the transport closes.
    transport_->WakeRecv();
    MutexLock lock(&recv_mu_);
    recv_cv_.SignalAll();
    recv_cv_.Wait(&recv_mu_, [&]() REQUIRES(recv_mu_) { return !waiter_in_; });
  }
  if (recv_thread_.joinable()) recv_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  transport_->Close();
  MutexLock lock(&mu_);
  for (auto& kv : calls_) {
    if (!kv.second.done) {
      kv.second.done = true;
      kv.second.status = Aborted("node stopped");
    }
  }
  if (!shutdown_) {
    shutdown_ = true;
    shutdown_status_ = Aborted("node stopped");
  }
  cv_.SignalAll();
}

Status NodeRuntime::WaitShutdown(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  if (!cv_.WaitFor(&mu_, timeout, [this]() REQUIRES(mu_) { return shutdown_; })) {
    return Timeout("the cluster is still running");
  }
  return shutdown_status_;
}

void NodeRuntime::Count(NodeId peer, const Message& msg, bool sent) {
  uint64_t payload = 0;
  for (const auto& f : msg.frames) payload += f.size();
  const Header& h = msg.header;
  const MsgType type = h.msg_type();
  MutexLock lock(&traffic_mu_);
  PeerTraffic& p = traffic_.peers[peer];
  (sent ? p.bytes_sent : p.bytes_received) += sizeof(Header) + payload;
  ++(sent ? p.messages_sent : p.messages_received);
  if (type == MsgType::kControl || type == MsgType::kPeerTensor) return;
  if (h.fused() && h.sparse()) {
    // A fused sparse request lists its segments in frame 0, then the keys (and a push's
    // rows): each table counts its keys' and rows' bytes. Replies are not attributed.
    if (type == MsgType::kReply || msg.frames.size() < 2) return;
    const bool rows = msg.frames.size() >= 3;
    const Frame& segs = msg.frames[0];
    for (size_t i = 0; i < segs.size() / sizeof(FusedSparseSegment); ++i) {
      FusedSparseSegment seg;
      std::memcpy(&seg, segs.data() + i * sizeof(seg), sizeof(seg));
      TableTraffic& t = traffic_.tables[seg.table];
      (sent ? t.bytes_sent : t.bytes_received) +=
          seg.keys * sizeof(Key) + (rows ? seg.keys * seg.dim * sizeof(float) : 0);
    }
    return;
  }
  if (h.fused()) {
    // A fused push lists its segments in frame 0 and their values in frame 1; a fused
    // reply carries values only, so it is not attributed to tables.
    if (type == MsgType::kReply || msg.frames.size() < 2) return;
    const Frame& segs = msg.frames[0];
    for (size_t i = 0; i < segs.size() / sizeof(FusedSegment); ++i) {
      FusedSegment seg;
      std::memcpy(&seg, segs.data() + i * sizeof(FusedSegment), sizeof(seg));
      TableTraffic& t = traffic_.tables[seg.table];
      (sent ? t.bytes_sent : t.bytes_received) += seg.count * sizeof(float);
    }
    return;
  }
  if (h.table == kInvalidTable) return;
  TableTraffic& t = traffic_.tables[h.table];
  (sent ? t.bytes_sent : t.bytes_received) += payload;
}

Status NodeRuntime::SendToScheduler(Message&& msg, int timeout_ms) {
  Count(kSchedulerId, msg, /*sent=*/true);
  return transport_->Send(kSchedulerId, std::move(msg), timeout_ms);
}

TrafficStats NodeRuntime::traffic() const {
  MutexLock lock(&traffic_mu_);
  return traffic_;
}

std::shared_ptr<const ClusterMap> NodeRuntime::map() const {
  MutexLock lock(&mu_);
  return map_;
}

Status NodeRuntime::Send(NodeId to, Message&& msg, int timeout_ms) {
  if (!running_) return FailedPrecondition("node is not running");
  {
    MutexLock lock(&mu_);
    // After the cluster ended (the scheduler shut it down, or was lost) nothing may be
    // sent: the peers are gone or going, and a request would only wait for its deadline.
    if (shutdown_ && to != kSchedulerId) {
      return shutdown_status_.ok() ? Aborted("the cluster has shut down") : shutdown_status_;
    }
    if (dead_.count(to)) return Unavailable("node " + std::to_string(to) + " is dead");
  }
  if (!transport_->IsConnected(to)) {
    auto m = map();
    const NodeInfo* n = m ? m->FindNode(to) : nullptr;
    if (n == nullptr) return NotFound("no node " + std::to_string(to) + " in the cluster map");
    if (!n->alive) return Unavailable("node " + std::to_string(to) + " is dead");
    std::string tag;
    {
      MutexLock lock(&mu_);
      tag = tag_;
    }
    PS_RETURN_IF_ERROR(transport_->Connect(to, n->endpoint, "n" + tag));
  }
  msg.header.sender = id();
  Count(to, msg, /*sent=*/true);
  Status sent = transport_->Send(to, std::move(msg),
                                 timeout_ms >= 0 ? timeout_ms : options_.request_timeout_ms);
  // The peer may have been declared dead (and disconnected) between the check above and
  // the send, which then reconnected: drop that connection too, so nothing stays queued
  // for a dead peer holding buffers it borrowed.
  MutexLock lock(&mu_);
  if (dead_.count(to)) {
    transport_->Disconnect(to);
    return Unavailable("node " + std::to_string(to) + " is dead");
  }
  return sent;
}

namespace {
// The node whose receive side this thread owns now (its receive thread, or a waiting
// thread inside ReceiveWhile): ReceiveWhile from there would wait for itself.
thread_local const NodeRuntime* t_receiving = nullptr;
}  // namespace

void NodeRuntime::ReceiveLoop() {
  t_receiving = this;
  int64_t last_tick = SteadyMillis();
  while (!stopping_) {
    Message msg;
    Status s;
    bool handed_back = false;
    {
      MutexLock lock(&recv_mu_);
      // A waiting thread owns the receive side, or is about to: step aside. While
      // waiters come and go, this thread keeps away and looks again every grace period
      // (kWaitReceiveGraceUs): it takes the socket back once none had it for that long,
      // so that a caller's next small request takes it without waking this thread.
      // Messages a waiter handed back come first (the waiter signals); after a whole
      // poll period of waiting this thread takes the next turn (ticks, control messages
      // and other handlers are not starved).
      const auto grace = std::chrono::microseconds(kWaitReceiveGraceUs);
      const auto starve_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRecvPollMs);
      while (!stopping_) {
        const auto now = std::chrono::steady_clock::now();
        if (!waiter_in_ && (!handed_back_.empty() || recv_starved_ ||
                            (!waiter_wants_ && now - last_release_ >= grace))) {
          break;  // this thread's turn
        }
        if (now >= starve_at) recv_starved_ = true;  // the next free moment is ours
        recv_cv_.WaitUntil(&recv_mu_, recv_starved_ ? now + grace : std::min(now + grace, starve_at));
      }
      if (!stopping_) {
        recv_starved_ = false;
        recv_thread_in_ = true;
        if (!handed_back_.empty()) {
          msg = std::move(handed_back_.front());
          handed_back_.pop_front();
          handed_back = true;
        }
      }
    }
    if (stopping_) break;
    s = handed_back ? Status::OK() : transport_->Recv(&msg, kRecvPollMs);
    HandleReceived(s, std::move(msg));
    {
      MutexLock lock(&recv_mu_);
      recv_thread_in_ = false;
      if (waiter_wants_) recv_cv_.SignalAll();
    }
    const int64_t now = SteadyMillis();
    if (now - last_tick >= kRecvPollMs) {
      last_tick = now;
      if (handlers_.on_tick) handlers_.on_tick();
    }
  }
  MutexLock lock(&recv_mu_);
  recv_thread_in_ = false;
  recv_cv_.SignalAll();
}

void NodeRuntime::HandleReceived(const Status& s, Message&& msg) {
  if (s.ok()) {
    if (msg.header.msg_type() == MsgType::kControl) {
      // Only the scheduler knows this node's secret, and only it sends from "s" + secret.
      if (msg.identity != "s" + secret_) {
        CountBadMessage();
        LOG_EVERY_N(WARNING, 100) << "dropped a control message not from the scheduler";
      } else {
        last_scheduler_contact_ms_ = clock_->NowMs();
        ++scheduler_messages_;
        {
          MutexLock lock(&mu_);
          if (scheduler_lost_) cv_.SignalAll();  // AwaitScheduler: a scheduler speaks
        }
        Count(kSchedulerId, msg, /*sent=*/false);
        // Some take long (a server writing its checkpoint, or restoring its tables
        // from one): the scheduler's messages wait meanwhile, which is not silence.
        handling_control_ = true;
        HandleControl(std::move(msg));
        last_scheduler_contact_ms_ = clock_->NowMs();
        handling_control_ = false;
        if (!early_.empty()) ReplayEarly();
      }
    } else if (!FromMember(msg)) {
      if (!ParkEarly(&msg)) {
        CountBadMessage();
        LOG_EVERY_N(WARNING, 100)
            << "dropped a data message from an unknown or dead sender (claims node "
            << msg.header.sender << ")";
      }
    } else {
      Dispatch(std::move(msg));
    }
  } else if (s.code() == StatusCode::kProtocolError) {
    CountBadMessage();
    LOG_EVERY_N(WARNING, 100) << "dropped a malformed message: " << s.message();
  } else if (s.code() != StatusCode::kTimeout) {
    if (stopping_) return;
    LOG_EVERY_N(WARNING, 100) << "receive failed: " << s;
  }
}

bool NodeRuntime::ReceiveWhile(const std::function<bool(const Message&)>& mine,
                               const std::function<bool()>& done,
                               std::chrono::microseconds budget) {
  if (!transport_->CanWakeRecv() || t_receiving != nullptr || stopping_ || !running_) return false;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  {
    MutexLock lock(&recv_mu_);
    if (waiter_in_ || waiter_wants_ || recv_starved_ || !handed_back_.empty()) return false;
    waiter_wants_ = true;
    // Out of its poll, so that it hands the receive side over (it needs no wake when it
    // keeps away already, in the grace after the last waiter).
    if (recv_thread_in_) transport_->WakeRecv();
    const bool got = recv_cv_.WaitUntil(&recv_mu_, deadline, [&]() REQUIRES(recv_mu_) {
      return stopping_ || !recv_thread_in_;
    });
    waiter_wants_ = false;
    if (!got || stopping_ || recv_starved_ || !handed_back_.empty()) {
      recv_cv_.SignalAll();
      return false;
    }
    waiter_in_ = true;
  }
  t_receiving = this;
  bool finished = done();
  while (!finished && !stopping_) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    Message msg;
    const Status s = transport_->Recv(&msg, static_cast<int>((left.count() + 999) / 1000));
    if (s.ok()) {
      if (msg.header.msg_type() != MsgType::kControl && FromMember(msg) && mine(msg)) {
        messages_in_wait_.fetch_add(1, std::memory_order_relaxed);
        Dispatch(std::move(msg));
      } else {
        MutexLock lock(&recv_mu_);
        handed_back_.push_back(std::move(msg));  // the receive thread handles it next
        break;
      }
    } else if (s.code() == StatusCode::kProtocolError) {
      CountBadMessage();
      LOG_EVERY_N(WARNING, 100) << "dropped a malformed message: " << s.message();
    } else if (s.code() != StatusCode::kTimeout) {
      break;
    }
    finished = done();
  }
  t_receiving = nullptr;
  MutexLock lock(&recv_mu_);
  waiter_in_ = false;
  // The receive thread looks again within its grace period, unless it has a message to
  // handle now (or Stop waits): a caller's next small request usually comes sooner.
  last_release_ = std::chrono::steady_clock::now();
  if (!handed_back_.empty() || stopping_) recv_cv_.SignalAll();
  return finished;
}

void NodeRuntime::Dispatch(Message&& msg) {
  auto handler = data_handlers_.find(msg.header.type);
  if (handler == data_handlers_.end()) {
    CountBadMessage();
    LOG_EVERY_N(WARNING, 100) << "dropped a " << MsgTypeName(msg.header.msg_type())
                              << " message from node " << msg.header.sender << ": a "
                              << RoleName(role_) << " does not handle that kind";
  } else {
    Count(msg.header.sender, msg, /*sent=*/false);
    handler->second(std::move(msg));
  }
}

bool NodeRuntime::ParkEarly(Message* msg) {
  auto m = map();
  if (m && msg->header.epoch <= m->epoch) return false;  // our map is as new: not a member
  uint64_t bytes = 0;
  for (const auto& f : msg->frames) bytes += f.size();
  if (early_.size() >= kMaxEarly || early_bytes_ + bytes > kMaxEarlyBytes) return false;
  early_bytes_ += bytes;
  early_.push_back(std::move(*msg));
  return true;
}

void NodeRuntime::ReplayEarly() {
  std::deque<Message> parked;
  parked.swap(early_);
  early_bytes_ = 0;
  for (auto& msg : parked) {
    if (FromMember(msg)) {
      Dispatch(std::move(msg));
    } else if (!ParkEarly(&msg)) {
      CountBadMessage();
      LOG_EVERY_N(WARNING, 100)
          << "dropped a data message from an unknown or dead sender (claims node "
          << msg.header.sender << ")";
    }
  }
}

bool NodeRuntime::FromMember(const Message& msg) const {
  auto m = map();
  if (!m) return false;
  const NodeInfo* n = m->FindNode(msg.header.sender);
  if (n == nullptr || !n->alive || n->role == Role::kScheduler) return false;
  auto tag = m->tags.find(n->id);
  return tag != m->tags.end() && msg.identity == "n" + tag->second;
}

void NodeRuntime::FinishShutdown(const Status& status) {
  MutexLock lock(&mu_);
  if (shutdown_) return;
  shutdown_ = true;
  shutdown_status_ = status;
  cv_.SignalAll();
}

std::vector<std::pair<TableId, Status>> NodeRuntime::InstallMap(
    std::shared_ptr<const ClusterMap> map) {
  {
    MutexLock lock(&mu_);
    if (map_ && map->epoch <= map_->epoch) return {};
    map_ = map;
  }
  // Shared-memory manifests are acted on only from the live members' data connections.
  std::vector<std::string> members;
  for (const auto& kv : map->tags) {
    const NodeInfo* n = map->FindNode(kv.first);
    if (n != nullptr && n->alive && n->role != Role::kScheduler) members.push_back("n" + kv.second);
  }
  transport_->SetSharedMemoryPeers(std::move(members));
  std::vector<std::pair<TableId, Status>> failed;
  if (handlers_.on_map) failed = handlers_.on_map(map);
  cv_.SignalAll();
  return failed;
}

void NodeRuntime::HandleControl(Message&& msg) {
  layerps::pb::Control c;
  Status parsed = ParseControl(msg, &c);
  if (!parsed.ok()) {
    CountBadMessage();
    LOG(WARNING) << "dropped a control message: " << parsed;
    return;
  }
  switch (c.body_case()) {
    case layerps::pb::Control::kRegisterReply: {
      MutexLock lock(&mu_);
      // Before the first map, a restarted scheduler may register this node again
      // (scheduler_recovery_ms: Start sends Register again while it waits).
      if (registered_ && (map_ || options_.scheduler_recovery_ms == 0)) break;
      if (c.register_reply().ok()) {
        if (c.register_reply().tag().empty() || c.register_reply().tag().size() > 64) {
          register_status_ = ProtocolError("the scheduler's reply has no valid data tag");
          cv_.SignalAll();
          break;
        }
        id_ = c.register_reply().id();
        rank_ = c.register_reply().rank();
        tag_ = c.register_reply().tag();
        registered_ = true;
      } else {
        register_status_ =
            PermissionDenied("the scheduler refused this node: " + c.register_reply().error());
      }
      cv_.SignalAll();
      break;
    }
    case layerps::pb::Control::kMapUpdate: {
      auto parsed_map = MapFromProto(c.map_update().map());
      if (!parsed_map.ok()) {
        CountBadMessage();
        LOG(ERROR) << "dropped a cluster map: " << parsed_map.status();
        break;
      }
      const auto failed = InstallMap(*parsed_map);
      layerps::pb::Control ack;
      ack.mutable_map_ack()->set_epoch(c.map_update().map().epoch());
      for (const auto& f : failed) {
        auto* tf = ack.mutable_map_ack()->add_failed();
        tf->set_table(f.first);
        tf->set_error(f.second.message());
        tf->set_code(static_cast<int>(f.second.code()));
      }
      SendToScheduler(MakeControl(id(), ack), kControlSendTimeoutMs);
      break;
    }
    case layerps::pb::Control::kDeclareTableReply:
    case layerps::pb::Control::kBarrierReply:
    case layerps::pb::Control::kCallReply: {
      const bool declare = c.body_case() == layerps::pb::Control::kDeclareTableReply;
      const bool barrier = c.body_case() == layerps::pb::Control::kBarrierReply;
      const uint64_t call_id = declare   ? c.declare_table_reply().request_id()
                               : barrier ? c.barrier_reply().request_id()
                                         : c.call_reply().request_id();
      const int code = declare   ? c.declare_table_reply().code()
                       : barrier ? c.barrier_reply().code()
                                 : c.call_reply().code();
      const std::string& error = declare   ? c.declare_table_reply().error()
                                 : barrier ? c.barrier_reply().error()
                                           : c.call_reply().error();
      MutexLock lock(&mu_);
      auto it = calls_.find(call_id);
      if (it == calls_.end() || it->second.done) break;  // late reply to a timed-out call
      it->second.done = true;
      it->second.status = StatusFromWire(code, error);
      // A barrier's kTimeout is the scheduler's own deadline passing: final, and what
      // the caller asked for (the waiter is forgotten there).
      if (barrier && code == static_cast<int>(StatusCode::kTimeout))
        it->second.status = Timeout(error);
      if (declare) it->second.value = c.declare_table_reply().table_id();
      if (!declare && !barrier) it->second.detail = c.call_reply().detail().substr(0, 4096);
      if (barrier) it->second.value = c.barrier_reply().participants();
      cv_.SignalAll();
      break;
    }
    case layerps::pb::Control::kWorkerJoined:
      VLOG(1) << "worker rank " << c.worker_joined().rank() << " (node "
              << c.worker_joined().id() << ") joined";
      if (handlers_.on_worker_joined) handlers_.on_worker_joined(c.worker_joined().id());
      break;
    case layerps::pb::Control::kNodeDead: {
      const NodeId dead = c.node_dead().id();
      Status why = Unavailable(NodeName(map().get(), dead) + " is dead: " + c.node_dead().reason());
      if (c.node_dead().left()) {
        VLOG(1) << why;  // a normal end: not worth a line in every run
      } else {
        LOG(WARNING) << why;
      }
      if (c.node_dead().left() && handlers_.on_node_left) handlers_.on_node_left(dead);
      if (c.node_dead().replaceable() && handlers_.on_server_replaceable) {
        handlers_.on_server_replaceable(
            dead, c.node_dead().successor() != 0 ? c.node_dead().successor() : kUnassignedId);
      }
      {
        MutexLock lock(&mu_);
        dead_.insert(dead);
      }
      transport_->Disconnect(dead);
      if (handlers_.on_node_dead) handlers_.on_node_dead(dead, why, c.node_dead().left());
      break;
    }
    case layerps::pb::Control::kShutdown: {
      Status s;
      if (c.shutdown().failed()) {
        const std::string why = "the cluster failed: " + c.shutdown().reason().substr(0, 4096);
        const int code = c.shutdown().code();
        s = code == 0 ? Aborted(why) : StatusFromWire(code, why);
      }
      FinishShutdown(s);
      if (!s.ok() && handlers_.on_failure) handlers_.on_failure(s);
      break;
    }
    case layerps::pb::Control::kWriteCheckpoint: {
      const auto& w = c.write_checkpoint();
      layerps::pb::Control done;
      auto* d = done.mutable_checkpoint_done();
      d->set_set(w.set());
      StatusOr<std::string> path =
          role_ == Role::kServer && handlers_.on_checkpoint
              ? handlers_.on_checkpoint(w.set(), w.dir())
              : StatusOr<std::string>(FailedPrecondition("only servers write checkpoints"));
      if (path.ok()) {
        d->set_path(*path);
      } else {
        d->set_code(static_cast<int>(path.status().code()));
        d->set_error(path.status().message().substr(0, 4096));
      }
      SendToScheduler(MakeControl(id(), done), kControlSendTimeoutMs);
      break;
    }
    case layerps::pb::Control::kHeartbeat:
      break;
    default:
      CountBadMessage();
      LOG(WARNING) << "unexpected control message " << c.body_case();
  }
}

}  // namespace ps
