// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A fault-injecting transport factory for tests: it wraps another factory (in-process or
// ZeroMQ) and applies rules to what the nodes it made send. A rule picks messages with a
// predicate over (receiving peer, message) and drops, delays, duplicates or reorders
// them; Isolate(node) cuts a node off from everyone until Heal(node). Everything happens
// on the sending side, so a rule sees the header as its sender wrote it (header.sender
// is the sending node's id once it registered).
//
// Thread-safety: every member may be called from any thread while nodes run.
#ifndef PS_TRANSPORT_FAULT_TRANSPORT_H_
#define PS_TRANSPORT_FAULT_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ps {

enum class FaultAction {
  kDrop,       // the message is never sent (its frames are released at once)
  kDelay,      // sent delay_ms later, from another thread
  kDuplicate,  // sent twice
  kReorder,    // held until the next message to the same peer has gone, then sent
};

struct FaultRule {
  // The messages the rule applies to; null matches every message.
  std::function<bool(NodeId peer, const Message& msg)> match;
  FaultAction action = FaultAction::kDrop;
  int delay_ms = 0;  // kDelay
  // How many matching messages to act on; -1: all of them.
  int64_t times = -1;
};

class FaultInjector final : public TransportFactory,
                            public std::enable_shared_from_this<FaultInjector> {
 public:
  explicit FaultInjector(std::shared_ptr<TransportFactory> inner) : inner_(std::move(inner)) {}

  std::unique_ptr<Transport> Create(const TransportOptions& options) override;

  // Adds a rule (checked in the order added; the first that matches acts) and returns its id.
  int AddRule(FaultRule rule);
  void RemoveRule(int id);
  void ClearRules();
  // Messages a rule has acted on.
  int64_t Applied(int id) const;

  // Every message to or from `node` is dropped until Heal(node).
  void Isolate(NodeId node);
  void Heal(NodeId node);

  // For the transports this factory made: what to do with a message to `peer`. Returns
  // the action and its delay; kind kNone when no rule matches.
  struct Decision {
    bool act = false;
    FaultAction action = FaultAction::kDrop;
    int delay_ms = 0;
  };
  Decision Decide(NodeId peer, const Message& msg);

 private:
  struct Entry {
    FaultRule rule;
    int64_t applied = 0;
  };
  const std::shared_ptr<TransportFactory> inner_;
  mutable Mutex mu_;
  std::map<int, Entry> rules_ GUARDED_BY(mu_);
  int next_id_ GUARDED_BY(mu_) = 1;
  std::set<NodeId> isolated_ GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_TRANSPORT_FAULT_TRANSPORT_H_
