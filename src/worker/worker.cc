// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Request life: the calling thread slices the request by the cluster map into one part
// per server range and sends the parts; the receive thread matches replies to parts,
// copies pulled values into the caller's buffer and completes the request when every
// part is answered AND the transport released every borrowed push frame (so the
// caller may reuse its buffer as soon as Wait returns).
//
// A part is "claimed" exactly once (by its reply, a failure, a timeout or Stop) under
// the request's mutex; each claim and the release of the borrowed frames drop one unit
// of `pending`; whoever drops the last unit finalizes the request.
#include "ps/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status_wire.h"
#include "node/node_runtime.h"
#include "worker/packing.h"

#if LAYERPS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/packing_cuda.h"
#endif

namespace ps {
namespace {

// One message of a request, to one server. A reply is matched to its part by (server,
// table, offset, count, fused).
struct Part {
  NodeId server = kUnassignedId;
  TableId table = kInvalidTable;  // 0 for fused parts
  uint64_t offset = 0;            // dense: element offset; sparse: position in the unique keys
  uint64_t count = 0;             // elements, keys, or (fused) segments
  bool fused = false;
  bool claimed = false;
  // Pulls: the reply carries value_count floats, written to dst, or (fused) split over
  // pieces in order.
  float* dst = nullptr;
  uint64_t value_count = 0;
  std::vector<std::pair<float*, uint64_t>> pieces;
};

// Slices below this size travel fused with the other small slices for the same server.
constexpr uint64_t kFuseBelowBytes = 256 << 10;

struct Request;

// Requests by ticket. Shared with in-flight requests so that a frame released by the
// transport after the Worker is gone finds something valid to update.
struct Registry {
  std::mutex mu;
  std::unordered_map<Ticket, std::shared_ptr<Request>> requests;  // guarded by mu

  // Requests completed by the transport releasing their last borrowed frame: they are
  // finalized (callbacks run) on the worker's completion thread, never on a ZeroMQ I/O
  // thread or, over inproc, a server's thread.
  std::mutex completion_mu;
  std::condition_variable completion_cv;
  std::deque<std::shared_ptr<Request>> completions;  // guarded by completion_mu
  bool completion_thread_running = false;            // guarded by completion_mu
};

struct Request {
  Ticket ticket = 0;
  MsgType type = MsgType::kPush;
  TableId table = kInvalidTable;
  bool sparse = false;
  uint32_t dim = 0;
  int64_t deadline_ms = 0;
  Worker::Callback callback;
  std::weak_ptr<Registry> registry;

  // Dense pulls write here (indexed by element). Sparse pulls stage unique rows here
  // and scatter them into `out` through `inverse` when the last part arrives.
  float* out = nullptr;
  std::vector<float> staging;
  std::vector<uint32_t> inverse;
  // Runs once every part succeeded, before the request completes (under `mu`): moves
  // the pulled values to their final place. Its error becomes the request's.
  std::function<Status(Request&)> finish;
  // Memory the request's buffers live in (e.g. pinned staging), held until it is gone.
  std::shared_ptr<const void> keep;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Part> parts;  // guarded by mu (claimed flags)
  Status status;            // guarded by mu: the first error
  bool done = false;        // guarded by mu
  std::atomic<int> pending{0};

  bool pulls() const { return type == MsgType::kPull || type == MsgType::kPushPull; }
};

void Finalize(const std::shared_ptr<Request>& req) {
  Worker::Callback cb;
  Status status;
  {
    std::lock_guard<std::mutex> lock(req->mu);
    if (req->status.ok() && req->finish) req->status = req->finish(*req);
    req->finish = nullptr;
    req->done = true;
    status = req->status;
    cb = std::move(req->callback);
    req->cv.notify_all();
  }
  if (cb) {
    if (auto reg = req->registry.lock()) {
      std::lock_guard<std::mutex> lock(reg->mu);
      reg->requests.erase(req->ticket);
    }
    cb(status);
  }
}

void Release(const std::shared_ptr<Request>& req) {
  if (req->pending.fetch_sub(1) == 1) Finalize(req);
}

// Release of the borrow unit, called from whichever thread the transport lets go of the
// last frame on: a completion it causes is handed to the completion thread.
void ReleaseFromTransport(const std::shared_ptr<Request>& req) {
  if (req->pending.fetch_sub(1) != 1) return;
  if (auto reg = req->registry.lock()) {
    std::lock_guard<std::mutex> lock(reg->completion_mu);
    if (reg->completion_thread_running) {
      reg->completions.push_back(req);
      reg->completion_cv.notify_one();
      return;
    }
  }
  Finalize(req);  // the worker is gone or stopped: nobody else would
}

// Claims part i with `status`; returns false if it was already claimed.
// The unique keys of a sparse request grouped by server range, ready to send. Built on
// the host by PrepareSparse, or by the GPU packing path into pinned memory.
struct SparseBatch {
  const Key* keys = nullptr;          // m keys, grouped by range, unique
  const float* rows = nullptr;        // pushes: m x dim rows in the same order
  std::shared_ptr<const void> owner;  // keeps keys and rows alive while frames are in flight
  std::vector<size_t> offsets;        // one more than the table's ranges; range b is [b, b+1)
  std::vector<uint32_t> inverse;      // pulls: caller position -> position in keys
};

bool Claim(Request* req, size_t i, const Status& status) {
  std::lock_guard<std::mutex> lock(req->mu);
  if (req->parts[i].claimed) return false;
  req->parts[i].claimed = true;
  if (!status.ok() && req->status.ok()) req->status = status;
  return true;
}

}  // namespace

class Worker::Impl {
 public:
  explicit Impl(Options options)
      : options_(std::move(options)), registry_(std::make_shared<Registry>()) {}

