// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/request_tracker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <unordered_map>

#include "common/status_wire.h"
#include "common/wire_type.h"
#include "ps/element_types.h"
#include "worker/completion_thread.h"
#include "worker/request_table.h"
#include "worker/timeline.h"

namespace ps {

// What in-flight requests share with their tracker (Request::tracker): a frame released by
// the transport after the tracker is gone still finds something valid to update.
struct TrackerState {
  RequestTable table;
  CompletionThread completions;
  // Round trips by kind (KindIndex), and the timeline (std::atomic_load/store).
  metrics::Latency latency[5];
  std::shared_ptr<Timeline> timeline;
  // Ends a waiting thread's receive (RequestTracker::SetWaitReceiver); set before Start.
  std::function<void()> wake_receiver;
};

namespace {

// The request whose replies this thread receives in its Wait (0: none): its own
// completion needs no wake.
thread_local Ticket t_receiving_for = 0;

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr const char* kKindNames[5] = {"push", "pull", "pushpull", "assign", "peer"};
int KindIndex(MsgType t) {
  switch (t) {
    case MsgType::kPush:
      return 0;
    case MsgType::kPull:
      return 1;
    case MsgType::kPushPull:
      return 2;
    case MsgType::kAssign:
      return 3;
    default:
      return 4;
  }
}

// A completed request's round trip into the histograms and the timeline.
void Record(const std::shared_ptr<Request>& req, const Status& status) {
  if (req->table == kInvalidTable && req->parts.empty()) return;  // refused before sending
  auto st = req->tracker.lock();
  if (!st) return;
  const auto done = std::chrono::steady_clock::now();
  const int k = KindIndex(req->type);
  st->latency[k].Observe(std::chrono::duration<double>(done - req->queued).count());
  if (auto tl = std::atomic_load(&st->timeline)) {
    tl->Request(kKindNames[k], req->table, req->ticket, req->parts.size(), req->queued,
                req->sent, done, status.ok());
  }
}

void Finalize(const std::shared_ptr<Request>& req) {
  Worker::Callback cb;
  Status status;
  {
    MutexLock lock(&req->mu);
    if (req->status.ok() && req->finish) req->status = req->finish(*req);
    req->finish = nullptr;
    // Kept replies (Part::keep_reply) go back to the transport now, the request failed or
    // not: they may be blocks of a same-host peer's shared-memory ring.
    for (Part& p : req->parts) p.reply = Frame();
    status = req->status;
    cb = std::move(req->callback);
    if (!cb) {
      req->done = true;
      req->cv.SignalAll();
    }
  }
  if (req->waiter_receives.load(std::memory_order_acquire) && t_receiving_for != req->ticket) {
    if (auto st = req->tracker.lock()) {
      if (st->wake_receiver) st->wake_receiver();
    }
  }
  Record(req, status);
  if (cb) {
    cb(status);
    // A request with a callback is done once its callback has returned: it stays among
    // the tracked requests until then, so a Flush that starts while the callback runs
    // waits for it too, not just for the reply.
    if (auto st = req->tracker.lock()) st->table.Erase(req->ticket);
    MutexLock lock(&req->mu);
    req->done = true;
    req->cv.SignalAll();
  }
}

void Release(const std::shared_ptr<Request>& req) {
  if (req->pending.fetch_sub(1) == 1) Finalize(req);
}

// Release of the borrow unit, called from whichever thread the transport lets go of the
// last frame on: a completion it causes is handed to the completion thread.
void ReleaseFromTransport(const std::shared_ptr<Request>& req) {
  if (req->pending.fetch_sub(1) != 1) return;
  if (auto st = req->tracker.lock()) {
    if (st->completions.Post([req] { Finalize(req); })) return;
  }
  Finalize(req);  // the tracker is gone or stopped: nobody else would
}

// The hold of the call that submitted the request (Submit, Expect). A request answered
// before that call returned completes on the completion thread, so that its callback
// never runs on the caller's thread (it may hold a lock the callback takes); only a
// request that failed before anything was sent (`sent` false) completes in place, as
// docs say (the caller learns of it before the call returns).
void ReleaseHold(const std::shared_ptr<Request>& req, bool sent) {
  if (req->pending.fetch_sub(1) != 1) return;
  // The last unit: nobody else finalizes it, so its callback is read without the lock.
  if (sent && req->callback) {
    if (auto st = req->tracker.lock()) {
      if (st->completions.Post([req] { Finalize(req); })) return;
    }
  }
  Finalize(req);
}

// Claims part i with `status`; returns false if it was already claimed. A payload the
// part kept (for a resend) is let go after the lock: it may hold the request's last
// borrow, whose release completes the request.
bool Claim(Request* req, size_t i, const Status& status) {
  std::vector<Frame> held;
  MutexLock lock(&req->mu);
  if (req->parts[i].claimed) return false;
  Part& p = req->parts[i];
  p.claimed = true;
  held.swap(p.frames);
  if (!status.ok() && req->status.ok()) {
    req->status =
        !p.split ? status
                 : status.WithContext(
                       "part " + std::to_string(i) + " of " + std::to_string(req->parts.size()) +
                       (req->sparse ? " (unique keys " : " (elements ") +
                       std::to_string(p.offset) + ".." +
                       std::to_string(p.offset + p.count) + " of table " + std::to_string(p.table) +
                       "; the request failed as a whole, the servers may have applied its "
                       "other parts)");
  }
  return true;
}

// dst[i] += src[i] for n floats; src may be unaligned (a frame of the transport). The
// fixed-size memcpy compiles to unaligned loads, and the loop vectorizes.
void AddInto(float* dst, const uint8_t* src, size_t n) {
  constexpr size_t kBlock = 16;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float v[kBlock];
    std::memcpy(v, src + i * sizeof(float), sizeof(v));
    for (size_t j = 0; j < kBlock; ++j) dst[i + j] += v[j];
  }
  for (; i < n; ++i) {
    float v;
    std::memcpy(&v, src + i * sizeof(float), sizeof(v));
    dst[i] += v;
  }
}

// The message of part i (its header; the caller adds the frames).
Message PartMessage(const Request& req, const Part& p, size_t i, uint64_t epoch) {
  Message m;
  m.header.type = static_cast<uint16_t>(req.type);
  m.header.table = p.table;
  m.header.request_id = req.ticket;
  m.header.epoch = WireEpoch(epoch);
  m.header.clock = p.clock;
  m.header.offset = p.offset;
  m.header.count = p.count;
  // Peer tensors carry their element type in `dim` (docs/wire-format.md).
  m.header.dim = req.sparse ? (req.dim != 0 ? req.dim : p.dim)
                            : (req.type == MsgType::kPeerTensor ? p.dtype : 0);
  m.header.flags = (req.sparse ? kFlagSparse : 0) | (p.fused ? kFlagFused : 0) | WireFlags(p.wire);
  m.header.part = static_cast<uint32_t>(i);
  m.lane = p.lane;
  return m;
}

}  // namespace

