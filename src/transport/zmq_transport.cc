// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ZeroMQ transport: one ROUTER socket receives everything sent to this node; one
// DEALER socket per peer sends (guarded by its own mutex, so any thread may send).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <zmq.hpp>

#include <glog/logging.h>

#include "transport/transport.h"

namespace ps {
namespace {

// inproc:// endpoints only reach sockets of the same ZeroMQ context, so every node of a
// process that uses inproc shares this one. tcp and ipc nodes own their contexts.
std::shared_ptr<zmq::context_t> InprocContext() {
  static std::shared_ptr<zmq::context_t> ctx = std::make_shared<zmq::context_t>(1);
  return ctx;
}

bool IsInproc(const std::string& a) { return a.rfind("inproc://", 0) == 0; }

// Releases a frame's owner once ZeroMQ is done with its bytes.
void ReleaseOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// Frames at or below this size are copied into the ZeroMQ message (cheaper than
// tracking an owner); bigger ones are sent in place.
constexpr size_t kCopyBelow = 512;

zmq::message_t ToZmq(const Frame& f) {
  if (f.size() <= kCopyBelow || !f.owner()) return zmq::message_t(f.data(), f.size());
  auto* hint = new std::shared_ptr<const void>(f.owner());
  return zmq::message_t(const_cast<uint8_t*>(f.data()), f.size(), &ReleaseOwner, hint);
}

class ZmqTransport final : public Transport {
 public:
  explicit ZmqTransport(const Options& options) : options_(options) {}
  ~ZmqTransport() override { Close(); }

  StatusOr<std::string> Bind(const std::string& address,
                             const std::string& advertise_host) override {
    std::lock_guard<std::mutex> lock(setup_mu_);
    if (router_) return FailedPrecondition("transport already bound");
    try {
      ctx_ = IsInproc(address) ? InprocContext()
                               : std::make_shared<zmq::context_t>(options_.io_threads);
      router_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
      router_->set(zmq::sockopt::linger, 0);
      router_->set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
      router_->set(zmq::sockopt::rcvhwm, 100000);
      router_->bind(address);
      std::string bound = router_->get(zmq::sockopt::last_endpoint);
      // Advertise a reachable host instead of a wildcard.
      const std::string tcp = "tcp://";
      if (bound.rfind(tcp, 0) == 0) {
        const size_t colon = bound.rfind(':');
        std::string host = bound.substr(tcp.size(), colon - tcp.size());
        if (host == "0.0.0.0" || host == "*" || host == "[::]") {
          host = advertise_host;
          if (host.empty()) {
            char name[256] = {0};
            gethostname(name, sizeof(name) - 1);
            host = name;
          }
        }
        bound = tcp + host + bound.substr(colon);
      }
      endpoint_ = bound;
      return bound;
    } catch (const zmq::error_t& e) {
      router_.reset();
      return Unavailable("cannot bind '" + address + "': " + e.what());
    }
  }

  Status Connect(NodeId peer, const std::string& endpoint) override {
    if (closed_) return Aborted("transport closed");
    {
      std::shared_lock<std::shared_mutex> lock(peers_mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end() && it->second->endpoint == endpoint) return Status::OK();
    }
    auto p = std::make_shared<Peer>();
    p->endpoint = endpoint;
    try {
      std::lock_guard<std::mutex> setup(setup_mu_);
      if (!ctx_) {
        ctx_ = IsInproc(endpoint) ? InprocContext()
                                  : std::make_shared<zmq::context_t>(options_.io_threads);
      }
      p->socket = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::dealer);
      p->socket->set(zmq::sockopt::linger, 2000);
      p->socket->set(zmq::sockopt::sndhwm, 100000);
      p->socket->set(zmq::sockopt::reconnect_ivl, 100);
      p->socket->connect(endpoint);
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot connect to '" + endpoint + "': " + e.what());
    }
    std::shared_ptr<Peer> old;
    {
      std::unique_lock<std::shared_mutex> lock(peers_mu_);
      auto& slot = peers_[peer];
      old = std::move(slot);
      slot = std::move(p);
    }
    if (old) CloseSocket(old.get(), 0);
    return Status::OK();
  }

  void Disconnect(NodeId peer) override {
    std::shared_ptr<Peer> old;
    {
      std::unique_lock<std::shared_mutex> lock(peers_mu_);
      auto it = peers_.find(peer);
      if (it == peers_.end()) return;
      old = std::move(it->second);
      peers_.erase(it);
    }
    CloseSocket(old.get(), 0);
  }

  bool IsConnected(NodeId peer) const override {
    std::shared_lock<std::shared_mutex> lock(peers_mu_);
    return peers_.count(peer) != 0;
  }