  Status Start() {
    if (ever_started_) return FailedPrecondition("worker already started (a Worker starts once)");
    NodeRuntime::Handlers h;
    h.on_data = [this](Message&& m) { HandleReply(std::move(m)); };
    h.on_node_dead = [this](NodeId id, const Status& why) { OnNodeDead(id, why); };
    h.on_tick = [this] { ExpireRequests(); };
    auto rt = std::make_unique<NodeRuntime>(options_, Role::kWorker, std::move(h));
    // Handlers may run as soon as Start begins receiving: publish runtime_ first.
    runtime_ = std::move(rt);
    Status s = runtime_->Start();
    if (!s.ok()) {
      runtime_.reset();
      return s;
    }
    {
      std::lock_guard<std::mutex> lock(registry_->completion_mu);
      registry_->completion_thread_running = true;
    }
    completion_thread_ = std::thread([reg = registry_] { CompletionLoop(reg); });
    started_ = true;
    ever_started_ = true;
    return Status::OK();
  }

  static void CompletionLoop(std::shared_ptr<Registry> reg) {
    std::unique_lock<std::mutex> lock(reg->completion_mu);
    for (;;) {
      reg->completion_cv.wait(
          lock, [&] { return !reg->completions.empty() || !reg->completion_thread_running; });
      while (!reg->completions.empty()) {
        auto req = std::move(reg->completions.front());
        reg->completions.pop_front();
        lock.unlock();
        Finalize(req);
        lock.lock();
      }
      if (!reg->completion_thread_running) return;
    }
  }

  void Stop() {
    if (!started_.exchange(false)) return;
    runtime_->Stop(/*send_leave=*/true);
    FailMatching([](const Part&) { return true; }, Aborted("the worker stopped"));
    {
      std::lock_guard<std::mutex> lock(registry_->completion_mu);
      registry_->completion_thread_running = false;  // it drains the queue, then exits
    }
    registry_->completion_cv.notify_all();
    if (completion_thread_.joinable()) completion_thread_.join();
  }

  // These report the last cluster map this worker saw, also after Stop(). runtime_ is
  // read only once a Start() succeeded (it is never replaced after that).
  NodeId id() const { return ever_started_ ? runtime_->id() : kUnassignedId; }
  uint32_t rank() const { return ever_started_ ? runtime_->rank() : 0; }
  int CountRole(Role r) const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    return m ? m->CountRole(r) : 0;
  }
  std::vector<NodeInfo> Nodes() const {
    auto m = ever_started_ ? runtime_->map() : nullptr;
    return m ? m->nodes : std::vector<NodeInfo>{};
  }

  StatusOr<TableId> DeclareTable(const TableSpec& spec) {
    if (!started_) return FailedPrecondition("DeclareTable: the worker is not started");
    return runtime_->DeclareTable(spec, std::chrono::milliseconds(options_.request_timeout_ms));
  }

  StatusOr<TableSpec> GetTableSpec(TableId table) const {
    auto m = started_ ? runtime_->map() : nullptr;
    const TableInfo* t = m ? m->FindTable(table) : nullptr;
    if (!t) return NotFound("no table with id " + std::to_string(table));
    return t->spec;
  }

