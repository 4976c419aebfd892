// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// RequestTracker: the life of a worker's requests, whatever they carry. A request is a
// set of parts (one message each, to one peer); the tracker registers it under a ticket,
// sends its parts, matches each reply to its part by the part index the reply echoes,
// copies pulled values to their destination, fails parts whose peer died or whose
// deadline passed, and completes the request when every part is answered AND the
// transport released every borrowed push frame (so the caller may reuse its buffer as
// soon as Wait returns).
//
// A part is "claimed" exactly once (by its reply, a failure, a timeout or Stop) under the
// request's mutex; each claim and the release of the borrowed frames drop one unit of
// `pending`; whoever drops the last unit finalizes the request. Requests completed by the
// transport releasing their last frame are finalized on the tracker's completion thread,
// so callbacks never run on a ZeroMQ I/O thread or (over inproc) a server's thread.
//
// Its units, each with its own tests (tests/unit/request_units_test.cc): the ticket table
// and the waits on it (RequestTable, worker/request_table.h), the completion thread
// (CompletionThread, worker/completion_thread.h), and where the parts of a dead server go
// while it is replaced (ServerFailover, worker/server_failover.h). What stays here: the
// life of a request (parts claimed once, pending units, finalization), sending, replies,
// deliveries, failures and expiry.
//
// Thread-safety: every public member may be called from any thread after Start().
#ifndef PS_WORKER_REQUEST_TRACKER_H_
#define PS_WORKER_REQUEST_TRACKER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/mutex.h"
#include "ps/options.h"
#include "ps/status.h"
#include "ps/types.h"
#include "metrics/metrics.h"
#include "ps/worker.h"
#include "transport/message.h"
#include "worker/server_failover.h"

namespace ps {

// One message of a request, to one peer.
struct Part {
  NodeId server = kUnassignedId;  // the peer that answers it
  TableId table = kInvalidTable;  // 0 for fused parts
  uint64_t offset = 0;            // dense: element offset; sparse: position in the unique keys
  uint64_t count = 0;             // elements, keys, or (fused) segments
  // Sparse parts of a request over several tables (Request::dim 0: SparseMany): the row
  // width of this part's table, 0 for a fused part. Other requests say it in Request::dim.
  uint32_t dim = 0;
  bool fused = false;
  bool claimed = false;
  // How values travel (pack::WireType's value: 0 float32, 1 float16, 2 bfloat16; fused
  // parts: 0): the header says it, pushed frames are already narrowed, and pulled values
  // in the reply (which must say the same) are widened into dst.
  uint8_t wire = 0;
  // One of several parts a server's share of a dense tensor was split into
  // (Options::part_bytes): its error names the part and says the others may be applied.
  bool split = false;
  uint32_t clock = 0;  // bsp/ssp tables: the worker's clock (header.clock)
  // The message's ordering lane (Message::lane): parts that must not overtake each other
  // (the same part of one dense share, any part of one sparse table) share one.
  uint32_t lane = 0;
  // Pulls: the reply carries value_count floats, written to dst, or (fused) split over
  // pieces in order.
  float* dst = nullptr;
  uint64_t value_count = 0;
  // Deliver adds the values to dst instead of copying them (the reduce step of a
  // collective: one pass over memory instead of a copy and a sum).
  bool accumulate = false;
  std::vector<std::pair<float*, uint64_t>> pieces;
  // A single-table sparse pull whose rows go straight from the replies to the caller:
  // the reply's frame is kept here (its value_count floats checked) instead of being
  // copied to dst, for the request's `finish` to scatter (PsRequests::ScatterReplies).
  bool keep_reply = false;
  Frame reply;
  // Peer tensors: the element type the message carries (header.dim, a DataType value;
  // 0 = float32), checked on delivery (a receive) and written to the header (a send).
  uint8_t dtype = 0;
  // A receive with a sink: Deliver checks the type and, unless sink_bytes is kAnyBytes,
  // that `bytes` equals sink_bytes, claims the part, then hands the payload to the sink
  // (instead of copying value_count floats to dst). The collectives combine, widen or
  // stage what arrives this way.
  std::function<void(const void* data, size_t bytes)> sink;
  uint64_t sink_bytes = 0;
  // Its payload, kept until it is answered while the cluster may replace servers
  // (RequestTracker::SetRetain), to send it again to a dead server's replacement.
  std::vector<Frame> frames;
  // Submit has routed it and recorded its payload (under SetRetain). Until then a
  // Retarget leaves it alone: Submit's own routing sends it to the replacement, with its
  // payload (a retarget in between once sent it a second time, without its frames).
  bool routed = false;
};

// Part::sink_bytes for a sink that takes any number of bytes.
constexpr uint64_t kAnyBytes = ~uint64_t{0};

struct TrackerState;

// n floats in a buffer of a BufferPool (uninitialized; back to the pool when the last
// holder is gone), or none.
class PooledFloats {
 public:
  void Reset(BufferPool& pool, size_t n) {
    buf_ = pool.Get(std::max<size_t>(n, 1) * sizeof(float));
    n_ = n;
  }
  // A buffer of at least n floats from elsewhere (the device path's pinned memory).
  void Adopt(std::shared_ptr<uint8_t> buf, size_t n) {
    buf_ = std::move(buf);
    n_ = n;
  }
  // The buffer's owner: keeps the floats alive past the request (copies in flight).
  const std::shared_ptr<uint8_t>& buffer() const { return buf_; }
  float* data() { return reinterpret_cast<float*>(buf_.get()); }
  const float* data() const { return reinterpret_cast<const float*>(buf_.get()); }
  size_t size() const { return n_; }

