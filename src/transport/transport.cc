// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What every node does to get its transport: its options as a transport sees them, the
// factory hook of the in-process tests, and the default bind address.
#include "transport/transport.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace ps {

TransportOptions TransportOptionsOf(const MemberOptions& options) {
  TransportOptions t;
  t.curve_key_file = options.curve_key_file;
  t.max_message_bytes = options.max_message_bytes;
  t.shared_memory = options.shared_memory;
  t.streams = options.ResolvedStreams();
  t.io_threads = options.ResolvedIoThreads();
  t.factory = TransportHook::Get(options);
  return t;
}

TransportOptions TransportOptionsOf(const SchedulerOptions& options) {
  TransportOptions t;
  t.curve_key_file = options.curve_key_file;
  // It only receives control messages: its socket takes small ones only, which bounds
  // what a connection that never registers can make it buffer.
  t.max_message_bytes = options.scheduler_max_message_bytes;
  t.shared_memory = false;  // it sends and accepts no data frames
  t.streams = 1;
  t.io_threads = std::max(options.io_threads, 1);
  t.factory = TransportHook::Get(options);
  return t;
}

void TransportHook::Set(CommonOptions* options, std::shared_ptr<TransportFactory> factory) {
  options->transport_factory_ = std::move(factory);
}

std::shared_ptr<TransportFactory> TransportHook::Get(const CommonOptions& options) {
  return std::static_pointer_cast<TransportFactory>(options.transport_factory_);
}

void SetTransportFactory(CommonOptions* options, std::shared_ptr<TransportFactory> factory) {
  TransportHook::Set(options, std::move(factory));
}

std::unique_ptr<Transport> NewTransport(const TransportOptions& options) {
  if (options.factory) return options.factory->Create(options);
  return NewZmqTransport(options);
}

namespace {
std::atomic<uint64_t> g_endpoint_counter{0};
}  // namespace

std::string DefaultBindAddress(const std::string& bind, const std::string& scheduler_address) {
  if (!bind.empty()) return bind;
  const uint64_t n = g_endpoint_counter.fetch_add(1);
  if (scheduler_address.rfind("ipc://", 0) == 0) {
    return "ipc:///tmp/layerps-" + std::to_string(getpid()) + "-" + std::to_string(n) + ".sock";
  }
  if (scheduler_address.rfind("inproc://", 0) == 0) {
    return "inproc://layerps-node-" + std::to_string(getpid()) + "-" + std::to_string(n);
  }
  return "tcp://127.0.0.1:0";
}

}  // namespace ps