  // `keep` holds the memory `in`/`out` live in; `finish` runs when every part succeeded.
  Ticket Dense(MsgType type, TableId table, const float* in, float* out, size_t n, Callback cb,
               std::shared_ptr<const void> keep = nullptr,
               std::function<Status(Request&)> finish = nullptr);
  // Several dense tensors in one request (PushMany/PullMany): small slices fused.
  Ticket Many(MsgType type, const std::vector<TableId>& tables,
              const std::vector<const float*>& ins, const std::vector<float*>& outs,
              const std::vector<size_t>& sizes, Callback cb);
  Ticket PushDevice(TableId table, const float* grad, size_t n, void* stream, Callback cb);
  Ticket PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb);
  Ticket SparseDevice(MsgType type, TableId table, const Key* keys, size_t num_keys,
                      const float* rows, float* out, size_t rows_len, void* stream, Callback cb);
  Ticket Sparse(MsgType type, TableId table, const Key* keys, size_t num_keys, const float* rows,
                float* out, size_t rows_len, Callback cb);
  Status CheckSparseArgs(const TableInfo& t, const Key* keys, size_t num_keys, const float* rows,
                         size_t rows_len) const;
  // Host path: coalesces (pushes) or deduplicates (pulls) and groups keys by server.
  SparseBatch PrepareSparse(MsgType type, const TableInfo& t, const Key* keys, size_t num_keys,
                            const float* rows) const;
  // Sends a prepared batch; `finish` runs when every part succeeded (pulls).
  Ticket SendSparse(MsgType type, const std::shared_ptr<const ClusterMap>& map, const TableInfo& t,
                    SparseBatch batch, float* out, std::function<Status(Request&)> finish,
                    Callback cb);

  Status Wait(Ticket ticket, std::chrono::milliseconds timeout) {
    std::shared_ptr<Request> req;
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      auto it = registry_->requests.find(ticket);
      if (it == registry_->requests.end()) {
        return NotFound("unknown ticket " + std::to_string(ticket) +
                        " (already waited, or has a callback)");
      }
      req = it->second;
    }
    Status status;
    {
      std::unique_lock<std::mutex> lock(req->mu);
      if (!req->cv.wait_for(lock, timeout, [&] { return req->done; })) {
        return Timeout("request " + std::to_string(ticket) + " still in flight after " +
                       std::to_string(timeout.count()) + " ms");
      }
      status = req->status;
    }
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->requests.erase(ticket);
    return status;
  }

  Status Barrier(Group group, std::chrono::milliseconds timeout) {
    if (!started_) return FailedPrecondition("Barrier: the worker is not started");
    return runtime_->Barrier(group, timeout);
  }

  WorkerStats stats() const {
    WorkerStats s;
    s.requests_sent = sent_.load();
    s.replies_received = replies_.load();
    s.bad_messages = bad_.load() + (ever_started_ ? runtime_->bad_messages() : 0);
    s.bytes_sent = bytes_out_.load();
    s.bytes_received = bytes_in_.load();
    s.payload_copies = copies_.load();
    return s;
  }

 private:
 public:
  // A request that failed before anything was sent.
  Ticket Failed(const Status& status, Callback cb) {
    auto req = NewRequest(MsgType::kPush, kInvalidTable, std::move(cb));
    req->status = status;
    req->pending = 1;
    Register(req);
    Release(req);
    return req->ticket;
  }

 private:
  std::shared_ptr<Request> NewRequest(MsgType type, TableId table, Callback cb) {
    auto req = std::make_shared<Request>();
    req->ticket = next_ticket_.fetch_add(1);
    req->type = type;
    req->table = table;
    req->callback = std::move(cb);
    req->registry = registry_;
    req->deadline_ms = SteadyMillis() + options_.request_timeout_ms;
    return req;
  }

  void Register(const std::shared_ptr<Request>& req) {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->requests[req->ticket] = req;
  }

  // Checks common to every request; returns the table or sets *error. Takes the current
  // map into *map if it is null, else looks up in the snapshot given (so that several
  // lookups of one request see the same map and the returned pointers stay valid).
  const TableInfo* Lookup(TableId table, TableKind kind, std::shared_ptr<const ClusterMap>* map,
                          Status* error) const {
    if (!started_) {
      *error = FailedPrecondition("the worker is not started (call Start first)");
      return nullptr;
    }
    if (!*map) *map = runtime_->map();  // one snapshot for the whole request
    const TableInfo* t = *map ? (*map)->FindTable(table) : nullptr;
    if (!t) {
      *error = NotFound("unknown table id " + std::to_string(table) + " (declare it first)");
      return nullptr;
    }
    if (t->spec.kind != kind) {
      *error =
          InvalidArgument("table '" + t->spec.name + "' is " +
                          (t->spec.kind == TableKind::kDense ? "dense" : "sparse") + ": use the " +
                          (t->spec.kind == TableKind::kDense ? "dense" : "sparse") + " calls");
      return nullptr;
    }
    return t;
  }

  // Registers a request whose parts are filled in and sends them; returns its ticket.
  // pending = one unit per part + one for this call's hold + (borrows) one released when
  // the transport lets go of the last frame that borrows caller memory: such frames
  // carry copies of the token passed to frames_for(i, token).
  Ticket Submit(const std::shared_ptr<Request>& req, uint64_t epoch, bool borrows,
                const std::function<std::vector<Frame>(size_t, const std::shared_ptr<const void>&)>&
                    frames_for) {
    req->pending = static_cast<int>(req->parts.size()) + 1 + (borrows ? 1 : 0);
    Register(req);
    {
      std::shared_ptr<const void> borrow;
      if (borrows)
        borrow = std::shared_ptr<const void>(req.get(),
                                             [req](const void*) { ReleaseFromTransport(req); });
      SendParts(req, epoch, [&](size_t i) { return frames_for(i, borrow); });
    }
    const Ticket ticket = req->ticket;
    Release(req);  // this call's hold
    return ticket;
  }

  // Sends every part; a part that cannot be sent is claimed with the error. `frames_for`
  // builds the payload frames of part i. Releases the caller's hold on the request.
  void SendParts(const std::shared_ptr<Request>& req, uint64_t epoch,
                 const std::function<std::vector<Frame>(size_t)>& frames_for) {
    for (size_t i = 0; i < req->parts.size(); ++i) {
      const Part p = req->parts[i];
      Message m;
      m.header.type = static_cast<uint16_t>(req->type);
      m.header.table = p.table;
      m.header.request_id = req->ticket;
      m.header.epoch = epoch;
      m.header.offset = p.offset;
      m.header.count = p.count;
      m.header.dim = req->sparse ? req->dim : 0;
      m.header.flags = (req->sparse ? kFlagSparse : 0) | (p.fused ? kFlagFused : 0);
      m.frames = frames_for(i);
      uint64_t bytes = 0;
      for (const auto& f : m.frames) bytes += f.size();
      // Either direction above max_message_bytes would be dropped by the receiving
      // socket without a word: refuse it here, with the reason.
      const uint64_t largest =
          std::max<uint64_t>(bytes, p.value_count * sizeof(float)) + sizeof(Header);
      Status s;
      if (largest > static_cast<uint64_t>(options_.max_message_bytes)) {
        s = ResourceExhausted("a message of " + std::to_string(largest) + " bytes to server " +
                              std::to_string(p.server) + " exceeds max_message_bytes=" +
                              std::to_string(options_.max_message_bytes) +
                              " (raise it on every node, use more servers, or split the request)");
      } else {
        s = runtime_->Send(p.server, std::move(m));  // refuses servers declared dead
      }
      if (s.ok()) {
        ++sent_;
        bytes_out_ += bytes;
      } else if (Claim(req.get(), i, s.WithContext("send to server " + std::to_string(p.server)))) {
        Release(req);
      }
    }
  }

  void HandleReply(Message&& msg) {
    const Header& h = msg.header;
    Status valid = ValidateDataFrames(msg, static_cast<uint64_t>(options_.max_message_bytes) / 4);
    if (valid.ok() && h.msg_type() != MsgType::kReply)
      valid = ProtocolError("a worker got a request");
    std::shared_ptr<Request> req;
    if (valid.ok()) {
      std::lock_guard<std::mutex> lock(registry_->mu);
      auto it = registry_->requests.find(h.request_id);
      if (it != registry_->requests.end())
        req = it->second;
      else
        valid = NotFound("reply to unknown request " + std::to_string(h.request_id));
    }
    size_t index = 0;
    if (valid.ok()) {
      bool found = false;
      std::lock_guard<std::mutex> lock(req->mu);
      for (size_t i = 0; i < req->parts.size(); ++i) {
        const Part& p = req->parts[i];
        if (!p.claimed && p.server == h.sender && p.table == h.table && p.offset == h.offset &&
            p.count == h.count && p.fused == h.fused()) {
          index = i;
          found = true;
          break;
        }
      }
      if (!found)
        valid = NotFound("reply matches no outstanding part");
      else if (h.sparse() != req->sparse || (req->sparse && h.dim != req->dim))
        valid = ProtocolError("reply shape differs from request");
      else if (h.status == 0 && req->pulls() &&
               (msg.frames.empty() ||
                msg.frames[0].size() != req->parts[index].value_count * sizeof(float))) {
        valid = ProtocolError("pull reply without the values asked for");
      }
    }
    if (!valid.ok()) {
      ++bad_;
      LOG_EVERY_N(WARNING, 100) << "worker dropped a reply from node " << h.sender << ": " << valid;
      return;
    }
    ++replies_;
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
      const Part& p = req->parts[index];
      const Frame& f = msg.frames[0];
      if (p.pieces.empty()) {
        std::memcpy(p.dst, f.data(), f.size());
      } else {
        const uint8_t* src = f.data();
        for (const auto& piece : p.pieces) {
          std::memcpy(piece.first, src, piece.second * sizeof(float));
          src += piece.second * sizeof(float);
        }
      }
      bytes_in_ += f.size();
    }
    Release(req);
  }

  // Claims every unclaimed part for which `match` holds, with `why`.
  void FailMatching(const std::function<bool(const Part&)>& match, const Status& why) {
    std::vector<std::shared_ptr<Request>> reqs;
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      for (auto& kv : registry_->requests) reqs.push_back(kv.second);
    }
    for (auto& req : reqs) {
      std::vector<size_t> hit;
      {
        std::lock_guard<std::mutex> lock(req->mu);
        for (size_t i = 0; i < req->parts.size(); ++i) {
          if (!req->parts[i].claimed && match(req->parts[i])) hit.push_back(i);
        }
      }
      for (size_t i : hit) {
        if (Claim(req.get(), i, why)) Release(req);
      }
    }
  }

  void OnNodeDead(NodeId id, const Status& why) {
    if (id == kSchedulerId) {
      FailMatching([](const Part&) { return true; }, why);
      return;
    }
    // The runtime already refuses new sends to it; fail what is outstanding.
    FailMatching([id](const Part& p) { return p.server == id; }, why);
  }

  void ExpireRequests() {
    const int64_t now = SteadyMillis();
    std::vector<std::shared_ptr<Request>> expired;
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      for (auto& kv : registry_->requests) {
        if (kv.second->deadline_ms < now) expired.push_back(kv.second);
      }
    }
    std::set<NodeId> silent;
    for (auto& req : expired) {
      std::vector<size_t> open;
      {
        std::lock_guard<std::mutex> lock(req->mu);
        for (size_t i = 0; i < req->parts.size(); ++i) {
          if (!req->parts[i].claimed) open.push_back(i);
        }
      }
      for (size_t i : open) {
        // kUnavailable, not kTimeout: from Wait, kTimeout always means "still in flight".
        Status t = Unavailable(
            "no reply from server " + std::to_string(req->parts[i].server) +
            " within request_timeout_ms=" + std::to_string(options_.request_timeout_ms));
        silent.insert(req->parts[i].server);
        if (Claim(req.get(), i, t)) Release(req);
      }
    }
    // Drop the connections to servers that did not answer: ZeroMQ then discards what is
    // still queued for them and releases the caller buffers those frames borrow, so the
    // expired requests complete. The next request reconnects.
    for (NodeId s : silent) runtime_->DropConnection(s);
  }

  const Options options_;
  std::shared_ptr<Registry> registry_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::atomic<bool> started_{false};
  std::atomic<bool> ever_started_{false};
  std::atomic<Ticket> next_ticket_{1};
  std::thread completion_thread_;
  std::atomic<uint64_t> sent_{0}, replies_{0}, bad_{0}, bytes_out_{0}, bytes_in_{0}, copies_{0};
};