  Status Send(NodeId peer, Message&& msg, int timeout_ms) override {
    std::shared_ptr<Peer> p;
    {
      std::shared_lock<std::shared_mutex> lock(peers_mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end()) p = it->second;
    }
    if (!p) return Unavailable("no connection to node " + std::to_string(peer));
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->socket) return Unavailable("connection to node " + std::to_string(peer) + " closed");
    try {
      p->socket->set(zmq::sockopt::sndtimeo, timeout_ms);
      zmq::message_t head(&msg.header, sizeof(Header));
      const bool more = !msg.frames.empty();
      if (!p->socket->send(head, more ? zmq::send_flags::sndmore : zmq::send_flags::none)) {
        return Unavailable("send queue to node " + std::to_string(peer) + " stayed full for " +
                           std::to_string(timeout_ms) + " ms");
      }
      for (size_t i = 0; i < msg.frames.size(); ++i) {
        zmq::message_t part = ToZmq(msg.frames[i]);
        const bool last = i + 1 == msg.frames.size();
        // Parts after the first are never refused by the high-water mark.
        p->socket->send(part, last ? zmq::send_flags::none : zmq::send_flags::sndmore);
      }
    } catch (const zmq::error_t& e) {
      return Unavailable("send to node " + std::to_string(peer) + ": " + e.what());
    }
    return Status::OK();
  }

  Status Recv(Message* msg, int timeout_ms) override {
    if (!router_ || closed_) return Aborted("transport closed");
    zmq::pollitem_t item{static_cast<void*>(*router_), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
      if (!(item.revents & ZMQ_POLLIN)) return Timeout("no message");
      // Frame 0 is the sender's routing id (ROUTER adds it); then header and payload.
      std::vector<zmq::message_t> parts;
      bool more = true;
      while (more) {
        zmq::message_t part;
        if (!router_->recv(part, zmq::recv_flags::dontwait)) break;
        more = part.more();
        if (parts.size() <= kMaxFrames + 2) parts.push_back(std::move(part));
      }
      if (parts.size() < 2) return ProtocolError("message without a header frame");
      if (parts.size() > kMaxFrames + 2) return ProtocolError("message with too many frames");
      msg->frames.clear();
      PS_RETURN_IF_ERROR(ParseHeader(parts[1].data(), parts[1].size(), &msg->header));
      for (size_t i = 2; i < parts.size(); ++i) {
        auto owned = std::make_shared<zmq::message_t>(std::move(parts[i]));
        const void* data = owned->data();
        const size_t size = owned->size();
        msg->frames.push_back(Frame::Borrow(data, size, std::move(owned)));
      }
      return Status::OK();
    } catch (const zmq::error_t& e) {
      return Unavailable(std::string("receive: ") + e.what());
    }
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    std::unordered_map<NodeId, std::shared_ptr<Peer>> peers;
    {
      std::unique_lock<std::shared_mutex> lock(peers_mu_);
      peers.swap(peers_);
    }
    for (auto& kv : peers) CloseSocket(kv.second.get(), -1);
    std::lock_guard<std::mutex> lock(setup_mu_);
    if (router_) router_->close();
    router_.reset();
    // A private context is terminated when the last socket is gone (its destructor
    // waits for lingering sends, bounded by each socket's linger).
    ctx_.reset();
  }

 private:
  struct Peer {
    std::mutex mu;
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;  // guarded by mu
  };

  // linger_ms < 0 keeps the socket's own linger (lets queued control messages out).
  static void CloseSocket(Peer* p, int linger_ms) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->socket) return;
    if (linger_ms >= 0) p->socket->set(zmq::sockopt::linger, linger_ms);
    p->socket->close();
    p->socket.reset();
  }

  const Options options_;
  std::mutex setup_mu_;
  std::shared_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> router_;
  std::string endpoint_;
  std::atomic<bool> closed_{false};
  mutable std::shared_mutex peers_mu_;
  std::unordered_map<NodeId, std::shared_ptr<Peer>> peers_;  // guarded by peers_mu_
};

std::atomic<uint64_t> g_endpoint_counter{0};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(const Options& options) {
  return std::make_unique<ZmqTransport>(options);
}

std::string DefaultBindAddress(const std::string& bind, const std::string& scheduler_address) {
  if (!bind.empty()) return bind;
  const uint64_t n = g_endpoint_counter.fetch_add(1);
  if (scheduler_address.rfind("ipc://", 0) == 0) {
    return "ipc:///tmp/layerps-" + std::to_string(getpid()) + "-" + std::to_string(n) + ".sock";
  }
  if (IsInproc(scheduler_address)) {
    return "inproc://layerps-node-" + std::to_string(getpid()) + "-" + std::to_string(n);
  }
  return "tcp://127.0.0.1:0";
}

}  // namespace ps
