// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// NodeRuntime: what every server and worker does beside its own work (the membership
// client). It binds the node's receive socket, registers with the scheduler (token,
// endpoint), keeps the cluster map, sends heartbeats, notices a lost scheduler, and runs
// the control exchanges (declare table, barrier). Data messages from members are
// dispatched by kind to the handler the owner registered for that kind (Handle); a kind
// nobody registered is counted as a bad message and dropped.
//
// Threads: a receive thread (calls the handlers) and a heartbeat thread, both started
// by Start() and joined by Stop(). Handlers run on the receive thread, one at a time,
// except on_node_dead(kSchedulerId) (the scheduler is lost), which the heartbeat thread
// calls: it may run concurrently with the others; and except the data handlers of the
// messages a waiting thread takes in ReceiveWhile, which run on that thread, still one
// at a time with every other handler (the receive side has one owner at a time).
#ifndef PS_NODE_NODE_RUNTIME_H_
#define PS_NODE_NODE_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/cluster_map.h"
#include "common/mutex.h"
#include "ps/options.h"
#include "ps/status.h"
#include "ps/types.h"
#include "transport/transport.h"

namespace ps {

class NodeRuntime {
 public:
  // A data message of one kind, from a live member (header checked; frames not yet).
  using DataHandler = std::function<void(Message&&)>;

  struct Handlers {
    // A newer cluster map was installed (the old one is still readable by others).
    // Returns the tables the node could not set up, with the reason, for the scheduler.
    std::function<std::vector<std::pair<TableId, Status>>(const std::shared_ptr<const ClusterMap>&)>
        on_map;
    // A peer was declared dead by the scheduler, or the scheduler is lost (kSchedulerId).
    // `left`: the peer left the cluster itself (a worker's Stop), not a crash.
    std::function<void(NodeId, const Status&, bool left)> on_node_dead;
    // A peer left the cluster itself: called before sends to it are refused and before
    // on_node_dead, so that the owner knows why a send to it fails from then on. Receive
    // thread.
    std::function<void(NodeId)> on_node_left;
    // A server died and a replacement may take its place (the scheduler's
    // replace_servers_ms): called before sends to it are refused and before
    // on_node_dead, so the owner can hold what it would send there. Receive thread.
    // `successor`: the server that took over its ranges (replication), else kUnassignedId.
    std::function<void(NodeId, NodeId successor)> on_server_replaceable;
    // The scheduler ended the cluster as failed (e.g. a worker died and the job does not
    // tolerate it): the owner fails what is pending and refuses what comes with `why`.
    // Receive thread.
    std::function<void(const Status&)> on_failure;
    // Periodic tick on the receive thread (about every 50 ms).
    std::function<void()> on_tick;
    // A worker joined (Worker::Join): it takes no further part in synchronous steps.
    // Receive thread.
    std::function<void(NodeId)> on_worker_joined;
    // Servers: the scheduler asks for this server's file of checkpoint set `set` under
    // `dir` (docs/checkpoints.md); returns the file written. Receive thread (no data
    // request is handled meanwhile).
    std::function<StatusOr<std::string>(uint64_t set, const std::string& dir)> on_checkpoint;
  };

  // restores: a server restoring from checkpoints (ServerOptions::restore_dir), which it
  // tells the scheduler when it registers.
  NodeRuntime(const MemberOptions& options, Role role, Handlers handlers, bool restores = false);
  ~NodeRuntime();

  // Registers the handler of a data message kind (one per kind). Call before Start().
  void Handle(MsgType type, DataHandler handler);

  // Bind, register, wait for the first full cluster map. Bounded by connect_timeout_ms.
  Status Start();
  // Tells the scheduler this node leaves (workers), then stops the threads and closes
  // the transport. Idempotent.
  void Stop(bool send_leave);

  // Waits until the scheduler sends Shutdown (OK or its failure), the scheduler is lost
  // (kUnavailable), Stop() (kAborted), or the timeout (kTimeout).
  Status WaitShutdown(std::chrono::milliseconds timeout);

