// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ZeroMQ transport: one ROUTER socket receives everything sent to this node; one
// DEALER socket per peer sends (guarded by its own mutex, so any thread may send).
//
// Streams: with Options::streams > 1, a message whose lane maps to stream k > 0
// (Message::lane % streams) goes on the peer's k-th DEALER, a connection of its own, made
// on first use. Its routing id is the peer's identity, a zero byte and k, which the
// receiver cuts back at the zero byte (identities contain none): the node sees one
// sender. Peers on the shared-memory path keep one stream (the segment is per
// connection, and the bytes do not cross a socket anyway).
//
// Same-host fast path: to a peer reached over ipc:// (so on this host), payload frames of
// kShmMinFrame bytes or more are copied into a shared-memory segment this node owns for
// that peer, and only their place travels over the socket: the message gets a manifest
// part in front of its header, and each such frame is sent as an empty part. The
// receiver maps the segment once and hands the bytes out in place (no socket copies);
// releasing the received Frame marks the block free for the sender to reuse. When the
// segment is full, or anything about it fails, frames take the socket as usual.
//
// A manifest names a file the receiver opens, maps and unlinks, so it is acted on only
// when shared memory is on here and only from a connection the node runtime listed as a
// member's (SetSharedMemoryPeers; routing identities, which a stranger cannot take,
// unlike the header's `sender`). Mappings are kept per connection: one live segment per
// member, and at most kShmMaxMappings in all (the receiving side: transport/shm_receiver.*).
//
// Chunked framing (CURVE clusters): libzmq reads a connection's handshake commands
// through the same decoder as its messages, under the receive socket's ZMQ_MAXMSGSIZE, so
// with a part limit of max_message_bytes a keyless stranger could make a node hold up to
// that much per connection before its handshake fails. Under CURVE every receive socket
// therefore takes parts of at most kCurvePartLimit bytes, and every payload frame travels
// as a run of parts: each part but the last exactly kChunkBytes long, the last one shorter
// (possibly empty), so a frame of n bytes is n / kChunkBytes + 1 parts. The receiver joins
// a run back into one frame (a copy, small beside the encryption). Header and manifest
// parts are always shorter than a chunk and go as they are.
#include <glog/logging.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <zmq.hpp>

#include "common/host.h"
#include "common/mutex.h"
#include "common/tsan.h"
#include "transport/curve.h"
#include "transport/shm_manifest.h"
#include "transport/shm_receiver.h"
#include "transport/shm_ring.h"
#include "transport/transport.h"

