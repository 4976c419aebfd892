// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-server: runs one LayerPS server until the scheduler shuts the cluster down.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli.h"
#include "daemon_util.h"
#include "ps/flags.h"
#include "ps/server.h"

DEFINE_bool(large_buffers, true,
            "Keep large message buffers in the heap instead of fresh mmaps "
            "(glibc M_MMAP_THRESHOLD 256 MiB, M_TRIM_THRESHOLD 1 GiB): avoids page-faulting every "
            "message of 32 MiB and more");

int main(int argc, char** argv) {
  ps::cli::ParseOrExit(
      argc, argv,
      "layerps-server: a LayerPS server (holds table shards, applies pushes, answers pulls).\n"
      "Exits 0 when the scheduler ends the cluster normally, 1 otherwise.\n\n"
      "Usage: layerps-server --scheduler=tcp://HOST:PORT [--bind=tcp://0.0.0.0:0 "
      "--advertise_host=HOST]",
      /*stop_at_positional=*/false, /*roles=*/"s");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  ps::StatusOr<ps::Options> options = ps::OptionsFromFlags();
  if (!options.ok()) ps::cli::Fail("layerps-server", options.status().ToString());
  ps::daemon::InstallStopHandlers();
  if (FLAGS_large_buffers) {
    // Process-wide, hence here and not in the library. ZeroMQ mallocs every received
    // message; glibc maps blocks of 32 MiB and more freshly each time (page faults on
    // every byte). Measured: pull of 32 MiB 1.53 -> 2.76 GB/s (bench/RESULTS.md).
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }

  ps::daemon::WarnIfNoToken("layerps-server", options->token);
  ps::Server server(*options);
  // Start() waits for the whole cluster (up to --connect_timeout_ms); a stop signal must
  // not wait that long. Nothing is established before Start succeeds, so on a signal the
  // daemon simply leaves (without unwinding the thread still inside Start).
  std::atomic<bool> started{false};
  ps::Status s;
  std::thread starter([&] {
    s = server.Start();
    started = true;
  });
  while (!started) {
    if (ps::daemon::g_stop_signal) {
      std::cerr << "layerps-server: stopped by signal " << ps::daemon::g_stop_signal
                << " while joining the cluster" << std::endl;
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  starter.join();
  if (!s.ok()) {
    std::cerr << "layerps-server: " << s << std::endl;
    return 1;
  }
  std::cout << "layerps-server: server rank " << server.rank() << " (node " << server.id()
            << ") serving at " << server.endpoint() << std::endl;
  s = ps::daemon::JoinUntilDone([&](auto timeout) { return server.Join(timeout); }, 0, "");
  const ps::ServerStats st = server.stats();
  server.Stop();
  std::cout << "layerps-server: " << (s.ok() ? "shut down" : s.ToString()) << " after "
            << st.push_requests << " push and " << st.pull_requests << " pull requests ("
            << st.bytes_received << " bytes in, " << st.bytes_sent << " bytes out, "
            << st.bad_messages << " bad messages)" << std::endl;
  // The traffic by peer and table: an INFO line (LAYERPS_LOG_LEVEL=INFO; the launcher's
  // --verbose), not part of the one-line summary above.
  const ps::TrafficStats traffic = server.traffic();
  LOG(INFO) << "traffic: " << traffic.bytes_sent() << " bytes sent, " << traffic.bytes_received()
            << " received\n"
            << traffic.ToString();
  return s.ok() ? 0 : 1;
}
