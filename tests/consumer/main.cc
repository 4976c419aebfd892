// Pushes and pulls through an in-process LayerPS cluster, using only the installed
// public headers. Exits 0 when the values come back exactly.
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "ps/ps.h"

int main(int argc, char** argv) {
  // argv[1], when given: the version the installed package must report (ps/version.h).
  if (argc > 1 && std::strcmp(ps::Version(), argv[1]) != 0) {
    std::fprintf(stderr, "version %s, expected %s\n", ps::Version(), argv[1]);
    return 1;
  }
  ps::Options o;
  o.scheduler_address = "inproc://consumer-scheduler";
  ps::Scheduler scheduler(o);
  if (!scheduler.Start().ok()) return 1;
  ps::Server server(o);
  ps::Worker worker(o);
  ps::Status server_started;
  std::thread t([&] { server_started = server.Start(); });
  ps::Status s = worker.Start();
  t.join();
  if (!s.ok() || !server_started.ok()) {
    std::fprintf(stderr, "start: %s / %s\n", s.ToString().c_str(),
                 server_started.ToString().c_str());
    return 1;
  }
  auto table = worker.DeclareTable(ps::TableSpec::Dense("weights", 1000));
  if (!table.ok()) return 1;
  std::vector<float> grad(1000, 0.5f), out(1000, 0.0f);
  for (int i = 0; i < 4; ++i) {
    if (!worker.Wait(worker.Push(*table, grad.data(), grad.size()), std::chrono::seconds(10)).ok())
      return 1;
  }
  if (!worker.Wait(worker.Pull(*table, out.data(), out.size()), std::chrono::seconds(10)).ok())
    return 1;
  for (float v : out) {
    if (v != 2.0f) {
      std::fprintf(stderr, "wrong value %f\n", v);
      return 1;
    }
  }
  worker.Stop();
  if (!scheduler.Join(std::chrono::seconds(10)).ok()) return 1;
  std::printf("consumer: push/pull through the installed LayerPS %s (commit %s) OK\n",
              ps::Version(), ps::BuildCommit());
  return 0;
}