  // Receiving in the waiting thread (WorkerOptions::wait_receive_us): the calling thread
  // takes the transport's receive side from the receive thread for at most `budget`, so
  // that the reply it waits for is handled where it is awaited instead of waking it from
  // the receive thread. It receives until `done()` holds and runs the data handler of
  // each message for which `mine` holds (a message from a live member, not a control
  // message); the first other message ends it and is handed back to the receive thread,
  // which handles it before anything else, so messages keep their order. Returns whether
  // `done()` held. False at once when the transport cannot wake its receiver, when
  // another thread receives in its wait, when messages handed back are not handled yet,
  // when the receive thread waited too long for its turn (ticks and control messages
  // come first), on the receive thread itself, or once Stop began. Thread-safe.
  bool ReceiveWhile(const std::function<bool(const Message&)>& mine,
                    const std::function<bool()>& done, std::chrono::microseconds budget);
  // Ends the current Recv of whoever holds the receive side (a waiting thread's request
  // was completed by another thread). Thread-safe.
  void WakeReceiver() { transport_->WakeRecv(); }

  // Sends to a member of the cluster (connecting on first use). Waits at most
  // `timeout_ms` (default: request_timeout_ms) when the peer's queue is full. A peer the
  // scheduler declared dead is never reconnected.
  Status Send(NodeId to, Message&& msg, int timeout_ms = -1);
  // Closes the send path to a peer, discarding what is queued for it (and releasing the
  // buffers those frames borrowed); the next Send to it reconnects. Thread-safe.
  void DropConnection(NodeId peer) { transport_->Disconnect(peer); }
  StatusOr<TableId> DeclareTable(const TableSpec& spec, std::chrono::milliseconds timeout);
  // Worker::SetLearningRate: returns once every live server and worker has the map with
  // the new rate (the scheduler answers then).
  Status SetLearningRate(TableId table, float learning_rate, std::chrono::milliseconds timeout);
  // Worker::DropTable: returns once this node's map no longer lists the table.
  Status DropTable(const std::string& name, std::chrono::milliseconds timeout);
  // Worker::Checkpoint: returns the set's directory once every server wrote its file.
  StatusOr<std::string> Checkpoint(const std::string& dir, std::chrono::milliseconds timeout);
  // `participants` (when not null): on OK, how many members took part.
  Status Barrier(Group group, std::chrono::milliseconds timeout, int* participants = nullptr);
  // Worker::Join: tells the scheduler this worker joined and waits until every live
  // worker has; `joined` (when not null): on OK, how many workers joined.
  Status Join(std::chrono::milliseconds timeout, int* joined = nullptr);
  // Asks the scheduler to install a placement; returns once this node's map shows it.
  Status InstallPlacement(const std::vector<LayerServers>& placement,
                          std::chrono::milliseconds timeout);

  std::shared_ptr<const ClusterMap> map() const;
  NodeId id() const { return id_.load(); }
  uint32_t rank() const { return rank_.load(); }
  std::string endpoint() const { return endpoint_; }
  bool running() const { return running_.load(); }
  const MemberOptions& options() const { return options_; }
  uint64_t bad_messages() const { return bad_messages_.load(); }
  // Data messages handled by waiting threads (ReceiveWhile) since Start.
  uint64_t messages_in_wait() const { return messages_in_wait_.load(); }
  // Bytes and messages per peer and per table since Start (see ps::TrafficStats).
  TrafficStats traffic() const;
  void CountBadMessage() { bad_messages_.fetch_add(1); }

 private:
  struct PendingCall {  // a control request awaiting its reply
    bool done = false;
    Status status;
    uint32_t value = 0;
    std::string detail;  // CallReply's detail
    std::string request;  // the serialized pb::Control, sent again to a restarted scheduler
  };

  void ReceiveLoop();
  // What the receive thread does with one Recv's outcome (or a handed-back message).
  void HandleReceived(const Status& s, Message&& msg);
  // Counts a message about to be sent to (or just received from) `peer`.
  void Count(NodeId peer, const Message& msg, bool sent);
  // A control message to the scheduler, counted.
  Status SendToScheduler(Message&& msg, int timeout_ms);
  // How long a control message may wait for room in the scheduler's queue (shared by
  // node_runtime*.cc).
  static constexpr int kControlSendTimeoutMs = 5000;
  // True when a data message comes from a live member: the header's sender is in the
  // map and the message arrived on that node's identity ("n" + its tag).
  bool FromMember(const Message& msg) const;
  // Runs the handler of a data message from a live member.
  void Dispatch(Message&& msg);
  // A data message whose sender is not in this node's map, but which was sent under a
  // newer map (a peer that got the map first, at start or after a join): parked until
  // that map is installed here, within kMaxEarly messages and kMaxEarlyBytes. Receive
  // thread only. ReplayEarly() dispatches the parked ones a new map vouches for.
  bool ParkEarly(Message* msg);
  void ReplayEarly();
  static constexpr size_t kMaxEarly = 1024;
  static constexpr uint64_t kMaxEarlyBytes = uint64_t{256} << 20;
  std::deque<Message> early_;
  uint64_t early_bytes_ = 0;
  void HeartbeatLoop();
  // Scheduler recovery (scheduler_recovery_ms > 0; docs/recovery.md). Heartbeat thread.
  // Returns false once the node gave up on the scheduler (it shut down).
  bool AwaitScheduler(Ticker* ticker);
  Message RejoinMessage();
  void HandleControl(Message&& msg);
  std::vector<std::pair<TableId, Status>> InstallMap(std::shared_ptr<const ClusterMap> map);
  void FinishShutdown(const Status& status);
  StatusOr<uint32_t> CallScheduler(const std::function<void(uint64_t, void*)>& fill,
                                   std::chrono::milliseconds timeout, const char* what,
                                   std::string* detail = nullptr);

