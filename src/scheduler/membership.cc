// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The scheduler's membership handlers (Scheduler::Impl, scheduler_impl.h): a node's
// registration (token, rank, identity, refusals, the cluster complete), a node of a
// running cluster rejoining a restarted scheduler, a Leave, a death, and a dead worker
// restarted into its rank.
#include <glog/logging.h>

#include <algorithm>

#include "common/hash.h"
#include "common/logging.h"
#include "common/status_wire.h"
#include "node/node_runtime.h"
#include "scheduler/scheduler_impl.h"
#include "transport/map_codec.h"

namespace ps {
namespace {

bool TokenEquals(const std::string& a, const std::string& b) {
  // Length leaks; content compared in constant time.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

void Scheduler::Impl::HandleRegister(const layerps::pb::Register& r, const std::string& identity) {
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
  } else if (complete_ && role == Role::kWorker &&
             (options_.elastic() || (options_.tolerate_worker_loss && DeadWorker(-1) != nullptr))) {
    // A worker joining the running job: a restarted one takes a dead worker's rank, an
    // elastic job's new one a new rank (PlaceLateWorker, below).
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
    refusal = PlaceLateWorker(r.requested_rank(), &rank, &dead_worker);
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
      refused_.push_back({temp, NowMs()});
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
  members_[info.id] = Member{NowMs(), false};
  rr->set_ok(true);
  rr->set_id(info.id);
  rr->set_rank(info.rank);
  rr->set_tag(map_.tags[info.id]);
  SendControl(info.id, reply);
  LOG(INFO) << "registered " << RoleName(role) << " rank " << info.rank << " as node " << info.id
            << " at " << info.endpoint;
  if (complete_) {
    // A worker that grew an elastic job: every node learns of it with the next map.
    members_[info.id].last_seen_ms = NowMs();
    LOG(INFO) << "the job grows to " << LiveWorkers() << " live worker(s) (max_workers="
              << options_.MaxWorkers() << ")";
    BroadcastMap();
    return;
  }
  const bool now_complete = map_.CountRole(Role::kServer) == options_.num_servers &&
                            map_.CountRole(Role::kWorker) == options_.num_workers;
  {
    MutexLock lock(&mu_);
    missing_ = now_complete ? std::string() : Incomplete();
  }
  if (now_complete) {
    complete_ = true;
    const int64_t now = NowMs();
    for (auto& kv : members_) kv.second.last_seen_ms = now;
    LOG(INFO) << "cluster complete: " << options_.num_servers << " server(s), "
              << options_.num_workers << " worker(s)";
    BroadcastMap();
  }
}

void Scheduler::Impl::HandleRejoin(const layerps::pb::Rejoin& r, const std::string& identity) {
  if (complete_ && !recovery_.active()) {
    // A node that thought this scheduler lost (a stall): its Rejoin is a heartbeat.
    auto who = identities_.find(identity);
    if (who != identities_.end() && members_.count(who->second)) {
      members_[who->second].last_seen_ms = NowMs();
    }
    return;
  }
  if (recovery_.rejoined(r.id())) {
    // Sent again before the cluster was rebuilt: the node is alive. A node waiting for
    // the takeover sends Rejoins, not heartbeats, so this is what keeps it from looking
    // silent when the rebuild comes.
    auto who = identities_.find(identity);
    if (who != identities_.end() && who->second == r.id()) {
      members_[r.id()].last_seen_ms = NowMs();
    }
    return;
  }
  if (options_.scheduler_recovery_ms <= 0) {
    // A scheduler started afresh, not to take a cluster over: the rejoining node belongs
    // to a job that is not this one (or this scheduler lacks the option).
    LOG_EVERY_N(WARNING, 20) << "refused a rejoin of node " << r.id() << " at "
                             << r.endpoint().substr(0, 256)
                             << ": this scheduler was not started for recovery "
                                "(scheduler_recovery_ms=0), so it forms a new cluster and "
                                "takes no running one over";
    Count([](SchedulerStats& st) { ++st.rejected_rejoins; });
    return;
  }
  if (!TokenEquals(r.token(), options_.token)) {
    BadMessage("a rejoin with the wrong cluster token");
    return;
  }
  // One job per scheduler: a cluster forming from registrations takes no rejoins (checked
  // first: such a node's id or rank may well clash with a registered one), and a takeover
  // in progress takes the nodes of the job it started with only.
  const auto refuse_other_job = [&](const std::string& why) {
    LOG_EVERY_N(WARNING, 20) << "refused a rejoin of node " << r.id() << " of job "
                             << r.map().job().substr(0, 64) << ": " << why;
    Count([](SchedulerStats& st) { ++st.rejected_rejoins; });
  };
  if (!recovery_.active() && map_.nodes.size() > 1) {
    refuse_other_job("this scheduler is forming job " + map_.job + " from " +
                     std::to_string(map_.nodes.size() - 1) + " registered node(s)");
    return;
  }
  if (recovery_.active() && r.map().job() != recovery_.job()) {
    refuse_other_job("this scheduler is taking job " + recovery_.job() + " over");
    return;
  }
  StatusOr<Recovery::Rejoiner> rejoiner = Recovery::Check(
      r, identity, options_.num_servers, options_.num_workers, kRefusedIdBase, map_);
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
  const int64_t now = NowMs();
  if (!recovery_.active()) {
    LOG(WARNING) << "nodes of a running cluster (job " << rejoiner->map->job
                 << ") rejoin: this scheduler takes the cluster over";
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

void Scheduler::Impl::MaybeFinishRecovery(int64_t now) {
  if (!recovery_.Due(now, RejoinWindowMs())) return;
  const std::vector<NodeId> missing = recovery_.Missing();
  map_ = recovery_.Rebuild(map_, options_.replication,
                           static_cast<uint32_t>(options_.replace_servers_ms));
  for (const NodeInfo& n : map_.nodes) {
    if (n.id == kSchedulerId) continue;
    // Heartbeat timeouts count from the new map: a node that rejoined was heard during
    // the takeover (and sends heartbeats only once it has the map); one that did not is
    // declared dead below for that reason, not for silence.
    members_[n.id].last_seen_ms = now;
    next_id_ = std::max<NodeId>(next_id_, n.id + 1);
    if (n.role == Role::kWorker && !n.alive) ++dead_workers_;
  }
  tables_.Recover(recovery_.epochs());
  barriers_.Recover(recovery_.barriers_passed());
  complete_ = true;
  {
    MutexLock lock(&mu_);
    missing_.clear();
  }
  LOG(WARNING) << "took the cluster over from " << recovery_.epochs().size()
               << " live node(s) after " << now - recovery_.started_ms()
               << " ms (their newest map had epoch " << recovery_.newest_epoch() << "); "
               << missing.size() << " did not rejoin";
  BroadcastMap();
  for (NodeId id : missing) {
    if (done_) break;
    MarkDead(id, "did not rejoin the restarted scheduler within " +
                     std::to_string(RejoinWindowMs()) + " ms");
  }
  tables_.Resolve();
  // Counted once the takeover is out: whoever sees the count sees its map's epoch and
  // the deaths of the nodes that did not rejoin in the other stats.
  MutexLock lock(&mu_);
  ++stats_.recoveries;
}

bool Scheduler::Impl::ReplyCall(NodeId to, uint64_t request_id, bool membership_query) {
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

bool Scheduler::Impl::RankTaken(Role role, int rank) const {
  for (const auto& n : map_.nodes) {
    if (n.role == role && static_cast<int>(n.rank) == rank) return true;
  }
  return false;
}

void Scheduler::Impl::HandleLeave(NodeId from) {
  NodeInfo* n = FindNode(from);
  members_[from].left = true;
  n->alive = false;
  LOG(INFO) << RoleName(n->role) << " rank " << n->rank << " (node " << from << ") left";
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

std::string Scheduler::Impl::Incomplete() const {
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
      missing += std::string(missing.empty() ? "" : " and ") + name +
                 (count > 1 ? " ranks " : " rank ") + ranks;
    }
    counts += std::string(counts.empty() ? "" : " and ") + std::to_string(registered) + " of " +
              std::to_string(want) + " " + name + "s";
  }
  return "the cluster is not complete: missing " + missing + " (" + counts + " registered)";
}

void Scheduler::Impl::MarkDead(NodeId id, const std::string& reason) {
  NodeInfo* n = FindNode(id);
  if (n == nullptr) return;
  if (failover_.OnTakeoverDead(n, reason)) return;  // both copies of some ranges are gone
  if (n->role == Role::kServer && complete_ && !done_ &&
      failover_.OnServerDead(n, reason, NowMs())) {
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
    first_failure_ = Unavailable(std::string(RoleName(n->role)) + " rank " +
                                 std::to_string(n->rank) + " (node " + std::to_string(id) + ")" +
                                 (members_[id].left ? " left: " : " died: ") + reason +
                                 (lost_worker ? "; the job does not tolerate worker loss "
                                                "(tolerate_worker_loss is off)"
                                              : ""));
  }
  LOG(WARNING) << RoleName(n->role) << " rank " << n->rank << " (node " << id
               << ") is dead: " << reason;
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
  if (n->role == Role::kServer) checkpoints_.OnServerDead(id, NowMs());
  tables_.Resolve();
  if (lost_worker && complete_ && options_.tolerate_worker_loss &&
      BelowMinWorkers("worker rank " + std::to_string(n->rank) + " (node " + std::to_string(id) +
                      ") died: " + reason)) {
    return;
  }
  if (lost_worker && !options_.tolerate_worker_loss && complete_) {
    // A synchronous job cannot go on with a smaller global batch: end it now, so every
    // node's pending and later calls fail with this reason instead of training on.
    BroadcastShutdown(first_failure_.message(), true, StatusCode::kUnavailable);
    Finish(first_failure_);
    return;
  }
  MaybeFinish();
}

uint64_t Scheduler::Impl::SendNewMapTo(NodeId node) {
  ++map_.epoch;
  layerps::pb::Control c;
  MapToProto(map_, c.mutable_map_update()->mutable_map());
  SendControl(node, c);
  MutexLock lock(&mu_);
  nodes_snapshot_ = map_.nodes;
  stats_.map_epoch = map_.epoch;
  return map_.epoch;
}

void Scheduler::Impl::TakePlace(const NodeInfo& info, NodeId dead, const std::string& identity) {
  map_.nodes.erase(std::remove_if(map_.nodes.begin(), map_.nodes.end(),
                                  [&](const NodeInfo& n) { return n.id == dead; }),
                   map_.nodes.end());
  map_.tags.erase(dead);
  map_.nodes.push_back(info);
  map_.tags[info.id] = RandomHex(16);
  identities_[identity] = info.id;
  members_[info.id] = Member{NowMs(), false};
  layerps::pb::Control reply;
  auto* rr = reply.mutable_register_reply();
  rr->set_ok(true);
  rr->set_id(info.id);
  rr->set_rank(info.rank);
  rr->set_tag(map_.tags[info.id]);
  SendControl(info.id, reply);
}

const NodeInfo* Scheduler::Impl::DeadWorker(int rank) const {
  const NodeInfo* best = nullptr;
  for (const NodeInfo& n : map_.nodes) {
    if (n.role != Role::kWorker || n.alive || members_.at(n.id).left) continue;
    if (rank >= 0 && static_cast<int>(n.rank) != rank) continue;
    if (best == nullptr || n.rank < best->rank) best = &n;
  }
  return best;
}

int Scheduler::Impl::LiveWorkers() const {
  int live = 0;
  for (const NodeInfo& n : map_.nodes) {
    if (n.role == Role::kWorker && n.alive) ++live;
  }
  return live;
}

std::string Scheduler::Impl::PlaceLateWorker(int requested_rank, int* rank,
                                             const NodeInfo** dead) const {
  const int live = LiveWorkers();
  const int max = options_.MaxWorkers();
  if (live >= max) {
    return "all " + std::to_string(max) + " worker slots are taken (" + std::to_string(live) +
           " live workers, max_workers=" + std::to_string(max) + ")";
  }
  *dead = DeadWorker(requested_rank);
  if (*dead != nullptr) {
    *rank = static_cast<int>((*dead)->rank);
    return "";
  }
  if (requested_rank >= 0) {
    for (const NodeInfo& n : map_.nodes) {
      if (n.role != Role::kWorker || static_cast<int>(n.rank) != requested_rank) continue;
      return "worker rank " + std::to_string(requested_rank) +
             (n.alive ? " is alive" : " left the job") +
             "; a restarted worker takes the rank of a dead one" +
             (options_.elastic() ? ", a new one a rank no worker held" : "");
    }
    if (!options_.elastic()) {
      return "worker rank " + std::to_string(requested_rank) + " is not a dead worker's rank";
    }
    *rank = requested_rank;
    return "";
  }
  if (!options_.elastic()) return "the cluster is already complete";
  int free = 0;
  while (RankTaken(Role::kWorker, free)) ++free;  // the lowest rank no worker held
  *rank = free;
  return "";
}

bool Scheduler::Impl::BelowMinWorkers(const std::string& who) {
  const int live = LiveWorkers();
  if (options_.min_workers <= 0 || live >= options_.min_workers || done_) return false;
  FailJob(Unavailable(who + "; " + std::to_string(live) + " live worker(s) left, fewer than "
                      "min_workers=" + std::to_string(options_.min_workers) +
                      ": the job ends"));
  return true;
}

void Scheduler::Impl::AcceptRestartedWorker(NodeInfo info, NodeId dead,
                                            const std::string& identity) {
  TakePlace(info, dead, identity);
  if (dead_workers_ > 0) --dead_workers_;
  LOG(INFO) << "worker rank " << info.rank << " (node " << info.id << ") at " << info.endpoint
            << " takes the place of the rank's dead node " << dead;
  BroadcastMap();
}

}  // namespace ps
