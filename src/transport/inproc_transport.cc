// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/inproc_transport.h"

#include <glog/logging.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <unordered_map>

namespace ps {

// A bound node's receive queue.
struct InProcessNetwork::Endpoint {
  explicit Endpoint(size_t limit, int64_t max_bytes) : limit(limit), max_bytes(max_bytes) {}
  const size_t limit;
  const int64_t max_bytes;
  Mutex mu;
  CondVar readable;
  CondVar writable;
  std::deque<Message> queue GUARDED_BY(mu);
  bool closed GUARDED_BY(mu) = false;
  bool woken GUARDED_BY(mu) = false;  // WakeRecv: the current or next Recv returns
};

Status InProcessNetwork::BindEndpoint(const std::string& name, std::shared_ptr<Endpoint> endpoint) {
  MutexLock lock(&mu_);
  auto it = endpoints_.find(name);
  if (it != endpoints_.end() && !it->second.expired()) {
    return Unavailable("cannot bind '" + name + "': address in use");
  }
  endpoints_[name] = endpoint;
  return Status::OK();
}

void InProcessNetwork::UnbindEndpoint(const std::string& name) {
  MutexLock lock(&mu_);
  endpoints_.erase(name);
}

std::shared_ptr<InProcessNetwork::Endpoint> InProcessNetwork::Resolve(
    const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = endpoints_.find(name);
  return it == endpoints_.end() ? nullptr : it->second.lock();
}

std::string InProcessNetwork::FreshName() {
  MutexLock lock(&mu_);
  return "inproc://mem-" + std::to_string(next_name_++);
}

namespace {

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<InProcessNetwork> net, const TransportOptions& options)
      : net_(std::move(net)), max_message_bytes_(options.max_message_bytes) {}
  ~InProcessTransport() override { Close(); }

  StatusOr<std::string> Bind(const std::string& address, const std::string&) override {
    MutexLock lock(&mu_);
    if (self_) return FailedPrecondition("transport already bound");
    if (closed_) return Aborted("transport closed");
    if (address.rfind("inproc://", 0) != 0) {
      return InvalidArgument("the in-process transport binds inproc:// addresses, not '" + address +
                             "'");
    }
    std::string name = address;
    if (name == "inproc://" || (name.size() >= 2 && name.compare(name.size() - 2, 2, ":0") == 0)) {
      name = net_->FreshName();
    }
    auto ep = std::make_shared<InProcessNetwork::Endpoint>(net_->queue_limit(), max_message_bytes_);
    PS_RETURN_IF_ERROR(net_->BindEndpoint(name, ep));
    self_ = std::move(ep);
    name_ = name;
    return name;
  }

  Status Connect(NodeId peer, const std::string& endpoint, const std::string& identity) override {
    if (identity.empty() || identity.size() > 255 || identity[0] == '\0') {
      return InvalidArgument("bad routing identity");
    }
    MutexLock lock(&mu_);
    if (closed_) return Aborted("transport closed");
    peers_[peer] = Peer{endpoint, identity};
    return Status::OK();
  }

  void Disconnect(NodeId peer) override {
    MutexLock lock(&mu_);
    peers_.erase(peer);
  }

  bool IsConnected(NodeId peer) const override {
    MutexLock lock(&mu_);
    return peers_.count(peer) != 0;
  }

  Status Send(NodeId peer, Message&& msg, int timeout_ms) override {
    Peer p;
    {
      MutexLock lock(&mu_);
      if (closed_) return Aborted("transport closed");
      auto it = peers_.find(peer);
      if (it == peers_.end()) return Unavailable("no connection to node " + std::to_string(peer));
      p = it->second;
    }
    // As with a socket whose peer is gone, what is sent to an endpoint nobody holds is
    // lost (and its frames released at once): the sender learns of it by timeouts.
    std::shared_ptr<InProcessNetwork::Endpoint> ep = net_->Resolve(p.endpoint);
    if (!ep) return Status::OK();
    uint64_t bytes = sizeof(Header);
    for (const auto& f : msg.frames) bytes += f.size();
    if (bytes > static_cast<uint64_t>(ep->max_bytes)) {
      LOG_EVERY_N(WARNING, 100) << "in-process message of " << bytes
                                << " bytes dropped: over the receiver's max_message_bytes";
      return Status::OK();
    }
    // The header goes through its wire form, so the receiver checks it as it would a
    // header read from a socket.
    Message in;
    Status parsed = ParseHeader(&msg.header, sizeof(Header), &in.header);
    in.frames = std::move(msg.frames);
    in.identity = p.identity;
    MutexLock lock(&ep->mu);
    if (!ep->writable.WaitFor(&ep->mu, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                               [&]() REQUIRES(ep->mu) { return ep->closed || ep->queue.size() < ep->limit; })) {
      return Unavailable("send queue to node " + std::to_string(peer) + " stayed full for " +
                         std::to_string(timeout_ms) + " ms");
    }
    if (ep->closed) return Status::OK();
    if (!parsed.ok()) in.header.magic = 0;  // delivered, then refused by Recv
    ep->queue.push_back(std::move(in));
    ep->readable.Signal();
    return Status::OK();
  }

  Status Recv(Message* msg, int timeout_ms) override {
    std::shared_ptr<InProcessNetwork::Endpoint> ep;
    {
      MutexLock lock(&mu_);
      if (!self_ || closed_) return Aborted("transport closed");
      ep = self_;
    }
    MutexLock lock(&ep->mu);
    if (!ep->readable.WaitFor(&ep->mu, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                               [&]() REQUIRES(ep->mu) {
                                 return ep->closed || ep->woken || !ep->queue.empty();
                               })) {
      return Timeout("no message");
    }
    ep->woken = false;
    if (ep->queue.empty()) return ep->closed ? Aborted("transport closed") : Timeout("woken");
    *msg = std::move(ep->queue.front());
    ep->queue.pop_front();
    ep->writable.Signal();
    if (msg->header.magic != kMagic) return ProtocolError("malformed header");
    return Status::OK();
  }

  bool CanWakeRecv() const override { return true; }
  void WakeRecv() override {
    std::shared_ptr<InProcessNetwork::Endpoint> ep;
    {
      MutexLock lock(&mu_);
      ep = self_;
    }
    if (!ep) return;
    MutexLock lock(&ep->mu);
    ep->woken = true;
    ep->readable.SignalAll();
  }

  void Close() override {
    std::shared_ptr<InProcessNetwork::Endpoint> ep;
    std::string name;
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      peers_.clear();
      ep = std::move(self_);
      name = name_;
    }
    if (!ep) return;
    net_->UnbindEndpoint(name);
    std::deque<Message> dropped;
    {
      MutexLock lock(&ep->mu);
      ep->closed = true;
      dropped.swap(ep->queue);
    }
    ep->readable.SignalAll();
    ep->writable.SignalAll();
    // `dropped` releases the senders' frames here, outside the lock.
  }

 private:
  struct Peer {
    std::string endpoint;
    std::string identity;
  };
  const std::shared_ptr<InProcessNetwork> net_;
  const int64_t max_message_bytes_;
  mutable Mutex mu_;
  std::shared_ptr<InProcessNetwork::Endpoint> self_ GUARDED_BY(mu_);
  std::string name_ GUARDED_BY(mu_);
  std::unordered_map<NodeId, Peer> peers_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<Transport> InProcessNetwork::Create(const TransportOptions& options) {
  return std::make_unique<InProcessTransport>(shared_from_this(), options);
}

}  // namespace ps
