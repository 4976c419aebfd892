// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/server_failover.h"

namespace ps {

void ServerFailover::Route(NodeId server,
                           const std::function<void(NodeId server, bool held)>& record) const {
  MutexLock lock(&mu_);
  auto moved = replaced_.find(server);
  if (moved != replaced_.end()) server = moved->second;  // built from an older map
  record(server, parked_.count(server) > 0);
}

void ServerFailover::Park(NodeId server, uint32_t rank, NodeId successor) {
  MutexLock lock(&mu_);
  parked_[server] = ParkedServer{rank, successor};
}

bool ServerFailover::IsParked(NodeId server) const {
  MutexLock lock(&mu_);
  return parked_.count(server) > 0;
}

std::map<NodeId, ServerFailover::ParkedServer> ServerFailover::Parked() const {
  MutexLock lock(&mu_);
  return parked_;
}

void ServerFailover::Retarget(NodeId dead, NodeId fresh, const std::function<void()>& collect) {
  MutexLock lock(&mu_);
  parked_.erase(dead);
  replaced_[dead] = fresh;
  for (auto& kv : replaced_) {
    if (kv.second == dead) kv.second = fresh;  // a replacement that died in turn
  }
  if (collect) collect();
}

}  // namespace ps