Ticket Worker::Impl::Dense(MsgType type, TableId table, const float* in, float* out, size_t n,
                           Callback cb, std::shared_ptr<const void> keep,
                           std::function<Status(Request&)> finish) {
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kDense, &map, &err);
  if (!t) return Failed(err, std::move(cb));
  if (n != t->spec.size) {
    return Failed(
        InvalidArgument("table '" + t->spec.name + "' has " + std::to_string(t->spec.size) +
                        " elements, the request has " + std::to_string(n)),
        std::move(cb));
  }
  const bool pushes = type != MsgType::kPull;
  if ((pushes && in == nullptr) ||
      ((type == MsgType::kPull || type == MsgType::kPushPull) && out == nullptr)) {
    return Failed(InvalidArgument("null buffer"), std::move(cb));
  }
  auto req = NewRequest(type, table, std::move(cb));
  req->out = out;
  req->keep = keep;
  req->finish = std::move(finish);
  for (const KeyRange& r : t->ranges) {
    Part p;
    p.server = r.server;
    p.table = table;
    p.offset = t->RangeFirstElem(r);
    p.count = t->RangeEndElem(r) - p.offset;
    if (req->pulls()) {
      p.dst = out + p.offset;
      p.value_count = p.count;
    }
    req->parts.push_back(std::move(p));
  }
  return Submit(req, map->epoch, /*borrows=*/pushes,
                [&](size_t i, const std::shared_ptr<const void>& borrow) {
                  std::vector<Frame> frames;
                  if (pushes) {
                    const Part& p = req->parts[i];
                    frames.push_back(Frame::Borrow(in + p.offset, p.count * sizeof(float), borrow));
                  }
                  return frames;
                });
}

