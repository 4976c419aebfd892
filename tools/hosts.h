// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Hosts for layerps-launch: a host list (-H host1:2,host2:2) or a hostfile, where nodes go
// on them, and the command that starts a node on a remote host through ssh.
#ifndef PS_TOOLS_HOSTS_H_
#define PS_TOOLS_HOSTS_H_

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace hosts {

struct Host {
  std::string name;
  int slots = 1;  // workers it takes
};

inline bool ValidHostName(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':' || c == '[' || c == ']')) {
      return false;
    }
  }
  return h[0] != '-';  // never an ssh option
}

// "host", "host:N" or "host slots=N" (N in 1..4096). `where` names the source in errors.
inline StatusOr<Host> ParseEntry(const std::string& text, const std::string& where) {
  std::istringstream in(text);
  std::string first, second, extra;
  in >> first >> second >> extra;
  if (!extra.empty()) return InvalidArgument(where + ": '" + text + "' has more than two fields");
  Host h;
  std::string slots;
  if (!second.empty()) {
    if (second.rfind("slots=", 0) != 0) {
      return InvalidArgument(where + ": '" + text + "': expected 'HOST slots=N'");
    }
    slots = second.substr(6);
    h.name = first;
  } else {
    // "host:N"; an IPv6 address keeps its colons ("[::1]:2" has slots, "::1" has none).
    const size_t colon = first.rfind(':');
    const size_t bracket = first.rfind(']');
    const bool has_slots =
        colon != std::string::npos &&
        (bracket == std::string::npos ? first.find(':') == colon : colon > bracket);
    if (has_slots) {
      h.name = first.substr(0, colon);
      slots = first.substr(colon + 1);
    } else {
      h.name = first;
    }
  }
  if (!ValidHostName(h.name)) {
    return InvalidArgument(where + ": '" + h.name + "' is not a host name");
  }
  if (!slots.empty()) {
    char* end = nullptr;
    const long v = std::strtol(slots.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 4096) {
      return InvalidArgument(where + ": slots '" + slots + "' is not a number in 1..4096");
    }
    h.slots = static_cast<int>(v);
  }
  return h;
}

// -H host1:2,host2:2
inline StatusOr<std::vector<Host>> ParseList(const std::string& list) {
  std::vector<Host> out;
  std::string item;
  std::istringstream in(list);
  int n = 0;
  while (std::getline(in, item, ',')) {
    ++n;
    StatusOr<Host> h = ParseEntry(item, "-H entry " + std::to_string(n));
    if (!h.ok()) return h.status();
    out.push_back(*h);
  }
  if (out.empty()) return InvalidArgument("-H: no hosts");
  return out;
}

// One host per line ("host", "host:N", "host slots=N"); '#' starts a comment.
inline StatusOr<std::vector<Host>> ParseFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return InvalidArgument("cannot read hostfile " + path);
  std::vector<Host> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    StatusOr<Host> h = ParseEntry(line, path + ":" + std::to_string(n));
    if (!h.ok()) return h.status();
    out.push_back(*h);
  }
  if (out.empty()) return InvalidArgument("hostfile " + path + " lists no host");
  return out;
}

// Where the nodes go: worker i fills the hosts' slots in order; server i goes to host
// i mod H. kInvalidArgument when the slots cannot take every worker.
struct Layout {
  std::vector<std::string> server_hosts, worker_hosts;
};
inline StatusOr<Layout> Place(const std::vector<Host>& hosts, int servers, int workers) {
  Layout l;
  int slots = 0;
  for (const Host& h : hosts) slots += h.slots;
  if (workers > slots) {
    return InvalidArgument(std::to_string(workers) + " workers but the hosts have " +
                           std::to_string(slots) + " slot(s)");
  }
  for (const Host& h : hosts) {
    for (int s = 0; s < h.slots && static_cast<int>(l.worker_hosts.size()) < workers; ++s) {
      l.worker_hosts.push_back(h.name);
    }
  }
  for (int i = 0; i < servers; ++i) l.server_hosts.push_back(hosts[i % hosts.size()].name);
  return l;
}

// 'text' for a POSIX shell.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command a remote shell runs for one node: in `cwd`, with `env`, `argv`; it dies
// when its ssh connection does (its stdin, which the launcher holds open, reaches EOF).
inline std::string RemoteCommand(const std::string& cwd, const std::vector<std::string>& env,
                                 const std::vector<std::string>& argv) {
  std::string cmd = "cd " + Quote(cwd) + " || exit 127; exec 3<&0; env";
  for (const auto& e : env) cmd += " " + Quote(e);
  for (const auto& a : argv) cmd += " " + Quote(a);
  cmd +=
      " </dev/null & p=$!; (cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null) & w=$!; "
      "wait $p; rc=$?; kill $w 2>/dev/null; exit $rc";
  return cmd;
}

// Splits --ssh ("ssh -p 2222 -o X=y") on blanks (no quoting).
inline std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

}  // namespace hosts
}  // namespace ps

#endif  // PS_TOOLS_HOSTS_H_
