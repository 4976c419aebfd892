// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/fault_transport.h"

#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps {

int FaultInjector::AddRule(FaultRule rule) {
  MutexLock lock(&mu_);
  const int id = next_id_++;
  rules_[id] = Entry{std::move(rule), 0};
  return id;
}

void FaultInjector::RemoveRule(int id) {
  MutexLock lock(&mu_);
  rules_.erase(id);
}

void FaultInjector::ClearRules() {
  MutexLock lock(&mu_);
  rules_.clear();
}

int64_t FaultInjector::Applied(int id) const {
  MutexLock lock(&mu_);
  auto it = rules_.find(id);
  return it == rules_.end() ? 0 : it->second.applied;
}

void FaultInjector::Isolate(NodeId node) {
  MutexLock lock(&mu_);
  isolated_.insert(node);
}

void FaultInjector::Heal(NodeId node) {
  MutexLock lock(&mu_);
  isolated_.erase(node);
}

FaultInjector::Decision FaultInjector::Decide(NodeId peer, const Message& msg) {
  MutexLock lock(&mu_);
  Decision d;
  if (isolated_.count(peer) || isolated_.count(msg.header.sender)) {
    d.act = true;
    d.action = FaultAction::kDrop;
    return d;
  }
  for (auto& kv : rules_) {
    Entry& e = kv.second;
    if (e.rule.times >= 0 && e.applied >= e.rule.times) continue;
    if (e.rule.match && !e.rule.match(peer, msg)) continue;
    ++e.applied;
    d.act = true;
    d.action = e.rule.action;
    d.delay_ms = e.rule.delay_ms;
    return d;
  }
  return d;
}

namespace {

// A held-back message still owed to a peer.
struct Pending {
  std::chrono::steady_clock::time_point due;
  NodeId peer;
  Message msg;
};

// A reordered message that no later message released is sent after this long anyway.
constexpr int kReorderFlushMs = 300;

class FaultTransport final : public Transport {
 public:
  FaultTransport(std::shared_ptr<FaultInjector> injector, std::unique_ptr<Transport> inner)
      : injector_(std::move(injector)), inner_(std::move(inner)) {}
  ~FaultTransport() override { Close(); }

  StatusOr<std::string> Bind(const std::string& address,
                             const std::string& advertise_host) override {
    return inner_->Bind(address, advertise_host);
  }
  Status Connect(NodeId peer, const std::string& endpoint, const std::string& identity) override {
    return inner_->Connect(peer, endpoint, identity);
  }
  void Disconnect(NodeId peer) override {
    {
      MutexLock lock(&mu_);
      held_.erase(peer);
    }
    inner_->Disconnect(peer);
  }
  bool IsConnected(NodeId peer) const override { return inner_->IsConnected(peer); }
  Status Recv(Message* msg, int timeout_ms) override { return inner_->Recv(msg, timeout_ms); }
  bool CanWakeRecv() const override { return inner_->CanWakeRecv(); }
  void WakeRecv() override { inner_->WakeRecv(); }
  void SetSharedMemoryPeers(std::vector<std::string> identities) override {
    inner_->SetSharedMemoryPeers(std::move(identities));
  }

  Status Send(NodeId peer, Message&& msg, int timeout_ms) override {
    const FaultInjector::Decision d = injector_->Decide(peer, msg);
    Status sent;
    if (!d.act) {
      sent = inner_->Send(peer, std::move(msg), timeout_ms);
    } else {
      switch (d.action) {
        case FaultAction::kDrop:
          return Status::OK();  // as lost on the wire: the sender is not told
        case FaultAction::kDuplicate: {
          Message copy = msg;  // shares the frames: the same bytes go twice
          sent = inner_->Send(peer, std::move(copy), timeout_ms);
          if (sent.ok()) sent = inner_->Send(peer, std::move(msg), timeout_ms);
          break;
        }
        case FaultAction::kDelay:
          Later(peer, std::move(msg), d.delay_ms);
          return Status::OK();
        case FaultAction::kReorder: {
          MutexLock lock(&mu_);
          held_[peer].push_back(std::move(msg));
          Schedule(kReorderFlushMs);
          return Status::OK();
        }
      }
    }
    // Messages held back for reordering follow the one that just went.
    ReleaseHeld(peer, timeout_ms);
    return sent;
  }

  void Close() override {
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      held_.clear();
      delayed_.clear();
    }
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
    inner_->Close();
  }

 private:
  void ReleaseHeld(NodeId peer, int timeout_ms) {
    std::deque<Message> held;
    {
      MutexLock lock(&mu_);
      auto it = held_.find(peer);
      if (it == held_.end()) return;
      held.swap(it->second);
      held_.erase(it);
    }
    for (auto& m : held) inner_->Send(peer, std::move(m), timeout_ms);
  }

  void Later(NodeId peer, Message&& msg, int delay_ms) {
    MutexLock lock(&mu_);
    if (closed_) return;
    delayed_.push_back(
        Pending{std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms), peer,
                std::move(msg)});
    Schedule(0);
  }

  // Starts the timer thread if needed and wakes it.
  void Schedule(int /*hint_ms*/) REQUIRES(mu_) {
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    cv_.SignalAll();
  }

  void Loop() {
    MutexLock lock(&mu_);
    while (!closed_) {
      const auto now = std::chrono::steady_clock::now();
      std::vector<Pending> due;
      auto next = now + std::chrono::milliseconds(kReorderFlushMs);
      for (auto it = delayed_.begin(); it != delayed_.end();) {
        if (it->due <= now) {
          due.push_back(std::move(*it));
          it = delayed_.erase(it);
        } else {
          next = std::min(next, it->due);
          ++it;
        }
      }
      std::vector<NodeId> stale;
      if (now - last_flush_ >= std::chrono::milliseconds(kReorderFlushMs)) {
        for (auto& kv : held_) stale.push_back(kv.first);
        last_flush_ = now;
      }
      lock.Unlock();
      for (auto& p : due) inner_->Send(p.peer, std::move(p.msg), 1000);
      for (NodeId peer : stale) ReleaseHeld(peer, 1000);
      lock.Lock();
      if (closed_) break;
      cv_.WaitUntil(&mu_, next);
    }
  }

  const std::shared_ptr<FaultInjector> injector_;
  const std::unique_ptr<Transport> inner_;
  Mutex mu_;
  CondVar cv_;
  std::unordered_map<NodeId, std::deque<Message>> held_ GUARDED_BY(mu_);
  std::deque<Pending> delayed_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_flush_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Transport> FaultInjector::Create(const TransportOptions& options) {
  return std::make_unique<FaultTransport>(shared_from_this(), inner_->Create(options));
}

}  // namespace ps