Ticket Worker::Impl::Many(MsgType type, const std::vector<TableId>& tables,
                          const std::vector<const float*>& ins, const std::vector<float*>& outs,
                          const std::vector<size_t>& sizes, Callback cb) {
  const bool pushes = type != MsgType::kPull;
  const bool pulls = type == MsgType::kPull || type == MsgType::kPushPull;
  if (!started_)
    return Failed(FailedPrecondition("the worker is not started (call Start first)"),
                  std::move(cb));
  std::shared_ptr<const ClusterMap> map = runtime_->map();
  std::vector<const TableInfo*> infos;
  for (size_t i = 0; i < tables.size(); ++i) {
    Status err;
    const TableInfo* t = Lookup(tables[i], TableKind::kDense, &map, &err);
    if (!t) return Failed(err.WithContext("tensor " + std::to_string(i)), std::move(cb));
    if (sizes[i] != t->spec.size) {
      return Failed(InvalidArgument("tensor " + std::to_string(i) + ": table '" + t->spec.name +
                                    "' has " + std::to_string(t->spec.size) + " elements, got " +
                                    std::to_string(sizes[i])),
                    std::move(cb));
    }
    if ((pushes && ins[i] == nullptr) || (pulls && outs[i] == nullptr)) {
      return Failed(InvalidArgument("tensor " + std::to_string(i) + ": null buffer"),
                    std::move(cb));
    }
    infos.push_back(t);
  }
  auto req = NewRequest(type, kInvalidTable, std::move(cb));
  std::vector<const float*> part_src;  // regular parts: pushed values
  struct Fusion {
    std::vector<FusedSegment> segments;
    std::vector<const float*> srcs;
    Part part;
  };
  std::map<NodeId, Fusion> fusions;  // small slices, per server
  for (size_t i = 0; i < infos.size(); ++i) {
    const TableInfo* t = infos[i];
    for (const KeyRange& r : t->ranges) {
      const uint64_t first = t->RangeFirstElem(r);
      const uint64_t count = t->RangeEndElem(r) - first;
      if (count * sizeof(float) >= kFuseBelowBytes) {
        Part p;
        p.server = r.server;
        p.table = t->id;
        p.offset = first;
        p.count = count;
        if (pulls) {
          p.dst = outs[i] + first;
          p.value_count = count;
        }
        req->parts.push_back(std::move(p));
        part_src.push_back(pushes ? ins[i] + first : nullptr);
      } else {
        Fusion& f = fusions[r.server];
        FusedSegment seg;
        seg.table = t->id;
        seg.offset = first;
        seg.count = count;
        f.segments.push_back(seg);
        f.srcs.push_back(pushes ? ins[i] + first : nullptr);
        if (pulls) {
          f.part.pieces.emplace_back(outs[i] + first, count);
          f.part.value_count += count;
        }
      }
    }
  }
  const size_t regular = req->parts.size();
  std::vector<Fusion*> fused_of_part;
  for (auto& kv : fusions) {
    Part& p = kv.second.part;
    p.server = kv.first;
    p.table = 0;
    p.fused = true;
    p.count = kv.second.segments.size();
    req->parts.push_back(p);
    fused_of_part.push_back(&kv.second);
  }
  return Submit(
      req, map->epoch, /*borrows=*/pushes,
      [&](size_t i, const std::shared_ptr<const void>& borrow) {
        std::vector<Frame> frames;
        const Part& p = req->parts[i];
        if (i < regular) {
          if (pushes) frames.push_back(Frame::Borrow(part_src[i], p.count * sizeof(float), borrow));
          return frames;
        }
        const Fusion& f = *fused_of_part[i - regular];
        frames.push_back(Frame::Copy(f.segments.data(), f.segments.size() * sizeof(FusedSegment)));
        if (pushes) {  // fusion: the small slices copied once into one buffer
          uint64_t total = 0;
          for (const auto& seg : f.segments) total += seg.count;
          std::shared_ptr<float[]> values(new float[total == 0 ? 1 : total]);
          uint64_t at = 0;
          for (size_t k = 0; k < f.segments.size(); ++k) {
            std::memcpy(values.get() + at, f.srcs[k], f.segments[k].count * sizeof(float));
            at += f.segments[k].count;
          }
          frames.push_back(Frame::Borrow(values.get(), total * sizeof(float),
                                         std::shared_ptr<const void>(values, values.get())));
          ++copies_;
        }
        return frames;
      });
}

Ticket Worker::Impl::Sparse(MsgType type, TableId table, const Key* keys, size_t num_keys,
                            const float* rows, float* out, size_t rows_len, Callback cb) {
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kSparse, &map, &err);
  if (!t) return Failed(err, std::move(cb));
  const bool pushes = type != MsgType::kPull;
  err = CheckSparseArgs(*t, keys, num_keys, pushes ? rows : out, rows_len);
  if (!err.ok()) return Failed(err, std::move(cb));
  SparseBatch batch = PrepareSparse(type, *t, keys, num_keys, rows);
  if (pushes) ++copies_;
  std::function<Status(Request&)> finish;
  if (type == MsgType::kPull) {
    finish = [](Request& r) {
      pack::ScatterRows(r.inverse.data(), r.inverse.size(), r.staging.data(), r.dim, r.out);
      return Status::OK();
    };
  }
  return SendSparse(type, map, *t, std::move(batch), out, std::move(finish), std::move(cb));
}

Status Worker::Impl::CheckSparseArgs(const TableInfo& t, const Key* keys, size_t num_keys,
                                     const float* rows, size_t rows_len) const {
  const uint32_t dim = t.spec.dim;
  if (rows_len != num_keys * dim) {
    return InvalidArgument("table '" + t.spec.name + "' has dim " + std::to_string(dim) + ": " +
                           std::to_string(num_keys) + " keys need " +
                           std::to_string(num_keys * dim) + " values, got " +
                           std::to_string(rows_len));
  }
  if (num_keys > 0xFFFFFFFFull) return InvalidArgument("more than 2^32 keys in one request");
  if (num_keys > 0 && (keys == nullptr || rows == nullptr)) return InvalidArgument("null buffer");
  return Status::OK();
}

SparseBatch Worker::Impl::PrepareSparse(MsgType type, const TableInfo& t, const Key* keys,
                                        size_t num_keys, const float* rows) const {
  const uint32_t dim = t.spec.dim;
  const bool sums = type == MsgType::kPush || type == MsgType::kPushPull;
  std::vector<uint64_t> begins;
  for (const KeyRange& r : t.ranges) begins.push_back(r.begin);
  SparseBatch batch;
  batch.offsets.assign(begins.size() + 1, 0);
  auto bkeys = std::make_shared<std::vector<Key>>(num_keys);
  auto brows = std::make_shared<std::vector<float>>(sums ? num_keys * size_t{dim} : 0);
  std::vector<uint32_t> inverse(sums ? 0 : num_keys);
  // Unique keys grouped by server range (sorted within each), duplicates summed for
  // pushes; the inverse maps every caller position to its unique key.
  const size_t m =
      pack::CoalesceAndBucket(keys, sums ? rows : nullptr, num_keys, sums ? dim : 0, begins.data(),
                              begins.size(), bkeys->data(), sums ? brows->data() : nullptr,
                              sums ? nullptr : inverse.data(), batch.offsets.data());
  bkeys->resize(m);
  if (type == MsgType::kAssign) {  // the last row of a duplicated key wins
    brows->resize(m * size_t{dim});
    for (size_t i = 0; i < num_keys; ++i) {
      std::memcpy(brows->data() + size_t{inverse[i]} * dim, rows + i * dim, dim * sizeof(float));
    }
  }
  if (type == MsgType::kPull) batch.inverse = std::move(inverse);
  batch.keys = bkeys->data();
  batch.rows = type == MsgType::kPull ? nullptr : brows->data();
  batch.owner = std::make_shared<std::pair<decltype(bkeys), decltype(brows)>>(bkeys, brows);
  return batch;
}

