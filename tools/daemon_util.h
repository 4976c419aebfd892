// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Signal handling shared by the daemons: SIGINT/SIGTERM set a flag the main loop polls.
#ifndef PS_TOOLS_DAEMON_UTIL_H_
#define PS_TOOLS_DAEMON_UTIL_H_

#include <chrono>
#include <csignal>
#include <iostream>
#include <string>

#include "ps/status.h"

namespace ps {
namespace daemon {

inline volatile std::sig_atomic_t g_stop_signal = 0;

inline void OnSignal(int sig) { g_stop_signal = sig; }

inline void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

// An empty token lets any process that reaches the scheduler join the cluster (and, once
// a member, push to every table): say so once, at start.
inline void WarnIfNoToken(const char* prog, const std::string& token) {
  if (token.empty()) {
    std::cerr << prog
              << ": warning: no --token (nor LAYERPS_TOKEN): any process that can reach the "
                 "scheduler may join this cluster"
              << std::endl;
  }
}

// Calls join(200 ms) until it returns anything but kTimeout, a stop signal arrives
// (kAborted) or, with limit_s > 0, limit_s seconds pass (kTimeout naming `limit_flag`).
template <typename JoinFn>
Status JoinUntilDone(JoinFn join, int limit_s, const char* limit_flag) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    Status s = join(std::chrono::milliseconds(200));
    if (s.code() != StatusCode::kTimeout) return s;
    if (g_stop_signal) return Aborted("stopped by signal " + std::to_string(g_stop_signal));
    if (limit_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(limit_s)) {
      return Timeout(std::string("not finished within ") + limit_flag);
    }
  }
}

}  // namespace daemon
}  // namespace ps

#endif  // PS_TOOLS_DAEMON_UTIL_H_
