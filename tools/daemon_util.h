// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Signal handling shared by the daemons: SIGINT/SIGTERM set a flag the main loop polls.
#ifndef PS_TOOLS_DAEMON_UTIL_H_
#define PS_TOOLS_DAEMON_UTIL_H_

#include <csignal>

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

}  // namespace daemon
}  // namespace ps

#endif  // PS_TOOLS_DAEMON_UTIL_H_