Ticket Worker::Impl::SendSparse(MsgType type, const std::shared_ptr<const ClusterMap>& map,
                                const TableInfo& t, SparseBatch batch, float* out,
                                std::function<Status(Request&)> finish, Callback cb) {
  const uint32_t dim = t.spec.dim;
  const bool pushes = type != MsgType::kPull;
  auto req = NewRequest(type, t.id, std::move(cb));
  req->sparse = true;
  req->dim = dim;
  req->out = out;
  req->finish = std::move(finish);
  if (req->pulls()) {
    req->inverse = std::move(batch.inverse);
    req->staging.resize(batch.offsets.back() * size_t{dim});
  }
  for (size_t b = 0; b + 1 < batch.offsets.size(); ++b) {
    if (batch.offsets[b + 1] > batch.offsets[b]) {
      Part p;
      p.server = t.ranges[b].server;
      p.table = t.id;
      p.offset = batch.offsets[b];
      p.count = batch.offsets[b + 1] - batch.offsets[b];
      if (req->pulls()) {
        p.dst = req->staging.data() + p.offset * dim;
        p.value_count = p.count * dim;
      }
      req->parts.push_back(std::move(p));
    }
  }
  // The batch owns its buffers (no borrowed caller memory): nothing to wait for after send.
  return Submit(
      req, map->epoch, /*borrows=*/false, [&](size_t i, const std::shared_ptr<const void>&) {
        const Part& p = req->parts[i];
        std::vector<Frame> frames;
        frames.push_back(Frame::Borrow(batch.keys + p.offset, p.count * sizeof(Key), batch.owner));
        if (pushes) {
          frames.push_back(Frame::Borrow(batch.rows + p.offset * dim, p.count * dim * sizeof(float),
                                         batch.owner));
        }
        return frames;
      });
}

// ---- GPU memory -------------------------------------------------------------------------
//
// Pushes: pack on the caller's stream into pinned host buffers (which ZeroMQ then sends
// as they are), wait for that stream, send. Pulls: receive on the host, then enqueue the
// copy (and, sparse, the scatter kernel) on the caller's stream; the pinned/device
// temporaries are released in stream order.
#if LAYERPS_HAVE_CUDA

namespace {

std::string CudaError(const char* what, pack::gpu::Error e) {
  return std::string("CUDA ") + what + ": " + pack::gpu::ErrorString(e);
}

// Pinned host memory as a shared owner (freed when the last frame lets go).
StatusOr<std::shared_ptr<void>> NewPinned(size_t bytes) {
  void* p = nullptr;
  const pack::gpu::Error e = pack::gpu::AllocPinned(bytes == 0 ? 1 : bytes, &p);
  if (e != pack::gpu::kOk) return ResourceExhausted(CudaError("pinned allocation", e));
  return std::shared_ptr<void>(p, [](void* q) { pack::gpu::FreePinned(q); });
}

// Device memory allocated and freed in the order of `stream`.
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    error_ = cudaMallocAsync(&ptr_, bytes == 0 ? 1 : bytes, stream);
  }
  ~StreamBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  bool ok() const { return error_ == cudaSuccess; }
  cudaError_t error() const { return error_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  cudaError_t error_;
};

// Keeps `owner` alive until `stream` reaches this point, then drops it.
void ReleaseAfter(cudaStream_t stream, std::shared_ptr<const void> owner) {
  auto* held = new std::shared_ptr<const void>(std::move(owner));
  if (cudaLaunchHostFunc(
          stream, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, held) !=
      cudaSuccess) {
    cudaStreamSynchronize(stream);
    delete held;
  }
}

}  // namespace

Ticket Worker::Impl::PushDevice(TableId table, const float* grad, size_t n, void* stream,
                                Callback cb) {
  if (!Worker::DeviceSupport())
    return Failed(FailedPrecondition("no usable CUDA device"), std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  auto pinned = NewPinned(n * sizeof(float));
  if (!pinned.ok()) return Failed(pinned.status(), std::move(cb));
  float* host = static_cast<float*>(pinned->get());
  pack::gpu::Error e =
      grad ? pack::gpu::CopyAsync(host, grad, n * sizeof(float), s) : pack::gpu::kOk;
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk)
    return Failed(Internal(CudaError("device-to-host copy", e)), std::move(cb));
  return Dense(MsgType::kPush, table, grad ? host : nullptr, nullptr, n, std::move(cb), *pinned);
}