  const MemberOptions options_;
  // What heartbeats are sent and judged by (common/clock.h): the steady clock, or a test's.
  const std::shared_ptr<Clock> clock_ = ClockOf(options_);
  const Role role_;
  const bool restores_;
  const Handlers handlers_;
  std::map<uint16_t, DataHandler> data_handlers_;  // fixed once Start() began
  std::unique_ptr<Transport> transport_;
  std::string endpoint_;
  std::atomic<NodeId> id_{kUnassignedId};
  std::atomic<uint32_t> rank_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> bad_messages_{0};
  std::atomic<uint64_t> messages_in_wait_{0};
  std::atomic<int64_t> last_scheduler_contact_ms_{0};
  // Control messages from the scheduler so far: AwaitScheduler ends when it grows (a
  // manual clock may not have moved since the wait began).
  std::atomic<uint64_t> scheduler_messages_{0};
  std::atomic<bool> handling_control_{false};  // the receive thread is in HandleControl
  std::thread recv_thread_;
  std::thread heartbeat_thread_;

  mutable Mutex mu_;
  CondVar cv_;
  std::shared_ptr<const ClusterMap> map_ GUARDED_BY(mu_);
  bool registered_ GUARDED_BY(mu_) = false;
  Status register_status_ GUARDED_BY(mu_);
  bool shutdown_ GUARDED_BY(mu_) = false;
  Status shutdown_status_ GUARDED_BY(mu_);
  uint64_t next_call_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, PendingCall> calls_ GUARDED_BY(mu_);
  std::set<NodeId> dead_ GUARDED_BY(mu_);  // declared dead, never reconnected
  std::map<uint32_t, uint64_t> barriers_passed_ GUARDED_BY(mu_);  // by ps::Group
  bool scheduler_lost_ GUARDED_BY(mu_) = false;  // AwaitScheduler runs
  // Who owns the transport's receive side (ReceiveWhile): the receive thread, or one
  // waiting thread at a time. Lock order: recv_mu_ before mu_.
  Mutex recv_mu_;
  CondVar recv_cv_;
  bool recv_thread_in_ GUARDED_BY(recv_mu_) = false;  // receiving or handling
  bool waiter_in_ GUARDED_BY(recv_mu_) = false;       // a waiting thread receives
  bool waiter_wants_ GUARDED_BY(recv_mu_) = false;    // one waits for the receive thread
  // The receive thread waited a whole poll period for its turn: waiters stay out until
  // it had one.
  bool recv_starved_ GUARDED_BY(recv_mu_) = false;
  std::deque<Message> handed_back_ GUARDED_BY(recv_mu_);
  // When a waiter last gave the receive side back: the receive thread takes it again
  // only once none had it for kWaitReceiveGraceUs (a caller's next small request
  // usually comes sooner, and takes it without a wake).
  std::chrono::steady_clock::time_point last_release_ GUARDED_BY(recv_mu_);
  static constexpr int kWaitReceiveGraceUs = 500;
  mutable Mutex traffic_mu_;
  TrafficStats traffic_ GUARDED_BY(traffic_mu_);
  // This node's secret with the scheduler (fixed by Start) and its data identity
  // (received at registration, before any data is sent).
  std::string secret_;
  std::string tag_ GUARDED_BY(mu_);
};

// Milliseconds on the steady clock (for heartbeat bookkeeping).
int64_t SteadyMillis();

}  // namespace ps

#endif  // PS_NODE_NODE_RUNTIME_H_