namespace ps {
namespace {

// ThreadSanitizer: libzmq (Debian's, not instrumented) hands messages between threads
// through its own lock-free queues, which TSan cannot see. Every part this transport gives
// to ZeroMQ is released on one sync address, and every message it takes from ZeroMQ (a
// received message, or a sent buffer's owner let go by an I/O thread) acquires it: the
// edges ZeroMQ's queues provide (common/tsan.h; libzmq's own code: tsan.supp).
char g_zmq_handoff;
void HandedToZmq() { TsanRelease(&g_zmq_handoff); }
void TakenFromZmq() { TsanAcquire(&g_zmq_handoff); }

// inproc:// endpoints only reach sockets of the same ZeroMQ context, so every node of a
// process that uses inproc shares this one. tcp and ipc nodes own their contexts.
std::shared_ptr<zmq::context_t> InprocContext() {
  static std::shared_ptr<zmq::context_t> ctx = std::make_shared<zmq::context_t>(1);
  return ctx;
}

bool IsInproc(const std::string& a) { return a.rfind("inproc://", 0) == 0; }

// Releases a frame's owner once ZeroMQ is done with its bytes.
void ReleaseOwner(void* /*data*/, void* hint) {
  TakenFromZmq();  // (a ZeroMQ I/O thread, done with the bytes)
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// Frames at or below this size are copied into the ZeroMQ message (cheaper than
// tracking an owner); bigger ones are sent in place.
constexpr size_t kCopyBelow = 512;

// Payload frames are handed to the node on this boundary (the widest wire element, a u64
// key): keys and values are read in place as arrays.
constexpr uintptr_t kFrameAlign = 8;

// The most parts a received message may have: the routing id, a manifest, the header and
// kMaxFrames payload frames (with chunked framing, plus its full chunks: those are bounded
// by max_message_bytes).
constexpr size_t kMaxParts = kMaxFrames + 3;

// Chunked framing (above): a full chunk, and the receive socket's part limit under CURVE.
// CURVE's MESSAGE command adds 33 bytes to a part; its largest handshake command
// (INITIATE, with the metadata) stays well below 1 KiB.
constexpr size_t kChunkBytes = 64 << 10;
constexpr int64_t kCurvePartLimit = kChunkBytes + 1024;

// Bytes [offset, offset + size) of a frame as a ZeroMQ part.
zmq::message_t ToZmq(const Frame& f, size_t offset, size_t size) {
  const uint8_t* data = f.data() + offset;
  if (size <= kCopyBelow || !f.owner()) return zmq::message_t(data, size);
  auto* hint = new std::shared_ptr<const void>(f.owner());
  return zmq::message_t(const_cast<uint8_t*>(data), size, &ReleaseOwner, hint);
}

// Hands one part to ZeroMQ (after its bytes were written: the TSan edge above).
bool SendPart(zmq::socket_t* socket, zmq::message_t& part, zmq::send_flags flags) {
  HandedToZmq();
  return socket->send(part, flags).has_value();
}

// Sends a message's header and payload frames on `socket` (the header blocks up to the
// socket's send timeout when the peer's queue is full; parts after it never do). false:
// the queue stayed full, nothing was sent. Frames listed in `shm` (by index, ascending)
// go as empty parts: their bytes are in shared memory. `chunked`: the receiver takes
// chunked framing (top of this file).
bool SendParts(zmq::socket_t* socket, const Message& msg, const std::vector<ShmEntry>& shm,
               bool chunked) {
  zmq::message_t head(&msg.header, sizeof(Header));
  const bool more = !msg.frames.empty();
  if (!SendPart(socket, head, more ? zmq::send_flags::sndmore : zmq::send_flags::none)) return false;
  size_t next_entry = 0;
  for (size_t i = 0; i < msg.frames.size(); ++i) {
    const bool last = i + 1 == msg.frames.size();
    const auto flags = last ? zmq::send_flags::none : zmq::send_flags::sndmore;
    if (next_entry < shm.size() && shm[next_entry].frame == i) {
      ++next_entry;
      zmq::message_t empty;  // the bytes are in shared memory
      SendPart(socket, empty, flags);
      continue;
    }
    const Frame& f = msg.frames[i];
    if (!chunked) {
      zmq::message_t part = ToZmq(f, 0, f.size());
      SendPart(socket, part, flags);
      continue;
    }
    size_t offset = 0;
    for (; f.size() - offset >= kChunkBytes; offset += kChunkBytes) {
      zmq::message_t part = ToZmq(f, offset, kChunkBytes);
      SendPart(socket, part, zmq::send_flags::sndmore);
    }
    zmq::message_t tail = ToZmq(f, offset, f.size() - offset);  // shorter than a chunk
    SendPart(socket, tail, flags);
  }
  return true;
}

// Joins a run of received parts (chunked framing) into one frame on kFrameAlign.
Frame JoinParts(std::vector<zmq::message_t>::iterator begin,
                std::vector<zmq::message_t>::iterator end) {
  size_t size = 0;
  for (auto it = begin; it != end; ++it) size += it->size();
  std::shared_ptr<uint64_t[]> bytes(new uint64_t[(size + 7) / 8]);
  uint8_t* out = reinterpret_cast<uint8_t*>(bytes.get());
  for (auto it = begin; it != end; ++it) {
    if (it->size() > 0) std::memcpy(out, it->data(), it->size());
    out += it->size();
  }
  const void* data = bytes.get();
  return Frame::Borrow(data, size, std::shared_ptr<const void>(std::move(bytes), data));
}

class ZmqTransport final : public Transport {
 public:
  explicit ZmqTransport(const TransportOptions& options)
      : options_(options), streams_(std::max(options.streams, 1)) {
    if (!options_.curve_key_file.empty()) {
      StatusOr<CurveKeys> keys = LoadCurveKeys(options_.curve_key_file);
      if (keys.ok()) {
        curve_ = std::make_unique<CurveKeys>(*keys);
      } else {
        curve_error_ = keys.status();
      }
    }
  }
  ~ZmqTransport() override {
    Close();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  StatusOr<std::string> Bind(const std::string& address,
                             const std::string& advertise_host) override {
    MutexLock lock(&setup_mu_);
    if (router_) return FailedPrecondition("transport already bound");
    if (!curve_error_.ok()) return curve_error_;
    try {
      if (!ctx_) PS_RETURN_IF_ERROR(MakeContext(address));
      router_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
      router_->set(zmq::sockopt::linger, 0);
      if (curve_ && !IsInproc(address)) {
        // Every connection to this node must complete a CURVE handshake with the
        // cluster's key (see transport/curve.h); plaintext peers are not answered.
        router_->set(zmq::sockopt::curve_server, true);
        router_->set(zmq::sockopt::curve_secretkey, curve_->secret_z85);
      }
      // Under CURVE, small parts (chunked framing, top of this file): what a stranger's
      // handshake can make this node hold is one part of kCurvePartLimit per connection.
      chunked_ = curve_ && !IsInproc(address);
      router_->set(zmq::sockopt::maxmsgsize,
                   chunked_ ? kCurvePartLimit : options_.max_message_bytes);
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
          if (host.empty()) host = LocalHostname();
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

  Status Connect(NodeId peer, const std::string& endpoint, const std::string& identity) override {
    if (identity.empty() || identity.size() > 255 || identity.find('\0') != std::string::npos) {
      return InvalidArgument("bad routing identity");
    }
    {
      ReaderLock lock(&peers_mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end() && it->second->endpoint == endpoint &&
          it->second->identity == identity) {
        return Status::OK();
      }
    }
    auto p = std::make_shared<Peer>();
    p->endpoint = endpoint;
    p->identity = identity;
    p->same_host = endpoint.rfind("ipc://", 0) == 0 && shm_enabled_;
    p->chunked = curve_ && !IsInproc(endpoint);
    // The extra streams' identities need two more bytes.
    p->streams = p->same_host || identity.size() > 253 ? 1 : streams_;
    std::shared_ptr<Peer> old;
    // setup_mu_ is held until the peer is published, and Close() sets closed_ under it:
    // a socket is either visible to Close() or never created after it.
    MutexLock setup(&setup_mu_);
    if (closed_) return Aborted("transport closed");
    {
      // Threads that send to a peer for the first time race here: the first one
      // connects, the others must use its socket. (Replacing it would discard, with
      // linger 0, what the first one already queued on it.)
      ReaderLock lock(&peers_mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end() && it->second->endpoint == endpoint &&
          it->second->identity == identity) {
        return Status::OK();
      }
    }
    if (!curve_error_.ok()) return curve_error_;
    try {
      if (!ctx_) PS_RETURN_IF_ERROR(MakeContext(endpoint));
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot connect to '" + endpoint + "': " + e.what());
    }
    p->ctx = ctx_;
    StatusOr<std::unique_ptr<zmq::socket_t>> socket = NewDealer(*ctx_, endpoint, identity);
    if (!socket.ok()) return socket.status();
    {
      MutexLock lock(&p->mu);  // not shared yet; taken for the analysis' sake
      p->socket = std::move(*socket);
    }
    {
      WriterLock lock(&peers_mu_);
      auto& slot = peers_[peer];
      old = std::move(slot);
      slot = std::move(p);
    }
    if (old) CloseSocket(old.get(), 0);
    return Status::OK();
  }

  void Disconnect(NodeId peer) override {
    // (Mappings of what the peer sent us are dropped when it leaves the member list.)
    std::shared_ptr<Peer> old;
    {
      WriterLock lock(&peers_mu_);
      auto it = peers_.find(peer);
      if (it == peers_.end()) return;
      old = std::move(it->second);
      peers_.erase(it);
    }
    CloseSocket(old.get(), 0);
  }

  bool IsConnected(NodeId peer) const override {
    ReaderLock lock(&peers_mu_);
    return peers_.count(peer) != 0;
  }

  Status Send(NodeId peer, Message&& msg, int timeout_ms) override {
    std::shared_ptr<Peer> p;
    {
      ReaderLock lock(&peers_mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end()) p = it->second;
    }
    if (!p) return Unavailable("no connection to node " + std::to_string(peer));
    const uint32_t stream = msg.lane % static_cast<uint32_t>(p->streams);
    if (stream != 0) return SendOnStream(peer, p.get(), stream, msg, timeout_ms);
    MutexLock lock(&p->mu);
    if (!p->socket) return Unavailable("connection to node " + std::to_string(peer) + " closed");
    // Same host: big frames go into shared memory; the manifest says where.
    std::vector<ShmEntry> entries;
    // Data messages only: control messages are small, and the scheduler (which maps
    // nothing) must be able to read them.
    if (p->same_host && !p->shm_failed && msg.header.msg_type() != MsgType::kControl) {
      for (size_t i = 0; i < msg.frames.size(); ++i) {
        const Frame& f = msg.frames[i];
        if (f.size() < kShmMinFrame || f.size() > kShmMaxFrame) continue;
        if (!p->shm) {
          p->shm = std::make_unique<ShmSender>();
          if (!p->shm->Init()) {
            p->shm.reset();
            p->shm_failed = true;
            LOG(WARNING) << "no shared memory for node " << peer << "; using the socket only";
            break;
          }
        }
        ShmEntry e;
        if (!p->shm->Put(f, static_cast<uint32_t>(i), &e)) break;  // full: the rest by socket
        entries.push_back(e);
      }
    }
    try {
      p->socket->set(zmq::sockopt::sndtimeo, timeout_ms);
      if (!entries.empty()) {
        const std::string bytes = EncodeShmManifest(p->shm->name(), entries);
        zmq::message_t manifest(bytes.data(), bytes.size());
        if (!SendPart(p->socket.get(), manifest, zmq::send_flags::sndmore)) {
          p->shm->Undo(entries.size());
          return Unavailable("send queue to node " + std::to_string(peer) + " stayed full for " +
                             std::to_string(timeout_ms) + " ms");
        }
        // From here on the message is committed: the header and frames follow.
      }
      if (!SendParts(p->socket.get(), msg, entries, p->chunked)) {
        return Unavailable("send queue to node " + std::to_string(peer) + " stayed full for " +
                           std::to_string(timeout_ms) + " ms");
      }
    } catch (const zmq::error_t& e) {
      return Unavailable("send to node " + std::to_string(peer) + ": " + e.what());
    }
    return Status::OK();
  }

  Status Recv(Message* msg, int timeout_ms) override {
    if (!router_ || closed_) return Aborted("transport closed");
    // The second item is WakeRecv's eventfd (when there is one): it ends the wait.
    zmq::pollitem_t items[2] = {{static_cast<void*>(*router_), 0, ZMQ_POLLIN, 0},
                                {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    const zmq::pollitem_t& item = items[0];
    try {
      zmq::poll(items, wake_fd_ >= 0 ? 2 : 1, std::chrono::milliseconds(timeout_ms));
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        if (::read(wake_fd_, &count, sizeof(count)) < 0) {
          // EAGAIN: another Recv took the count first; nothing to undo.
        }
      }
      if (!(item.revents & ZMQ_POLLIN)) return Timeout("no message");
      TakenFromZmq();
      // Frame 0 is the sender's routing id (ROUTER adds it); then header and payload.
      // The whole message is always consumed, but only a well-sized one is kept: parts
      // past kMaxParts and bytes past the limit are released as they are read, and the
      // message is then refused (the caller counts it as a bad message).
      std::vector<zmq::message_t> parts;
      // Chunked framing adds the full chunks, which the byte limit bounds.
      const size_t max_parts =
          chunked_ ? kMaxParts + static_cast<size_t>(options_.max_message_bytes) / kChunkBytes
                   : kMaxParts;
      size_t num_parts = 0;
      uint64_t bytes = 0;  // header and payload parts, as the sender's limit counts them
      bool oversized = false;
      bool more = true;
      while (more) {
        zmq::message_t part;
        if (!router_->recv(part, zmq::recv_flags::dontwait)) break;
        more = part.more();
        ++num_parts;
        // The identity (part 0) and a manifest (a part 1 that is not 64 bytes long) are
        // bounded on their own; everything else counts against max_message_bytes.
        const bool counted = num_parts > 2 || (num_parts == 2 && part.size() == sizeof(Header));
        if (counted) bytes += part.size();
        if (num_parts == 2 && !counted && part.size() > kMaxManifestBytes) oversized = true;
        if (bytes > static_cast<uint64_t>(options_.max_message_bytes)) oversized = true;
        if (!oversized && num_parts <= max_parts) parts.push_back(std::move(part));
      }
      if (num_parts > max_parts) {
        return ProtocolError("message of " + std::to_string(num_parts) + " parts (at most " +
                             std::to_string(max_parts) + ")");
      }
      if (oversized) {
        return ProtocolError(
            "message of " + std::to_string(bytes) +
            " bytes in all, above max_message_bytes=" + std::to_string(options_.max_message_bytes));
      }
      // A manifest part (never 64 bytes long) may precede the header: frames in shared memory.
      const size_t first = parts.size() >= 3 && parts[1].size() != sizeof(Header) ? 2 : 1;
      if (parts.size() < first + 1) return ProtocolError("message without a header frame");
      if (!chunked_ && parts.size() > kMaxFrames + first + 1)
        return ProtocolError("message with too many frames");
      msg->frames.clear();
      msg->identity.assign(static_cast<const char*>(parts[0].data()), parts[0].size());
      // Another stream of the same sender (see the top of this file): its own identity.
      const size_t stream_mark = msg->identity.find('\0');
      if (stream_mark != std::string::npos) msg->identity.resize(stream_mark);
      PS_RETURN_IF_ERROR(ParseHeader(parts[first].data(), parts[first].size(), &msg->header));
      for (size_t i = first + 1; i < parts.size(); ++i) {
        if (chunked_ && parts[i].size() >= kChunkBytes) {
          // A run of full chunks and the shorter part that ends it: one frame.
          size_t end = i;
          while (end < parts.size() && parts[end].size() == kChunkBytes) ++end;
          if (end == parts.size() || parts[end].size() > kChunkBytes) {
            return ProtocolError("chunked frame without its closing part");
          }
          if (msg->frames.size() == kMaxFrames) return ProtocolError("message with too many frames");
          msg->frames.push_back(JoinParts(parts.begin() + static_cast<std::ptrdiff_t>(i),
                                          parts.begin() + static_cast<std::ptrdiff_t>(end) + 1));
          i = end;
          continue;
        }
        if (msg->frames.size() == kMaxFrames) return ProtocolError("message with too many frames");
        // ZeroMQ hands out small parts at any offset of its receive buffer; payloads are
        // read as arrays of u64 keys and floats, so a part not on an 8-byte boundary is
        // copied to one (only parts that fit in one read batch, a few KiB, are affected).
        if (reinterpret_cast<uintptr_t>(parts[i].data()) % kFrameAlign != 0) {
          msg->frames.push_back(Frame::Copy(parts[i].data(), parts[i].size()));
          continue;
        }
        auto owned = std::make_shared<zmq::message_t>(std::move(parts[i]));
        const void* data = owned->data();
        const size_t size = owned->size();
        msg->frames.push_back(Frame::Borrow(data, size, std::move(owned)));
      }
      if (first == 2) {
        PS_RETURN_IF_ERROR(
            shm_receiver_.Resolve(parts[1].data(), parts[1].size(), msg->identity, &msg->frames));
      }
      return Status::OK();
    } catch (const zmq::error_t& e) {
      return Unavailable(std::string("receive: ") + e.what());
    }
  }

  void SetSharedMemoryPeers(std::vector<std::string> identities) override {
    shm_receiver_.SetPeers(std::move(identities));
  }

  bool CanWakeRecv() const override { return wake_fd_ >= 0; }
  void WakeRecv() override {
    if (wake_fd_ < 0) return;
    const uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof(one)) < 0) {
      // EAGAIN: the counter is full of wake-ups not yet read, so the next poll returns.
    }
  }

  void Close() override {
    {
      MutexLock lock(&setup_mu_);  // see Connect
      if (closed_.exchange(true)) return;
    }
    std::unordered_map<NodeId, std::shared_ptr<Peer>> peers;
    {
      WriterLock lock(&peers_mu_);
      peers.swap(peers_);
    }
    for (auto& kv : peers) CloseSocket(kv.second.get(), -1);
    MutexLock lock(&setup_mu_);
    if (router_) router_->close();
    router_.reset();
    // ZeroMQ leaves the socket file of an ipc:// endpoint behind: remove the one this
    // transport bound, so that clean exits leave nothing in /tmp.
    if (endpoint_.rfind("ipc://", 0) == 0 && endpoint_.size() > 6 && endpoint_[6] != '@') {
      unlink(endpoint_.c_str() + 6);
    }
    // A private context is terminated when the last socket is gone (its destructor
    // waits for lingering sends, bounded by each socket's linger).
    authenticator_.reset();
    ctx_.reset();
  }

 private:
  // The node's context (setup_mu_ held): the process-wide one for inproc:// (never
  // encrypted: it does not leave the process), else a private one, with the CURVE
  // authenticator when the cluster has a key.
  Status MakeContext(const std::string& address) {
    if (IsInproc(address)) {
      ctx_ = InprocContext();
      return Status::OK();
    }
    // By default one I/O thread per stream, so that streams move bytes in parallel.
    ctx_ = std::make_shared<zmq::context_t>(std::max(options_.io_threads, 1));
    if (curve_) {
      StatusOr<std::unique_ptr<CurveAuthenticator>> a = CurveAuthenticator::Start(ctx_.get(), *curve_);
      if (!a.ok()) {
        ctx_.reset();
        return a.status();
      }
      authenticator_ = std::move(*a);
    }
    return Status::OK();
  }

  // A peer's extra connection (stream k > 0).
  struct Stream {
    Mutex mu;
    std::unique_ptr<zmq::socket_t> socket GUARDED_BY(mu);
  };

  struct Peer {
    Mutex mu;
    std::string endpoint;
    std::string identity;                   // our routing id on this connection
    std::shared_ptr<zmq::context_t> ctx;    // the context its sockets belong to
    int streams = 1;                        // connections to it: the first and streams - 1 extra
    std::unique_ptr<zmq::socket_t> socket GUARDED_BY(mu);  // the first stream
    Mutex extra_mu;
    bool closed GUARDED_BY(extra_mu) = false;  // CloseSocket ran
    std::vector<std::unique_ptr<Stream>> extra GUARDED_BY(extra_mu);  // until filled, then fixed
    bool same_host = false;                 // ipc:// endpoint: the shared-memory path applies
    bool chunked = false;                   // the peer takes chunked framing (CURVE)
    bool shm_failed GUARDED_BY(mu) = false;  // no segment could be made
    std::unique_ptr<ShmSender> shm GUARDED_BY(mu);
  };

  // linger_ms < 0 keeps the socket's own linger (lets queued control messages out).
  static void CloseSocket(Peer* p, int linger_ms) {
    {
      MutexLock lock(&p->extra_mu);
      p->closed = true;
      for (auto& st : p->extra) {
        MutexLock stream_lock(&st->mu);
        if (!st->socket) continue;
        if (linger_ms >= 0) st->socket->set(zmq::sockopt::linger, linger_ms);
        st->socket->close();
        st->socket.reset();
      }
    }
    MutexLock lock(&p->mu);
    if (!p->socket) return;
    if (linger_ms >= 0) p->socket->set(zmq::sockopt::linger, linger_ms);
    p->socket->close();
    p->socket.reset();
  }

  // A DEALER connected to `endpoint` that the receiver knows as `identity`.
  StatusOr<std::unique_ptr<zmq::socket_t>> NewDealer(zmq::context_t& ctx,
                                                     const std::string& endpoint,
                                                     const std::string& identity) {
    try {
      auto socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
      socket->set(zmq::sockopt::routing_id, identity);
      if (curve_ && !IsInproc(endpoint)) {
        socket->set(zmq::sockopt::curve_serverkey, curve_->public_z85);
        socket->set(zmq::sockopt::curve_publickey, curve_->public_z85);
        socket->set(zmq::sockopt::curve_secretkey, curve_->secret_z85);
      }
      socket->set(zmq::sockopt::linger, 2000);
      socket->set(zmq::sockopt::sndhwm, 100000);
      socket->set(zmq::sockopt::reconnect_ivl, 100);
      socket->connect(endpoint);
      return socket;
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot connect to '" + endpoint + "': " + e.what());
    }
  }

  // Sends on the peer's stream k > 0, connecting its extra streams on first use.
  Status SendOnStream(NodeId peer, Peer* p, uint32_t k, const Message& msg, int timeout_ms) {
    Stream* st = nullptr;
    {
      MutexLock lock(&p->extra_mu);
      // After CloseSocket (a Disconnect, or Close) nothing may be opened: the context
      // waits for every socket of it before it ends.
      if (p->closed || closed_) {
        return Unavailable("connection to node " + std::to_string(peer) + " closed");
      }
      if (p->extra.empty()) {
        for (int i = 1; i < p->streams; ++i) {
          auto made = std::make_unique<Stream>();
          std::string id = p->identity;
          id.push_back('\0');
          id.push_back(static_cast<char>(i));
          StatusOr<std::unique_ptr<zmq::socket_t>> socket = NewDealer(*p->ctx, p->endpoint, id);
          if (!socket.ok()) {
            for (auto& e : p->extra) {
              MutexLock lock(&e->mu);
              e->socket->close();
            }
            p->extra.clear();
            return socket.status();
          }
          MutexLock lock(&made->mu);  // not shared yet; taken for the analysis' sake
          made->socket = std::move(*socket);
          p->extra.push_back(std::move(made));
        }
      }
      st = p->extra[k - 1].get();
    }
    // Once filled, p->extra never changes until the peer is gone: st stays valid while
    // the caller holds the peer.
    MutexLock lock(&st->mu);
    if (!st->socket) return Unavailable("connection to node " + std::to_string(peer) + " closed");
    try {
      st->socket->set(zmq::sockopt::sndtimeo, timeout_ms);
      if (!SendParts(st->socket.get(), msg, {}, p->chunked)) {
        return Unavailable("send queue to node " + std::to_string(peer) + " stayed full for " +
                           std::to_string(timeout_ms) + " ms");
      }
    } catch (const zmq::error_t& e) {
      return Unavailable("send to node " + std::to_string(peer) + ": " + e.what());
    }
    return Status::OK();
  }

  const TransportOptions options_;
  const int streams_;                 // Options::streams, resolved: connections per peer
  std::unique_ptr<CurveKeys> curve_;  // curve_key_file's keys, or null
  Status curve_error_;                // curve_key_file could not be used
  Mutex setup_mu_;
  std::shared_ptr<zmq::context_t> ctx_;
  std::unique_ptr<CurveAuthenticator> authenticator_;  // with ctx_, under CURVE
  std::unique_ptr<zmq::socket_t> router_;
  bool chunked_ = false;  // set by Bind: router_ takes chunked framing (CURVE)
  std::string endpoint_;
  std::atomic<bool> closed_{false};
  // WakeRecv's eventfd (nonblocking), polled beside the receive socket; -1 if none.
  const int wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  mutable SharedMutex peers_mu_;
  std::unordered_map<NodeId, std::shared_ptr<Peer>> peers_ GUARDED_BY(peers_mu_);
  // Options::shared_memory: the same-host shared-memory path for ipc:// peers.
  const bool shm_enabled_ = options_.shared_memory;
  // The segments members' manifests name, mapped per connection.
  ShmReceiver shm_receiver_{shm_enabled_};
};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(const TransportOptions& options) {
  return std::make_unique<ZmqTransport>(options);
}

namespace {
class ZmqFactory final : public TransportFactory {
 public:
  std::unique_ptr<Transport> Create(const TransportOptions& options) override {
    return NewZmqTransport(options);
  }
};
}  // namespace

std::shared_ptr<TransportFactory> ZmqTransportFactory() { return std::make_shared<ZmqFactory>(); }

}  // namespace ps