RequestTracker::RequestTracker(const MemberOptions& options, SendFn send)
    : options_(options),
      send_(std::move(send)),
      state_(std::make_shared<TrackerState>()),
      stats_(std::make_unique<TrackerStats>()) {}

RequestTracker::~RequestTracker() { Stop(Aborted("the worker stopped")); }

void RequestTracker::Start() { state_->completions.Start(); }

void RequestTracker::Stop(const Status& why) {
  FailMatching([](const Part&) { return true; }, why);
  state_->completions.Stop();  // runs what is queued first
}

std::shared_ptr<Request> RequestTracker::New(MsgType type, TableId table, Worker::Callback cb) {
  auto req = std::make_shared<Request>();
  req->ticket = next_ticket_.fetch_add(1);
  req->type = type;
  req->table = table;
  req->callback = std::move(cb);
  req->tracker = state_;
  req->deadline_ms = NowMillis() + options_.request_timeout_ms;
  req->queued = req->sent = std::chrono::steady_clock::now();
  return req;
}

void RequestTracker::SetTimeline(std::shared_ptr<Timeline> timeline) {
  std::atomic_store(&state_->timeline, std::move(timeline));
}

void RequestTracker::CollectMetrics(std::vector<metrics::Sample>* out) const {
  const size_t in_flight = state_->table.size();
  out->push_back(metrics::Gauge("layerps_worker_requests_in_flight",
                                "Requests sent and not yet answered", static_cast<double>(in_flight)));
  for (int k = 0; k < 5; ++k) {
    state_->latency[k].Export("layerps_worker_request_seconds",
                              "Round trip of a request, from the call to its answer",
                              {{"kind", kKindNames[k]}}, out);
  }
}

