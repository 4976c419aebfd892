// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Quick answers for a node that cannot reach its scheduler, so that it says what is wrong
// instead of only "no answer" at the end of connect_timeout_ms: a host name that does not
// resolve (said at once), and a port where nothing accepts connections (said within a
// few seconds, while the node still waits for a scheduler that is merely slow to start).
// Only tcp:// addresses are probed; every other transport answers "nothing to say".
#ifndef PS_NODE_SCHEDULER_PROBE_H_
#define PS_NODE_SCHEDULER_PROBE_H_

#include <string>

#include "ps/status.h"

namespace ps {
namespace probe {

// OK, or kUnavailable naming the host and the resolver's reason when the host of a
// tcp://host:port address does not resolve.
Status ResolveHost(const std::string& address);

// True when a TCP connection to a tcp://host:port address is refused (ECONNREFUSED)
// within `timeout_ms`; false when it connects, times out, or the address is not tcp.
bool Refused(const std::string& address, int timeout_ms);

}  // namespace probe
}  // namespace ps

#endif  // PS_NODE_SCHEDULER_PROBE_H_