Ticket Worker::Impl::PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb) {
  if (!Worker::DeviceSupport())
    return Failed(FailedPrecondition("no usable CUDA device"), std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  auto pinned = NewPinned(n * sizeof(float));
  if (!pinned.ok()) return Failed(pinned.status(), std::move(cb));
  std::shared_ptr<const void> owner = *pinned;
  float* host = static_cast<float*>(pinned->get());
  return Dense(MsgType::kPull, table, nullptr, out ? host : nullptr, n, std::move(cb), owner,
               [out, host, n, s, owner](Request&) -> Status {
                 const pack::gpu::Error e = pack::gpu::CopyAsync(out, host, n * sizeof(float), s);
                 if (e != pack::gpu::kOk) return Internal(CudaError("host-to-device copy", e));
                 ReleaseAfter(s, owner);
                 return Status::OK();
               });
}

Ticket Worker::Impl::SparseDevice(MsgType type, TableId table, const Key* keys, size_t num_keys,
                                  const float* rows, float* out, size_t rows_len, void* stream,
                                  Callback cb) {
  if (!Worker::DeviceSupport())
    return Failed(FailedPrecondition("no usable CUDA device"), std::move(cb));
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kSparse, &map, &err);
  if (!t) return Failed(err, std::move(cb));
  const bool pushes = type == MsgType::kPush;
  err = CheckSparseArgs(*t, keys, num_keys, pushes ? rows : out, rows_len);
  if (!err.ok()) return Failed(err, std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  const uint32_t dim = t->spec.dim;
  const size_t buckets = t->ranges.size();

  if (!pushes) {
    // Pull: the keys come to the host (8 bytes each; the rows are the bulk), are
    // deduplicated and grouped there; the unique rows go back up and a kernel scatters
    // them to every position on the caller's stream.
    auto pinned_keys = NewPinned(num_keys * sizeof(Key));
    if (!pinned_keys.ok()) return Failed(pinned_keys.status(), std::move(cb));
    Key* hkeys = static_cast<Key*>(pinned_keys->get());
    pack::gpu::Error e = pack::gpu::CopyAsync(hkeys, keys, num_keys * sizeof(Key), s);
    if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
    if (e != pack::gpu::kOk)
      return Failed(Internal(CudaError("device-to-host copy", e)), std::move(cb));
    SparseBatch batch = PrepareSparse(MsgType::kPull, *t, hkeys, num_keys, nullptr);
    return SendSparse(
        MsgType::kPull, map, *t, std::move(batch), out,
        [s, dim](Request& r) -> Status {
          const size_t n = r.inverse.size();
          StreamBuffer uniq(r.staging.size() * sizeof(float), s);
          StreamBuffer inverse(n * sizeof(uint32_t), s);
          if (!uniq.ok() || !inverse.ok())
            return ResourceExhausted("CUDA device allocation failed");
          // Pageable sources: these copies return once the data is staged.
          pack::gpu::Error e = pack::gpu::CopyAsync(uniq.as<float>(), r.staging.data(),
                                                    r.staging.size() * sizeof(float), s);
          if (e == pack::gpu::kOk) {
            e = pack::gpu::CopyAsync(inverse.as<uint32_t>(), r.inverse.data(), n * sizeof(uint32_t),
                                     s);
          }
          if (e == pack::gpu::kOk) {
            e = pack::gpu::ScatterRows(inverse.as<uint32_t>(), n, uniq.as<float>(), dim, r.out, s);
          }
          return e == pack::gpu::kOk ? Status::OK() : Internal(CudaError("scatter", e));
        },
        std::move(cb));
  }

  // Push: coalesce and bucket on the GPU, copy exactly the packed bytes to pinned memory.
  std::vector<uint64_t> begins;
  for (const KeyRange& r : t->ranges) begins.push_back(r.begin);
  StreamBuffer d_begin(buckets * sizeof(uint64_t), s), d_keys(num_keys * sizeof(Key), s),
      d_rows(num_keys * dim * sizeof(float), s), d_offsets((buckets + 1) * sizeof(size_t), s);
  if (!d_begin.ok() || !d_keys.ok() || !d_rows.ok() || !d_offsets.ok()) {
    return Failed(ResourceExhausted("CUDA device allocation failed"), std::move(cb));
  }
  auto pinned_keys = NewPinned(num_keys * sizeof(Key));
  auto pinned_rows = NewPinned(num_keys * dim * sizeof(float));
  auto pinned_offsets = NewPinned((buckets + 1) * sizeof(size_t));
  if (!pinned_keys.ok() || !pinned_rows.ok() || !pinned_offsets.ok()) {
    return Failed(ResourceExhausted("pinned allocation failed"), std::move(cb));
  }
  pack::gpu::Workspace ws;
  pack::gpu::Error e =
      pack::gpu::CopyAsync(d_begin.as<uint64_t>(), begins.data(), buckets * sizeof(uint64_t), s);
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CoalesceAndBucket(keys, rows, num_keys, dim, d_begin.as<uint64_t>(), buckets,
                                     d_keys.as<Key>(), d_rows.as<float>(), nullptr,
                                     d_offsets.as<size_t>(), &ws, s);
  }
  const size_t* d_count = d_offsets.as<size_t>() + buckets;
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyCountedAsync(pinned_keys->get(), d_keys.as<Key>(), d_count, sizeof(Key),
                                    num_keys, s);
  }
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyCountedAsync(pinned_rows->get(), d_rows.as<float>(), d_count,
                                    dim * sizeof(float), num_keys, s);
  }
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyAsync(pinned_offsets->get(), d_offsets.as<size_t>(),
                             (buckets + 1) * sizeof(size_t), s);
  }
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk) return Failed(Internal(CudaError("packing", e)), std::move(cb));
  SparseBatch batch;
  const size_t* offsets = static_cast<const size_t*>(pinned_offsets->get());
  batch.offsets.assign(offsets, offsets + buckets + 1);
  if (batch.offsets.back() > num_keys)
    return Failed(Internal("GPU packing returned a bad count"), std::move(cb));
  batch.keys = static_cast<const Key*>(pinned_keys->get());
  batch.rows = static_cast<const float*>(pinned_rows->get());
  batch.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
      *pinned_keys, *pinned_rows);
  ++copies_;
  return SendSparse(MsgType::kPush, map, *t, std::move(batch), nullptr, nullptr, std::move(cb));
}

bool Worker::DeviceSupport() {
  static const bool available = pack::gpu::DeviceAvailable();
  return available;
}

#else  // !LAYERPS_HAVE_CUDA

Ticket Worker::Impl::PushDevice(TableId, const float*, size_t, void*, Callback cb) {
  return Failed(FailedPrecondition("LayerPS was built without CUDA"), std::move(cb));
}
Ticket Worker::Impl::PullDevice(TableId, float*, size_t, void*, Callback cb) {
  return Failed(FailedPrecondition("LayerPS was built without CUDA"), std::move(cb));
}
Ticket Worker::Impl::SparseDevice(MsgType, TableId, const Key*, size_t, const float*, float*,
                                  size_t, void*, Callback cb) {
  return Failed(FailedPrecondition("LayerPS was built without CUDA"), std::move(cb));
}
bool Worker::DeviceSupport() { return false; }