Ticket RequestTracker::Failed(const Status& status, Worker::Callback cb) {
  auto req = New(MsgType::kPush, kInvalidTable, std::move(cb));
  {
    MutexLock lock(&req->mu);  // not shared yet; taken for the analysis' sake
    req->status = status;
  }
  req->pending = 1;
  state_->table.Add(req);
  Release(req);
  return req->ticket;
}

// pending = one unit per part + one for this call's hold + (borrows) one released when
// the transport lets go of the last frame that borrows caller memory: such frames carry
// copies of the token passed to frames_for(i, token).
Ticket RequestTracker::Submit(const std::shared_ptr<Request>& req, uint64_t epoch, bool borrows,
                              const FramesFn& frames_for) {
  req->pending = static_cast<int>(req->parts.size()) + 1 + (borrows ? 1 : 0);
  state_->table.Add(req);
  bool sent_any = false, held_any = false;  // a part went out, or waits for a replacement
  {
    std::shared_ptr<const void> borrow;
    if (borrows)
      borrow =
          std::shared_ptr<const void>(req.get(), [req](const void*) { ReleaseFromTransport(req); });
    for (size_t i = 0; i < req->parts.size(); ++i) {
      Part p;
      {
        MutexLock lock(&req->mu);  // a Retarget may be moving it
        p = req->parts[i];
      }
      Message m = PartMessage(*req, p, i, epoch);
      m.frames = frames_for(i, borrow);
      uint64_t bytes = 0;
      for (const auto& f : m.frames) bytes += f.size();
      // Either direction above max_message_bytes would be dropped by the receiving
      // socket without a word: refuse it here, with the reason.
      const uint64_t largest =
          std::max<uint64_t>(bytes,
                             p.value_count * pack::WireBytes(static_cast<pack::WireType>(p.wire))) +
          sizeof(Header);
      Status s;
      if (largest > static_cast<uint64_t>(options_.max_message_bytes)) {
        s = ResourceExhausted("a message of " + std::to_string(largest) + " bytes to node " +
                              std::to_string(p.server) + " exceeds max_message_bytes=" +
                              std::to_string(options_.max_message_bytes) +
                              " (raise it on every node, use more servers, or split the request)");
      } else if (failover_.retain()) {
        // The cluster may replace servers: the part keeps its payload until answered; a
        // part for a dead server waits for its replacement (Park, Retarget).
        bool held = false;
        failover_.Route(p.server, [&](NodeId server, bool waits) {
          p.server = server;
          held = waits;
          MutexLock lock(&req->mu);
          req->parts[i].server = server;
          req->parts[i].frames = m.frames;
          req->parts[i].routed = true;
        });
        if (held) {
          held_any = true;
          continue;
        }
        s = send_(p.server, std::move(m));
      } else {
        s = send_(p.server, std::move(m));  // refuses peers declared dead
      }
      if (s.ok()) {
        sent_any = true;
        ++stats_->sent;
        stats_->bytes_out += bytes;
      } else if (Claim(req.get(), i, s.WithContext("send to node " + std::to_string(p.server)))) {
        Release(req);
      }
    }
  }
  req->sent = std::chrono::steady_clock::now();
  const Ticket ticket = req->ticket;
  ReleaseHold(req, sent_any || held_any);
  return ticket;
}

