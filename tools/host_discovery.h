// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Host discovery for elastic jobs (layerps-launch --host_discovery_script, Horovod's
// contract): the script prints the hosts available now, one "HOST:SLOTS" line each
// ("HOST" alone: one slot); the launcher runs it every few seconds and starts workers on
// new slots. The script's output comes from the user's environment, not the network, but
// is still checked: a bad line is an error naming it, never a guess.
#ifndef LAYERPS_TOOLS_HOST_DISCOVERY_H_
#define LAYERPS_TOOLS_HOST_DISCOVERY_H_

#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "ps/status.h"

namespace ps {
namespace hosts {

// Parses the script's output: host -> slots (a host listed twice adds its slots).
inline StatusOr<std::map<std::string, int>> ParseDiscovered(const std::string& text) {
  std::map<std::string, int> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    line = line.substr(a, line.find_last_not_of(" \t\r") - a + 1);
    const size_t colon = line.rfind(':');
    std::string host = colon == std::string::npos ? line : line.substr(0, colon);
    int slots = 1;
    if (colon != std::string::npos) {
      const std::string n = line.substr(colon + 1);
      if (n.empty() || n.size() > 5 || n.find_first_not_of("0123456789") != std::string::npos ||
          (slots = std::stoi(n)) < 1) {
        return InvalidArgument("host discovery: bad slots in line '" + line.substr(0, 200) +
                               "' (want HOST:SLOTS, SLOTS >= 1)");
      }
    }
    if (host.empty() || host.size() > 255 ||
        host.find_first_of(" \t'\"`$;&|<>()\\") != std::string::npos) {
      return InvalidArgument("host discovery: bad host in line '" + line.substr(0, 200) + "'");
    }
    out[host] += slots;
  }
  return out;
}

// Runs `script` (through sh, at most `timeout_s` seconds) and parses what it prints. A
// script that fails, or runs past the limit, is an error naming its exit status.
inline StatusOr<std::map<std::string, int>> Discover(const std::string& script, int timeout_s) {
  std::string quoted = "'";
  for (char ch : script) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  quoted += "'";
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " sh -c " + quoted;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return Unavailable("host discovery: cannot run " + script);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0 && text.size() < (1u << 20)) text.append(buf, n);
  const int status = pclose(p);
  if (status != 0) {
    return Unavailable("host discovery: " + script + " failed (exit status " +
                       std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                       (WIFEXITED(status) && WEXITSTATUS(status) == 124
                            ? ", ran past " + std::to_string(timeout_s) + " s"
                            : std::string()) +
                       ")");
  }
  return ParseDiscovered(text);
}

// A host name that means this machine: its workers start here, not through ssh.
inline bool IsLocalHost(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1";
}

}  // namespace hosts
}  // namespace ps

#endif  // LAYERPS_TOOLS_HOST_DISCOVERY_H_