 private:
  std::shared_ptr<uint8_t> buf_;
  size_t n_ = 0;
};

struct Request {
  Ticket ticket = 0;
  MsgType type = MsgType::kPush;
  TableId table = kInvalidTable;  // kInvalidTable: a request over several tables
  bool sparse = false;
  uint32_t dim = 0;  // sparse: the row width; 0 when the parts say theirs (Part::dim)
  int64_t deadline_ms = 0;
  // When it was created and when its messages were handed to the transport (latency
  // histograms, the timeline).
  std::chrono::steady_clock::time_point queued, sent;
  Worker::Callback callback;
  std::weak_ptr<TrackerState> tracker;

  // Dense pulls write here (indexed by element). Sparse pulls either keep each part's
  // reply (Part::keep_reply) or stage the unique rows here; `finish` then moves the rows
  // to `out` through `inverse`.
  float* out = nullptr;
  PooledFloats staging;
  std::vector<uint32_t> inverse;
  // Runs once every part succeeded, before the request completes (under `mu`): moves
  // the pulled values to their final place. Its error becomes the request's.
  std::function<Status(Request&)> finish;
  // Memory the request's buffers live in (e.g. pinned staging), held until it is gone.
  std::shared_ptr<const void> keep;
  // A posted receive from any peer: the node whose tensor answered it (set by Deliver
  // once its part is claimed, read by `finish`).
  NodeId source = kUnassignedId;

  Mutex mu;
  CondVar cv;
  // Fixed once the request is tracked; only each part's `claimed`, `routed`, `server`
  // and `frames` change after that, read and written under `mu` (not annotated: a member
  // of Part cannot name its request's mutex), and its `reply`, written once by the thread
  // that claimed the part and read by `finish`, as the pulled values are.
  std::vector<Part> parts;
  Status status GUARDED_BY(mu);  // the first error
  bool done GUARDED_BY(mu) = false;  // completed, and its callback (if any) returned
  // Expire dropped the connections of its parts' peers once (every part answered or
  // failed, but the transport still held frames that borrow the caller's buffer).
  bool connections_dropped GUARDED_BY(mu) = false;
  std::atomic<int> pending{0};
  // Its waiter receives its replies itself (RequestTracker::SetWaitReceiver): a
  // completion on another thread must wake that receive.
  std::atomic<bool> waiter_receives{false};

  bool pulls() const { return type == MsgType::kPull || type == MsgType::kPushPull; }
};

// Counters of a tracker (WorkerStats' source).
struct TrackerStats {
  std::atomic<uint64_t> sent{0}, replies{0}, bad{0}, bytes_out{0}, bytes_in{0}, copies{0};
  // Parts sent again, to a dead server's replacement (RequestTracker::Retarget).
  std::atomic<uint64_t> resent{0};
  // Worker caches (TableSpec::cache_rows): unique ids of pulls answered by the cache, and
  // sent to the servers.
  std::atomic<uint64_t> cache_hits{0}, cache_misses{0};
};

class RequestTracker {
 public:
  // Sends one message to a peer (the node runtime's Send).
  using SendFn = std::function<Status(NodeId, Message&&)>;
  // Builds the payload frames of part i; `borrow` is the token that frames lending
  // caller memory must hold (null when the request borrows nothing).
  using FramesFn = std::function<std::vector<Frame>(size_t, const std::shared_ptr<const void>&)>;

  RequestTracker(const MemberOptions& options, SendFn send);
  ~RequestTracker();  // Stop()
  RequestTracker(const RequestTracker&) = delete;
  RequestTracker& operator=(const RequestTracker&) = delete;

  // Starts the completion thread. Stop() fails what is outstanding with `why`, runs the
  // completions still queued and joins the thread. Idempotent.
  void Start();
  void Stop(const Status& why);
  // Every completed request from now on is written to `timeline` (null: none).
  void SetTimeline(std::shared_ptr<class Timeline> timeline);
  // Requests in flight and the round-trip latency histograms, by kind.
  void CollectMetrics(std::vector<metrics::Sample>* out) const;

  // A new request (not yet registered) with its deadline set.
  std::shared_ptr<Request> New(MsgType type, TableId table, Worker::Callback cb);
  // A request that failed before anything was sent: completes at once with `status`.
  Ticket Failed(const Status& status, Worker::Callback cb);
  // Registers a request whose parts are filled in and sends them; returns its ticket.
  // `borrows`: its frames lend caller memory, so it completes only once the transport
  // let go of them. A part that cannot be sent is claimed with the error.
  Ticket Submit(const std::shared_ptr<Request>& req, uint64_t epoch, bool borrows,
                const FramesFn& frames_for);