Ticket RequestTracker::Expect(const std::shared_ptr<Request>& req) {
  req->pending = static_cast<int>(req->parts.size()) + 1;
  state_->table.Add(req);
  const Ticket ticket = req->ticket;
  ReleaseHold(req, /*sent=*/true);  // deliveries may come before this returns
  return ticket;
}

bool RequestTracker::Deliver(Ticket ticket, size_t part, const Status& status, const void* data,
                             size_t bytes, NodeId source, uint8_t dtype) {
  std::shared_ptr<Request> req = state_->table.Find(ticket);
  if (!req || part >= req->parts.size()) return false;
  Status s = status;
  const Part& expected = req->parts[part];
  if (s.ok() && dtype != expected.dtype) {
    s = InvalidArgument(std::string("received ") + DataTypeName(static_cast<DataType>(dtype)) +
                        " values where " + DataTypeName(static_cast<DataType>(expected.dtype)) +
                        " were expected");
  } else if (s.ok() && expected.sink) {
    if (expected.sink_bytes != kAnyBytes && bytes != expected.sink_bytes) {
      s = InvalidArgument("received " + std::to_string(bytes) + " bytes where " +
                          std::to_string(expected.sink_bytes) + " were expected");
    }
  } else if (s.ok() && bytes != expected.value_count * sizeof(float)) {
    s = InvalidArgument("received " + std::to_string(bytes / sizeof(float)) + " values where " +
                        std::to_string(expected.value_count) + " were expected");
  }
  if (!Claim(req.get(), part, s)) return false;
  // The part is claimed: only this thread touches its destination (and `source`) now;
  // Release publishes them to whoever finalizes.
  if (source != kUnassignedId) req->source = source;
  if (s.ok() && req->parts[part].sink) {
    req->parts[part].sink(data, bytes);
    stats_->bytes_in += bytes;
  } else if (s.ok() && bytes > 0) {
    const Part& p = req->parts[part];
    if (p.accumulate) {
      AddInto(p.dst, static_cast<const uint8_t*>(data), bytes / sizeof(float));
    } else {
      std::memcpy(p.dst, data, bytes);
    }
    stats_->bytes_in += bytes;
  }
  Release(req);
  return true;
}

void RequestTracker::Cancel(Ticket ticket, const Status& why) {
  std::shared_ptr<Request> req = state_->table.Find(ticket);
  if (!req) return;
  for (size_t i = 0; i < req->parts.size(); ++i) {
    if (Claim(req.get(), i, why)) Release(req);
  }
}

void RequestTracker::SetWaitReceiver(WaitReceiver receive, std::function<void()> wake) {
  wait_receiver_ = std::move(receive);
  state_->wake_receiver = std::move(wake);
}

Status RequestTracker::Wait(Ticket ticket, std::chrono::milliseconds timeout, bool* in_flight) {
  std::shared_ptr<Request> req = state_->table.Find(ticket);
  // (A wait shorter than any receive budget just waits.)
  if (wait_receiver_ && timeout >= std::chrono::milliseconds(10)) {
    bool has_callback = true;
    if (req) {
      MutexLock lock(&req->mu);
      has_callback = static_cast<bool>(req->callback);
    }
    uint64_t floats = 0;
    if (req && !has_callback && req->parts.size() <= kWaitReceiveParts) {
      for (const Part& p : req->parts) {
        const uint64_t width = p.dim != 0 ? p.dim : (req->sparse && req->dim != 0 ? req->dim : 1);
        floats += p.count * width + (req->sparse ? p.count : 0);  // keys count too
      }
      if (floats <= kWaitReceiveFloats) {
        req->waiter_receives.store(true, std::memory_order_release);
        t_receiving_for = ticket;
        wait_receiver_(ticket, [&req]() {
          MutexLock lock(&req->mu);
          return req->done;
        });
        t_receiving_for = 0;
        req->waiter_receives.store(false, std::memory_order_release);
      }
    }
  }
  return state_->table.Wait(req, ticket, timeout, in_flight);
}

