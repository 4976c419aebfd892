// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The narrow seam between LayerPS and the network: bind one receive socket, send
// messages to numbered peers, receive messages. Nodes get their transport from a
// TransportFactory (SetTransportFactory on their options; ZeroMQ when none is given):
//  - ZmqTransportFactory(): the real one (tcp://, ipc://, inproc://);
//  - InProcessNetwork (transport/inproc_transport.h): queues between nodes of one
//    process, no ZeroMQ at all, for tests;
//  - FaultInjector (transport/fault_transport.h): wraps either, and drops, delays,
//    duplicates or reorders chosen messages, or cuts a chosen peer off.
#ifndef PS_TRANSPORT_TRANSPORT_H_
#define PS_TRANSPORT_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "ps/options.h"
#include "ps/status.h"
#include "transport/message.h"

namespace ps {

class Transport {
 public:
  virtual ~Transport() = default;

  // Binds the receive socket; returns the endpoint peers should use (a wildcard host is
  // replaced by `advertise_host`, port 0 by the bound port). Call once, before Recv.
  virtual StatusOr<std::string> Bind(const std::string& address,
                                     const std::string& advertise_host) = 0;

  // Opens (or keeps) the send path to `peer` at `endpoint`; the receiver sees
  // `identity` (1..255 bytes, not starting with a zero byte) as Message::identity of
  // everything sent on it. Thread-safe; fails with kAborted once Close() began.
  virtual Status Connect(NodeId peer, const std::string& endpoint, const std::string& identity) = 0;
  // Drops the send path to `peer` and discards what is queued for it. Thread-safe.
  virtual void Disconnect(NodeId peer) = 0;
  virtual bool IsConnected(NodeId peer) const = 0;

  // Queues `msg` for `peer`; payload frames are sent without a copy and their owners
  // released once sent or discarded. Blocks at most `timeout_ms` when the peer's queue
  // is full. Thread-safe.
  virtual Status Send(NodeId peer, Message&& msg, int timeout_ms) = 0;

  // Receives one message. kTimeout when none came in `timeout_ms`, or when WakeRecv
  // ended the wait; kProtocolError for a malformed one (already consumed and dropped).
  // One thread at a time may call Recv (threads that take turns must hand the receive
  // side over under a lock).
  virtual Status Recv(Message* msg, int timeout_ms) = 0;

  // Whether WakeRecv works: the node runtime lets a waiting thread take the receive
  // side (NodeRuntime::ReceiveWhile) only over transports that can wake a receiver.
  virtual bool CanWakeRecv() const { return false; }
  // Ends the Recv in progress at once (kTimeout), or else the next one. Thread-safe.
  virtual void WakeRecv() {}

  // The routing identities (Message::identity) whose shared-memory manifests this
  // transport acts on: the members' data identities, which the node runtime sets from
  // every cluster map it installs. A manifest from any other connection (a stranger,
  // the scheduler, a node that is gone) is refused as kProtocolError before anything is
  // opened or mapped, and mappings held for identities no longer listed are dropped.
  // Default: none. Transports without shared memory ignore it. Thread-safe.
  virtual void SetSharedMemoryPeers(std::vector<std::string> identities) { (void)identities; }

  // Closes every socket. Send and Recv fail afterwards. Idempotent.
  virtual void Close() = 0;
};

class TransportFactory;

// What a transport is configured with, taken from its node's options
// (TransportOptionsOf): the role options hold these fields where the role reads them.
struct TransportOptions {
  std::string curve_key_file;  // empty: plaintext
  // The receive socket's ZMQ_MAXMSGSIZE, and the largest part a message may have.
  int64_t max_message_bytes = int64_t{256} << 20;
  bool shared_memory = true;  // large frames to ipc:// peers through a shared ring
  int streams = 1;            // connections per peer (resolved: >= 1)
  int io_threads = 1;         // ZeroMQ I/O threads (resolved: >= 1)
  std::shared_ptr<TransportFactory> factory;  // null: ZeroMQ
};
// A server's or worker's: its member options. The scheduler's: its socket only takes
// control messages (scheduler_max_message_bytes), no shared memory, one stream, and one
// I/O thread unless io_threads says otherwise.
TransportOptions TransportOptionsOf(const MemberOptions& options);
TransportOptions TransportOptionsOf(const SchedulerOptions& options);

// The in-process cluster tests make nodes over an InProcessNetwork or a FaultInjector:
// the factory travels in the node's options, where the public API does not show it
// (CommonOptions befriends TransportHook; applications never set it).
void SetTransportFactory(CommonOptions* options, std::shared_ptr<TransportFactory> factory);
struct TransportHook {
  static void Set(CommonOptions* options, std::shared_ptr<TransportFactory> factory);
  static std::shared_ptr<TransportFactory> Get(const CommonOptions& options);
};

// A ZeroMQ transport for one node.
std::unique_ptr<Transport> NewZmqTransport(const TransportOptions& options);

// Makes the transport of each node. Shared by the nodes it serves, so thread-safe.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  // A fresh, unbound transport for a node configured by `options`.
  virtual std::unique_ptr<Transport> Create(const TransportOptions& options) = 0;
};

// The ZeroMQ factory (what a node uses when its options name none).
std::shared_ptr<TransportFactory> ZmqTransportFactory();

// The transport a node configured by `options` uses: from its factory, or ZeroMQ.
std::unique_ptr<Transport> NewTransport(const TransportOptions& options);

// Fills in a bind address from the scheduler address's scheme when `bind` is empty:
// tcp -> tcp://127.0.0.1:0, ipc -> a fresh path in /tmp, inproc -> a fresh name.
std::string DefaultBindAddress(const std::string& bind, const std::string& scheduler_address);

}  // namespace ps

#endif  // PS_TRANSPORT_TRANSPORT_H_
