// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A server handles each data request on its receive thread, in arrival order: the checks
// every request passes (server/request.h), then the synchronization policy
// (server/sync_policy.h), which applies it to the store (server/store.h) and answers.
// Large updates fan out over TBB inside the store.
#include "ps/server.h"

#include <glog/logging.h>

#include <atomic>
#include <cstring>
#include <shared_mutex>

#include "node/node_runtime.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"

namespace ps {

namespace {
constexpr int kReplySendTimeoutMs = 1000;
}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options) : options_(std::move(options)) {}

  Status Start() {
    if (started_) return FailedPrecondition("server already started (a Server starts once)");
    NodeRuntime::Handlers h;
    h.on_map = [this](const std::shared_ptr<const ClusterMap>& map) { return InstallMap(*map); };
    runtime_ = std::make_unique<NodeRuntime>(options_, Role::kServer, std::move(h));
    for (MsgType t : {MsgType::kPush, MsgType::kPull, MsgType::kPushPull, MsgType::kAssign}) {
      runtime_->Handle(t, [this](Message&& m) { HandleData(std::move(m)); });
    }
    Status s = runtime_->Start();
    if (!s.ok()) {
      runtime_.reset();
      return s;
    }
    started_ = true;  // from here on runtime_ is never replaced
    return s;
  }

  Status Join(std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("server not started");
    return runtime_->WaitShutdown(timeout);
  }

  void Stop() {
    if (started_) runtime_->Stop(/*send_leave=*/true);
  }

  NodeId id() const { return started_ ? runtime_->id() : kUnassignedId; }
  uint32_t rank() const { return started_ ? runtime_->rank() : 0; }
  std::string endpoint() const { return started_ ? runtime_->endpoint() : ""; }

  TrafficStats traffic() const { return started_ ? runtime_->traffic() : TrafficStats{}; }

  ServerStats stats() const {
    ServerStats s;
    s.messages_received = messages_.load();
    s.bad_messages = bad_.load() + (started_ ? runtime_->bad_messages() : 0);
    s.push_requests = pushes_.load();
    s.pull_requests = pulls_.load();
    s.bytes_received = bytes_in_.load();
    s.bytes_sent = bytes_out_.load();
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    s.sparse_rows = store_ ? store_->sparse_rows() : 0;
    return s;
  }

 private:
  std::vector<std::pair<TableId, Status>> InstallMap(const ClusterMap& map) {
    std::unique_lock<std::shared_mutex> lock(store_mu_);
    if (!store_) store_ = std::make_unique<Store>(runtime_->id());
    std::vector<std::pair<TableId, Status>> failed;
    for (const auto& kv : map.tables) {
      Status s = store_->Install(kv.second);
      if (!s.ok()) {
        LOG(ERROR) << "cannot install table " << kv.second.spec.name << ": " << s;
        failed.emplace_back(kv.first, s);
      }
    }
    epoch_ = map.epoch;
    return failed;
  }

  void Reply(const Header& req, const Status& status, std::vector<Frame> frames) {
    Message r;
    r.header = req;
    r.header.type = static_cast<uint16_t>(MsgType::kReply);
    r.header.status = static_cast<int32_t>(status.code());
    if (!status.ok()) {
      frames.clear();
      const std::string& text = status.message();
      frames.push_back(Frame::Copy(text.data(), std::min<size_t>(text.size(), 4096)));
    }
    for (const auto& f : frames) bytes_out_ += f.size();
    r.frames = std::move(frames);
    // A worker that cannot take its reply within a second is not worth stalling every
    // other request for: the reply is dropped and that worker's request times out.
    Status s = runtime_->Send(req.sender, std::move(r), kReplySendTimeoutMs);
    if (!s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "reply to node " << req.sender << " failed: " << s;
    }
  }

  // Out of memory while serving one request fails that request, not the server.
  void HandleData(Message&& msg) {
    try {
      HandleDataUnguarded(std::move(msg));
    } catch (const std::bad_alloc&) {
      ++bad_;
      LOG_EVERY_N(ERROR, 100) << "out of memory serving a request of node " << msg.header.sender;
      Reply(msg.header, ResourceExhausted("the server ran out of memory for this request"), {});
    }
  }

  void HandleDataUnguarded(Message&& msg) {
    ++messages_;
    const Header h = msg.header;
    std::shared_lock<std::shared_mutex> lock(store_mu_);
    DataRequest req;
    Status valid = !store_
                       ? Unavailable("this server has not received the cluster map yet")
                       : CheckRequest(std::move(msg), *store_, epoch_,
                                      static_cast<uint64_t>(options_.max_message_bytes) / 4, &req);
    if (!valid.ok()) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "refused a request from node " << h.sender << ": " << valid;
      Reply(h, valid, {});
      return;
    }
    if (req.pushes) ++pushes_;
    if (req.pulls) ++pulls_;
    for (const auto& f : req.frames) bytes_in_ += f.size();
    policy_->Handle(std::move(req), *store_,
                    [this](const Header& rh, const Status& s, std::vector<Frame> frames) {
                      if (!s.ok()) ++bad_;
                      Reply(rh, s, std::move(frames));
                    });
  }

  const ServerOptions options_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::atomic<bool> started_{false};  // runtime_ is read by other threads only once set
  mutable std::shared_mutex store_mu_;
  std::unique_ptr<Store> store_;  // guarded by store_mu_ (installs exclusive, requests shared)
  const std::unique_ptr<SyncPolicy> policy_ = NewApplyOnArrival();  // receive thread only
  uint64_t epoch_ = 0;                                              // guarded by store_mu_
  std::atomic<uint64_t> messages_{0}, bad_{0}, pushes_{0}, pulls_{0}, bytes_in_{0}, bytes_out_{0};
};

Server::Server(ServerOptions options) : impl_(new Impl(std::move(options))) {}
Server::~Server() { impl_->Stop(); }
Status Server::Start() { return impl_->Start(); }
Status Server::Join(std::chrono::milliseconds timeout) { return impl_->Join(timeout); }
void Server::Stop() { impl_->Stop(); }
NodeId Server::id() const { return impl_->id(); }
uint32_t Server::rank() const { return impl_->rank(); }
std::string Server::endpoint() const { return impl_->endpoint(); }
ServerStats Server::stats() const { return impl_->stats(); }
TrafficStats Server::traffic() const { return impl_->traffic(); }

}  // namespace ps