#endif  // LAYERPS_HAVE_CUDA

Worker::Worker(Options options) : impl_(new Impl(std::move(options))) {}
Worker::~Worker() { impl_->Stop(); }
Status Worker::Start() { return impl_->Start(); }
void Worker::Stop() { impl_->Stop(); }
NodeId Worker::id() const { return impl_->id(); }
uint32_t Worker::rank() const { return impl_->rank(); }
int Worker::num_workers() const { return impl_->CountRole(Role::kWorker); }
int Worker::num_servers() const { return impl_->CountRole(Role::kServer); }
std::vector<NodeInfo> Worker::Nodes() const { return impl_->Nodes(); }
StatusOr<TableId> Worker::DeclareTable(const TableSpec& spec) { return impl_->DeclareTable(spec); }
StatusOr<TableSpec> Worker::GetTableSpec(TableId table) const { return impl_->GetTableSpec(table); }

Ticket Worker::Push(TableId table, const float* grad, size_t n, Callback cb) {
  return impl_->Dense(MsgType::kPush, table, grad, nullptr, n, std::move(cb));
}
Ticket Worker::Pull(TableId table, float* out, size_t n, Callback cb) {
  return impl_->Dense(MsgType::kPull, table, nullptr, out, n, std::move(cb));
}
Ticket Worker::PushPull(TableId table, const float* grad, float* out, size_t n, Callback cb) {
  return impl_->Dense(MsgType::kPushPull, table, grad, out, n, std::move(cb));
}
Ticket Worker::Assign(TableId table, const float* values, size_t n, Callback cb) {
  return impl_->Dense(MsgType::kAssign, table, values, nullptr, n, std::move(cb));
}
Ticket Worker::PushSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                          size_t rows_len, Callback cb) {
  return impl_->Sparse(MsgType::kPush, table, keys, num_keys, rows, nullptr, rows_len,
                       std::move(cb));
}
Ticket Worker::PullSparse(TableId table, const Key* keys, size_t num_keys, float* rows,
                          size_t rows_len, Callback cb) {
  return impl_->Sparse(MsgType::kPull, table, keys, num_keys, nullptr, rows, rows_len,
                       std::move(cb));
}
Ticket Worker::AssignSparse(TableId table, const Key* keys, size_t num_keys, const float* rows,
                            size_t rows_len, Callback cb) {
  return impl_->Sparse(MsgType::kAssign, table, keys, num_keys, rows, nullptr, rows_len,
                       std::move(cb));
}
Ticket Worker::PushMany(const std::vector<DenseRef>& tensors, Callback cb) {
  std::vector<TableId> tables;
  std::vector<const float*> ins;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    tables.push_back(t.table);
    ins.push_back(t.data);
    sizes.push_back(t.size);
  }
  return impl_->Many(MsgType::kPush, tables, ins, std::vector<float*>(tensors.size()), sizes,
                     std::move(cb));
}
Ticket Worker::PullMany(const std::vector<DenseOut>& tensors, Callback cb) {
  std::vector<TableId> tables;
  std::vector<float*> outs;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    tables.push_back(t.table);
    outs.push_back(t.data);
    sizes.push_back(t.size);
  }
  return impl_->Many(MsgType::kPull, tables, std::vector<const float*>(tensors.size()), outs, sizes,
                     std::move(cb));
}
Ticket Worker::PushPullMany(const std::vector<DenseRef>& grads, const std::vector<DenseOut>& outs,
                            Callback cb) {
  if (grads.size() != outs.size()) {
    return impl_->Failed(
        InvalidArgument("PushPullMany: " + std::to_string(grads.size()) + " gradients but " +
                        std::to_string(outs.size()) + " outputs"),
        std::move(cb));
  }
  std::vector<TableId> tables;
  std::vector<const float*> ins;
  std::vector<float*> out_ptrs;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < grads.size(); ++i) {
    // A pushpull reads and writes one table: both sides must name the same table and size.
    if (grads[i].table != outs[i].table || grads[i].size != outs[i].size) {
      return impl_->Failed(InvalidArgument("PushPullMany: tensor " + std::to_string(i) +
                                           " names different tables or sizes for grad and out"),
                           std::move(cb));
    }
    tables.push_back(grads[i].table);
    ins.push_back(grads[i].data);
    out_ptrs.push_back(outs[i].data);
    sizes.push_back(grads[i].size);
  }
  return impl_->Many(MsgType::kPushPull, tables, ins, out_ptrs, sizes, std::move(cb));
}
Ticket Worker::PushDevice(TableId table, const float* grad, size_t n, void* stream, Callback cb) {
  return impl_->PushDevice(table, grad, n, stream, std::move(cb));
}
Ticket Worker::PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb) {
  return impl_->PullDevice(table, out, n, stream, std::move(cb));
}
Ticket Worker::PushSparseDevice(TableId table, const Key* keys, size_t num_keys, const float* rows,
                                size_t rows_len, void* stream, Callback cb) {
  return impl_->SparseDevice(MsgType::kPush, table, keys, num_keys, rows, nullptr, rows_len, stream,
                             std::move(cb));
}
Ticket Worker::PullSparseDevice(TableId table, const Key* keys, size_t num_keys, float* rows,
                                size_t rows_len, void* stream, Callback cb) {
  return impl_->SparseDevice(MsgType::kPull, table, keys, num_keys, nullptr, rows, rows_len, stream,
                             std::move(cb));
}
Status Worker::Wait(Ticket ticket, std::chrono::milliseconds timeout) {
  return impl_->Wait(ticket, timeout);
}
Status Worker::Barrier(Group group, std::chrono::milliseconds timeout) {
  return impl_->Barrier(group, timeout);
}
WorkerStats Worker::stats() const { return impl_->stats(); }

}  // namespace ps
