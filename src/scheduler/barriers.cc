// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/barriers.h"

#include <algorithm>
#include <string>

#include "layerps.pb.h"

namespace ps {

void Barriers::Forget(NodeId node) {
  for (auto& kv : waiting_) {
    auto& w = kv.second;
    w.erase(std::remove_if(w.begin(), w.end(), [node](const Waiter& x) { return x.node == node; }),
            w.end());
  }
  for (auto& kv : waiting_) CheckBarrier(kv.first);
}

std::set<NodeId> Barriers::GroupMembers(Group g) {
  std::set<NodeId> m;
  for (const auto& n : state_->map().nodes) {
    if (!n.alive || n.id == kSchedulerId) continue;
    if ((g == Group::kWorkers || g == Group::kAll) && n.role == Role::kWorker) m.insert(n.id);
    if ((g == Group::kServers || g == Group::kAll) && n.role == Role::kServer) m.insert(n.id);
  }
  return m;
}

void Barriers::ReplyBarrier(const Waiter& w, const Status& s) {
  const NodeInfo* n = state_->map().FindNode(w.node);
  if (n == nullptr || !n->alive) return;
  layerps::pb::Control c;
  auto* r = c.mutable_barrier_reply();
  r->set_request_id(w.call_id);
  r->set_code(static_cast<int>(s.code()));
  r->set_error(s.message());
  state_->Send(w.node, c);
}

void Barriers::HandleBarrier(NodeId from, const layerps::pb::Barrier& b) {
  const Group g = static_cast<Group>(b.group());
  if (g != Group::kWorkers && g != Group::kServers && g != Group::kAll) {
    ReplyBarrier({from, b.request_id()}, InvalidArgument("unknown barrier group"));
    return;
  }
  if (!GroupMembers(g).count(from)) {
    ReplyBarrier({from, b.request_id()}, InvalidArgument("node is not in the barrier's group"));
    return;
  }
  waiting_[g].push_back({from, b.request_id()});
  CheckBarrier(g);
}

void Barriers::CheckBarrier(Group g) {
  auto& waiters = waiting_[g];
  if (waiters.empty()) return;
  std::set<NodeId> arrived;
  for (const auto& w : waiters) arrived.insert(w.node);
  for (NodeId m : GroupMembers(g)) {
    if (!arrived.count(m)) return;
  }
  for (const auto& w : waiters) ReplyBarrier(w, Status::OK());
  waiters.clear();
}

void Barriers::FailAll(const Status& why) {
  for (auto& kv : waiting_) {
    for (const auto& w : kv.second) ReplyBarrier(w, why);
    kv.second.clear();
  }
}

}  // namespace ps