  // Registers a request whose parts are answered locally (Deliver), not by replies to
  // messages it sends: a posted receive. Its parts still fail when their peer dies or
  // their deadline passes.
  Ticket Expect(const std::shared_ptr<Request>& req);
  // Answers part `part` of request `ticket` with `status` and, when OK, `bytes` of values
  // copied to the part's destination (they must be value_count floats, else the part
  // fails with kInvalidArgument). False when the request is gone or the part already
  // claimed (it expired, or its peer died): the caller may offer the data elsewhere.
  // `source`, when given, is recorded as the request's `source` (a receive from any peer).
  // `dtype`: the element type the payload carries (a DataType value), which must be the
  // part's.
  bool Deliver(Ticket ticket, size_t part, const Status& status, const void* data, size_t bytes,
               NodeId source = kUnassignedId, uint8_t dtype = 0);
  // Claims every unclaimed part of request `ticket` with `why` (nothing if it is gone).
  // The request completes once its borrowed frames, if any, are released too.
  void Cancel(Ticket ticket, const Status& why);

  // The request's status once it completed. When `timeout` passes first: kTimeout
  // ("still in flight") and, if `in_flight` is given, *in_flight = true (a request that
  // itself failed with kTimeout sets it false: the two are told apart without reading
  // the message).
  Status Wait(Ticket ticket, std::chrono::milliseconds timeout, bool* in_flight = nullptr);
  // Receiving in the waiting thread (WorkerOptions::wait_receive_us): Wait first hands a
  // small request (at most kWaitReceiveFloats values over at most kWaitReceiveParts
  // parts) to `receive`, which may take the replies on the waiting thread
  // (NodeRuntime::ReceiveWhile) until `done` holds; `wake` ends such a receive when the
  // request completes on another thread (a borrowed frame let go late, an expiry). Set
  // before Start; null: off.
  using WaitReceiver = std::function<bool(Ticket, const std::function<bool()>& done)>;
  void SetWaitReceiver(WaitReceiver receive, std::function<void()> wake);
  static constexpr uint64_t kWaitReceiveFloats = 16384;  // 64 KiB of float32
  static constexpr size_t kWaitReceiveParts = 4;
  // Waits until every push, pull, push-pull and assign registered before the call has
  // completed, waited for or not (their tickets stay valid for Wait, which reports each
  // one's status). Peer sends and receives are not waited for. kTimeout, saying how many
  // are still in flight, when `timeout` passes first.
  Status Flush(std::chrono::milliseconds timeout);

  // A reply (MsgType::kReply) from the receive thread.
  void OnReply(Message&& msg);
  // Fails every unclaimed part for which `match` holds, with `why`.
  void FailMatching(const std::function<bool(const Part&)>& match, const Status& why);
  // Fails the parts whose deadline passed. `drop_connection` is called for each peer that
  // did not answer them (a part of no particular peer, server == kUnassignedId, names
  // none) before any of those requests completes, so that a request the caller makes
  // once its Wait returned finds the connection already dropped and opens a new one,
  // instead of racing the drop. A request past its deadline whose parts were all
  // claimed but whose borrowed frames the transport still holds (queued for a peer that
  // died or failed) has the connections of all its parts' peers dropped once: no
  // request outlives its deadline by more than a tick.
  void Expire(const std::function<void(NodeId)>& drop_connection);

  // Server replacement (the scheduler's replace_servers_ms; docs/checkpoints.md).
  // SetRetain(true): every part keeps its payload until it is answered. Park(server):
  // the server died and a replacement may take its rank: its unanswered parts, and new
  // ones, wait (each within its deadline). Retarget(dead, fresh, epoch): the server of
  // the same rank joined: the waiting parts go to it, and so do later parts built from
  // a map that still names the dead one.
  // (The unit: ServerFailover, worker/server_failover.h.)
  void SetRetain(bool retain) { failover_.SetRetain(retain); }
  using ParkedServer = ServerFailover::ParkedServer;
  void Park(NodeId server, uint32_t rank, NodeId successor);
  bool IsParked(NodeId server) const;
  std::map<NodeId, ParkedServer> Parked() const;
  void Retarget(NodeId dead, NodeId fresh, uint64_t epoch);

  TrackerStats& stats() { return *stats_; }
  const TrackerStats& stats() const { return *stats_; }

 private:
  const MemberOptions options_;
  const SendFn send_;
  WaitReceiver wait_receiver_;
  std::shared_ptr<TrackerState> state_;
  std::unique_ptr<TrackerStats> stats_;
  std::atomic<Ticket> next_ticket_{1};
  // Lock order: the failover's lock, then a request's mu.
  ServerFailover failover_;
};

}  // namespace ps

#endif  // PS_WORKER_REQUEST_TRACKER_H_
