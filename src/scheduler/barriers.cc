// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/barriers.h"

#include <glog/logging.h>

#include <algorithm>
#include <string>

#include "layerps.pb.h"

namespace ps {

const char* Barriers::GroupName(int g) {
  switch (g) {
    case kJoin:
      return "join";
    case static_cast<int>(Group::kWorkers):
      return "barrier of the workers";
    case static_cast<int>(Group::kServers):
      return "barrier of the servers";
    default:
      return "barrier of all nodes";
  }
}

void Barriers::Forget(NodeId node) {
  const NodeInfo* n = state_->map().FindNode(node);
  if (n != nullptr && n->role == Role::kWorker && !joined_.count(node)) {
    if (tolerate_departures_) {
      LOG(WARNING) << "worker rank " << n->rank << " (node " << node
                   << ") left without join(); tolerate_worker_loss is on: barriers go on "
                      "without it";
    } else {
      deserted_[node] = n->rank;
    }
  }
  Drop(node);
}

void Barriers::Drop(NodeId node) {
  for (auto& kv : waiting_) {
    auto& w = kv.second.waiters;
    w.erase(std::remove_if(w.begin(), w.end(), [node](const Waiter& x) { return x.node == node; }),
            w.end());
  }
  for (auto& kv : waiting_) Check(kv.first);
}

std::set<NodeId> Barriers::GroupMembers(int g) const {
  std::set<NodeId> m;
  for (const auto& n : state_->map().nodes) {
    if (!n.alive || n.id == kSchedulerId) continue;
    const bool worker = n.role == Role::kWorker;
    if (g == kJoin) {
      if (worker) m.insert(n.id);
      continue;
    }
    if (worker && joined_.count(n.id)) continue;  // went on without it
    if ((g == static_cast<int>(Group::kWorkers) || g == static_cast<int>(Group::kAll)) && worker)
      m.insert(n.id);
    if ((g == static_cast<int>(Group::kServers) || g == static_cast<int>(Group::kAll)) &&
        n.role == Role::kServer)
      m.insert(n.id);
  }
  return m;
}

std::string Barriers::Missing(int g) const {
  std::set<NodeId> arrived;
  auto it = waiting_.find(g);
  if (it != waiting_.end()) {
    for (const auto& w : it->second.waiters) arrived.insert(w.node);
  }
  if (g == kJoin) arrived.insert(joined_.begin(), joined_.end());
  std::string out;
  for (NodeId m : GroupMembers(g)) {
    if (arrived.count(m)) continue;
    const NodeInfo* n = state_->map().FindNode(m);
    if (n == nullptr) continue;
    out += (out.empty() ? "" : ", ") + std::string(RoleName(n->role)) + " rank " +
           std::to_string(n->rank) + " (node " + std::to_string(m) + ")";
  }
  return out;
}

std::string Barriers::Broken(int g) const {
  if (g == kJoin || g == static_cast<int>(Group::kServers) || deserted_.empty()) return "";
  std::string ranks;
  for (const auto& kv : deserted_) ranks += (ranks.empty() ? "" : ", ") + std::to_string(kv.second);
  return std::string(GroupName(g)) + " can never complete: worker rank" +
         (deserted_.size() > 1 ? "s " : " ") + ranks +
         " left the cluster without join() (a worker that runs out of data must call "
         "join() so that the others go on without it)";
}

void Barriers::ReplyBarrier(const Waiter& w, const Status& s, uint32_t participants) {
  const NodeInfo* n = state_->map().FindNode(w.node);
  if (n == nullptr || !n->alive) return;
  layerps::pb::Control c;
  auto* r = c.mutable_barrier_reply();
  r->set_request_id(w.call_id);
  r->set_code(static_cast<int>(s.code()));
  r->set_error(s.message());
  r->set_participants(participants);
  state_->Send(w.node, c);
}

void Barriers::HandleBarrier(NodeId from, const layerps::pb::Barrier& b, int64_t now_ms) {
  const int g = static_cast<int>(b.group());
  const Waiter w{from, b.request_id(), now_ms,
                 b.timeout_ms() > 0 && b.timeout_ms() < (uint64_t{1} << 40)
                     ? now_ms + static_cast<int64_t>(b.timeout_ms())
                     : 0};
  if (g != static_cast<int>(Group::kWorkers) && g != static_cast<int>(Group::kServers) &&
      g != static_cast<int>(Group::kAll)) {
    ReplyBarrier(w, InvalidArgument("unknown barrier group"));
    return;
  }
  if (joined_.count(from)) {
    ReplyBarrier(w, FailedPrecondition("this worker has joined (Join): it takes no part in "
                                       "barriers any more"));
    return;
  }
  if (!GroupMembers(g).count(from)) {
    ReplyBarrier(w, InvalidArgument("node is not in the barrier's group"));
    return;
  }
  auto passed = passed_.find(static_cast<uint32_t>(g));
  if (b.seq() > 0 && passed != passed_.end() && b.seq() <= passed->second) {
    // Released by the scheduler before a restart; this node never got the answer.
    ReplyBarrier(w, Status::OK(), static_cast<uint32_t>(GroupMembers(g).size()));
    return;
  }
  auto& ws = waiting_[g].waiters;
  // The same call sent again (its request id: a node re-sends its unanswered calls to a
  // restarted scheduler) waits once. Two calls of one node are two waiters, even with the
  // same count (threads of one process may each be in a barrier).
  ws.erase(std::remove_if(ws.begin(), ws.end(),
                          [&](const Waiter& x) { return x.node == from && x.call_id == b.request_id(); }),
           ws.end());
  ws.push_back(w);
  Check(g);
}

void Barriers::HandleJoin(NodeId from, const layerps::pb::Join& j, int64_t now_ms) {
  const Waiter w{from, j.request_id(), now_ms,
                 j.timeout_ms() > 0 && j.timeout_ms() < (uint64_t{1} << 40)
                     ? now_ms + static_cast<int64_t>(j.timeout_ms())
                     : 0};
  const NodeInfo* n = state_->map().FindNode(from);
  if (n == nullptr || n->role != Role::kWorker) {
    ReplyBarrier(w, InvalidArgument("only a worker joins"));
    return;
  }
  if (!joined_.insert(from).second) {
    ReplyBarrier(w, FailedPrecondition("this worker has joined already"));
    return;
  }
  LOG(INFO) << "worker rank " << n->rank << " (node " << from << ") joined";
  // Barriers it was waiting in (another thread of it) go on without it.
  for (auto& kv : waiting_) {
    auto& ws = kv.second.waiters;
    for (auto it = ws.begin(); it != ws.end();) {
      if (it->node == from) {
        ReplyBarrier(*it, FailedPrecondition("the worker joined during the barrier"));
        it = ws.erase(it);
      } else {
        ++it;
      }
    }
  }
  layerps::pb::Control c;
  c.mutable_worker_joined()->set_id(from);
  c.mutable_worker_joined()->set_rank(n->rank);
  for (const auto& m : state_->map().nodes) {
    if (m.id != kSchedulerId && m.alive) state_->Send(m.id, c);
  }
  waiting_[kJoin].waiters.push_back(w);
  for (auto& kv : waiting_) Check(kv.first);
}

void Barriers::Check(int g) {
  auto& wait = waiting_[g];
  auto& waiters = wait.waiters;
  if (waiters.empty()) return;
  const std::string broken = Broken(g);
  if (!broken.empty()) {
    for (const auto& w : waiters) ReplyBarrier(w, Unavailable(broken));
    waiters.clear();
    return;
  }
  if (!Missing(g).empty()) return;
  uint32_t participants = 0;
  if (g == kJoin) {
    participants = static_cast<uint32_t>(joined_.size());
  } else {
    std::set<NodeId> arrived;
    for (const auto& w : waiters) arrived.insert(w.node);
    participants = static_cast<uint32_t>(arrived.size());
  }
  for (const auto& w : waiters) ReplyBarrier(w, Status::OK(), participants);
  waiters.clear();
  wait.last_warning_ms = 0;
  passed_.erase(static_cast<uint32_t>(g));
}

int Barriers::Tick(int64_t now_ms, int64_t stall_warning_ms) {
  int warnings = 0;
  for (auto& kv : waiting_) {
    const int g = kv.first;
    auto& wait = kv.second;
    auto& ws = wait.waiters;
    if (ws.empty()) continue;
    for (auto it = ws.begin(); it != ws.end();) {
      if (it->deadline_ms != 0 && now_ms >= it->deadline_ms) {
        const std::string missing = Missing(g);
        ReplyBarrier(*it, Timeout(std::string(GroupName(g)) + " timed out after " +
                                  std::to_string(now_ms - it->since_ms) + " ms waiting for " +
                                  (missing.empty() ? std::string("nobody") : missing)));
        it = ws.erase(it);
      } else {
        ++it;
      }
    }
    if (ws.empty() || stall_warning_ms <= 0) continue;
    int64_t oldest = ws.front().since_ms;
    for (const auto& w : ws) oldest = std::min(oldest, w.since_ms);
    if (now_ms - oldest < stall_warning_ms) continue;
    if (wait.last_warning_ms != 0 && now_ms - wait.last_warning_ms < stall_warning_ms) continue;
    wait.last_warning_ms = now_ms;
    ++warnings;
    LOG(WARNING) << "stall: " << GroupName(g) << " has waited " << (now_ms - oldest)
                 << " ms for " << Missing(g) << " (" << ws.size()
                 << " arrived; stall_warning_ms=" << stall_warning_ms << "); still waiting";
  }
  return warnings;
}

void Barriers::FailAll(const Status& why) {
  for (auto& kv : waiting_) {
    for (const auto& w : kv.second.waiters) ReplyBarrier(w, why);
    kv.second.waiters.clear();
  }
}

}  // namespace ps