Status RequestTracker::Flush(std::chrono::milliseconds timeout) {
  return state_->table.Flush(timeout);
}

void RequestTracker::OnReply(Message&& msg) {
  const Header& h = msg.header;
  Status valid = ValidateDataFrames(msg, static_cast<uint64_t>(options_.max_message_bytes) / 4);
  std::shared_ptr<Request> req;
  if (valid.ok()) {
    req = state_->table.Find(h.request_id);
    if (!req) valid = NotFound("reply to unknown request " + std::to_string(h.request_id));
  }
  const size_t index = h.part;
  if (valid.ok()) {
    // The reply names its part; it must also agree with what that part asked.
    MutexLock lock(&req->mu);
    const Part* p = index < req->parts.size() ? &req->parts[index] : nullptr;
    if (p == nullptr || p->claimed || p->server != h.sender || p->table != h.table ||
        p->offset != h.offset || p->count != h.count || p->fused != h.fused())
      valid = NotFound("reply matches no outstanding part");
    else if (h.sparse() != req->sparse ||
             (req->sparse && h.dim != (req->dim != 0 ? req->dim : p->dim)))
      valid = ProtocolError("reply shape differs from request");
    else if (h.wire() != p->wire)
      valid = ProtocolError("reply's wire element type differs from the request's");
    else if (h.status == 0 && req->pulls() &&
             (msg.frames.empty() ||
              msg.frames[0].size() !=
                  p->value_count * pack::WireBytes(static_cast<pack::WireType>(p->wire)))) {
      valid = ProtocolError("pull reply without the values asked for");
    }
  }
  if (!valid.ok()) {
    ++stats_->bad;
    LOG_EVERY_N(WARNING, 100) << "worker dropped a reply from node " << h.sender << ": " << valid;
    return;
  }
  ++stats_->replies;
  Status status;
  if (h.status != 0) {
    std::string text = msg.frames.empty()
                           ? std::string("(no message)")
                           : std::string(reinterpret_cast<const char*>(msg.frames[0].data()),
                                         msg.frames[0].size());
    status = StatusFromWire(h.status, "server " + std::to_string(h.sender) + ": " + text);
  }
  if (!Claim(req.get(), index, status)) return;
  if (status.ok() && req->pulls()) {
    // The part is claimed: only this thread touches its destination now.
    Part& p = req->parts[index];
    const Frame& f = msg.frames[0];
    stats_->bytes_in += f.size();
    if (p.keep_reply) {
      p.reply = std::move(msg.frames[0]);
    } else if (p.wire != 0) {  // narrowed on the wire: widen into the destination
      pack::FromWire(f.data(), p.value_count, static_cast<pack::WireType>(p.wire), p.dst);
    } else if (p.pieces.empty()) {
      std::memcpy(p.dst, f.data(), f.size());
    } else {
      const uint8_t* src = f.data();
      for (const auto& piece : p.pieces) {
        std::memcpy(piece.first, src, piece.second * sizeof(float));
        src += piece.second * sizeof(float);
      }
    }
  }
  Release(req);
}

void RequestTracker::FailMatching(const std::function<bool(const Part&)>& match,
                                  const Status& why) {
  for (auto& req : state_->table.Snapshot()) {
    std::vector<size_t> hit;
    {
      MutexLock lock(&req->mu);
      for (size_t i = 0; i < req->parts.size(); ++i) {
        if (!req->parts[i].claimed && match(req->parts[i])) hit.push_back(i);
      }
    }
    for (size_t i : hit) {
      if (Claim(req.get(), i, why)) Release(req);
    }
  }
}

