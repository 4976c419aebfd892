// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// An in-process transport: nodes of one process exchange messages through queues, with
// no ZeroMQ and no sockets. Frames move without a copy (their owners are released when
// the receiver drops the message); headers are re-parsed on arrival as if they had come
// over the wire, so validation runs as it does in production.
//
// The InProcessNetwork is the factory and the namespace of endpoints: nodes built with the
// same network reach each other by their inproc:// addresses, nodes of another network
// (or of ZeroMQ) do not. Tests create one per cluster.
#ifndef PS_TRANSPORT_INPROC_TRANSPORT_H_
#define PS_TRANSPORT_INPROC_TRANSPORT_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ps {

class InProcessNetwork final : public TransportFactory,
                               public std::enable_shared_from_this<InProcessNetwork> {
 public:
  // `queue_limit`: messages a node's receive queue holds before senders block.
  explicit InProcessNetwork(size_t queue_limit = 100000) : queue_limit_(queue_limit) {}

  // Addresses must be inproc://NAME; "inproc://" alone, or a name ending in ":0", gets a
  // fresh unique name.
  std::unique_ptr<Transport> Create(const TransportOptions& options) override;

  // Implementation details shared with the transports of this network.
  struct Endpoint;
  Status BindEndpoint(const std::string& name, std::shared_ptr<Endpoint> endpoint);
  void UnbindEndpoint(const std::string& name);
  std::shared_ptr<Endpoint> Resolve(const std::string& name) const;
  std::string FreshName();
  size_t queue_limit() const { return queue_limit_; }

 private:
  const size_t queue_limit_;
  mutable Mutex mu_;
  std::map<std::string, std::weak_ptr<Endpoint>> endpoints_ GUARDED_BY(mu_);
  uint64_t next_name_ GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // PS_TRANSPORT_INPROC_TRANSPORT_H_
