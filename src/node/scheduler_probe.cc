// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "node/scheduler_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ps {
namespace probe {
namespace {

// host and port of tcp://host:port (IPv6 hosts in brackets); false for other addresses.
bool Split(const std::string& address, std::string* host, std::string* port) {
  const std::string scheme = "tcp://";
  if (address.compare(0, scheme.size(), scheme) != 0) return false;
  const std::string rest = address.substr(scheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) return false;
  *host = rest.substr(0, colon);
  *port = rest.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  return *host != "*";
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

}  // namespace

Status ResolveHost(const std::string& address) {
  std::string host, port;
  if (!Split(address, &host, &port)) return Status::OK();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  AddrInfo ai;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &ai.list);
  if (rc == 0) return Status::OK();
  return Unavailable("the scheduler's host '" + host + "' (in " + address +
                     ") does not resolve: " + gai_strerror(rc));
}

bool Refused(const std::string& address, int timeout_ms) {
  std::string host, port;
  if (!Split(address, &host, &port)) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  AddrInfo ai;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &ai.list) != 0 || ai.list == nullptr)
    return false;
  const int fd = socket(ai.list->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool refused = false;
  if (connect(fd, ai.list->ai_addr, ai.list->ai_addrlen) != 0) {
    if (errno == ECONNREFUSED) {
      refused = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        refused = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED;
      }
    }
  }
  close(fd);
  return refused;
}

}  // namespace probe
}  // namespace ps