void RequestTracker::Park(NodeId server, uint32_t rank, NodeId successor) {
  failover_.Park(server, rank, successor);
}

bool RequestTracker::IsParked(NodeId server) const { return failover_.IsParked(server); }

std::map<NodeId, RequestTracker::ParkedServer> RequestTracker::Parked() const {
  return failover_.Parked();
}

void RequestTracker::Retarget(NodeId dead, NodeId fresh, uint64_t epoch) {
  std::vector<std::pair<std::shared_ptr<Request>, Message>> resend;
  failover_.Retarget(dead, fresh, [&] {
    for (auto& req : state_->table.Snapshot()) {
      MutexLock lock(&req->mu);
      for (size_t i = 0; i < req->parts.size(); ++i) {
        Part& p = req->parts[i];
        // Not yet routed: Submit is still building this request, and its Route sends
        // the part to `fresh` (replaced_ already says so) with the payload.
        if (p.claimed || !p.routed || p.server != dead) continue;
        p.server = fresh;
        Message m = PartMessage(*req, p, i, epoch);
        m.frames = p.frames;
        resend.emplace_back(req, std::move(m));
      }
    }
  });
  for (auto& r : resend) {
    const size_t i = r.second.header.part;
    uint64_t bytes = 0;
    for (const auto& f : r.second.frames) bytes += f.size();
    Status s = send_(fresh, std::move(r.second));
    if (s.ok()) {
      ++stats_->sent;
      ++stats_->resent;
      stats_->bytes_out += bytes;
    } else if (Claim(r.first.get(), i, s.WithContext("send to node " + std::to_string(fresh)))) {
      Release(r.first);
    }
  }
  if (!resend.empty()) {
    LOG(INFO) << "sent " << resend.size() << " request part(s) for dead server node " << dead
              << " to its replacement, node " << fresh;
  }
}

void RequestTracker::Expire(const std::function<void(NodeId)>& drop_connection) {
  const int64_t now = NowMillis();
  const std::vector<std::shared_ptr<Request>> expired =
      state_->table.Snapshot([now](const Request& r) { return r.deadline_ms < now; });
  std::set<NodeId> silent;
  std::vector<std::shared_ptr<Request>> to_release;
  for (const auto& req : expired) {
    std::vector<size_t> open;
    {
      MutexLock lock(&req->mu);
      for (size_t i = 0; i < req->parts.size(); ++i) {
        if (!req->parts[i].claimed) open.push_back(i);
      }
      if (open.empty() && !req->done && !req->connections_dropped &&
          req->pending.load() > 0) {
        // Answered or failed, yet not complete: the transport holds frames that borrow
        // the caller's buffer, queued for a peer that will not take them.
        req->connections_dropped = true;
        for (const Part& p : req->parts) {
          if (p.server != kUnassignedId) silent.insert(p.server);
        }
      }
    }
    for (size_t i : open) {
      // kUnavailable, not kTimeout: from Wait, kTimeout always means "still in flight".
      const NodeId peer = req->parts[i].server;
      const std::string within =
          " within request_timeout_ms=" + std::to_string(options_.request_timeout_ms);
      Status t = peer == kUnassignedId
                     ? Unavailable("no tensor under tag " + std::to_string(req->parts[i].offset) +
                                   " from any worker" + within)
                     : Unavailable("no reply from node " + std::to_string(peer) + within);
      if (peer != kUnassignedId) silent.insert(peer);
      if (Claim(req.get(), i, t)) to_release.push_back(req);
    }
  }
  for (NodeId peer : silent) drop_connection(peer);
  for (auto& req : to_release) Release(req);
}

}  // namespace ps
