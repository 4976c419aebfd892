// first_worker.cc: one worker of a LayerPS job (run it under layerps-launch). Declares a
// dense and a sparse table, pushes to and pulls from each, and checks the values.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ps/ps.h"

// Ends the program with the status's message when a call failed.
static void Check(const ps::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

int main() {
  ps::StatusOr<ps::Options> options = ps::Options::FromEnv();  // what layerps-launch set
  Check(options.status(), "options");
  ps::Worker worker(*options);
  Check(worker.Start(), "start");  // blocks until every node of the job registered
  const auto timeout = std::chrono::seconds(30);
  const float W = static_cast<float>(worker.num_workers());

  // Dense: 1000 floats, rule sum (x += g), held by the servers (a big table is cut into
  // chunks over all of them). Every worker declares the same spec; the first declaration
  // creates the table, zeros.
  ps::StatusOr<ps::TableId> dense = worker.DeclareTable(ps::TableSpec::Dense("weights", 1000));
  Check(dense.status(), "declare weights");
  std::vector<float> grad(1000, 1.0f), values(1000);
  Check(worker.Wait(worker.Push(*dense, grad.data(), grad.size()), timeout), "push");

  // Sparse: rows of 4 floats under any 64-bit id, created (zeros) on first touch.
  // Duplicate ids in one push are summed.
  ps::StatusOr<ps::TableId> sparse = worker.DeclareTable(ps::TableSpec::Sparse("embedding", 4));
  Check(sparse.status(), "declare embedding");
  const std::vector<ps::Key> ids = {7, 1ull << 40, 7};
  std::vector<float> rows(ids.size() * 4, 0.5f);
  const ps::Ticket pushed =
      worker.PushSparse(*sparse, ids.data(), ids.size(), rows.data(), rows.size());
  Check(worker.Wait(pushed, timeout), "push_sparse");

  // Every worker's pushes are applied once all have passed the barrier.
  Check(worker.Barrier(ps::Group::kWorkers, timeout), "barrier");
  Check(worker.Wait(worker.Pull(*dense, values.data(), values.size()), timeout), "pull");
  const std::vector<ps::Key> wanted = {7, 1ull << 40, 3};  // 3: never pushed
  std::vector<float> got(wanted.size() * 4);
  const ps::Ticket pulled =
      worker.PullSparse(*sparse, wanted.data(), wanted.size(), got.data(), got.size());
  Check(worker.Wait(pulled, timeout), "pull_sparse");

  // Each of the W workers pushed 1 to every weight, 0.5 + 0.5 to row 7, 0.5 to row 2^40.
  bool ok = true;
  for (float v : values) ok = ok && v == W;
  for (int j = 0; j < 4; ++j) {
    ok = ok && got[0 * 4 + j] == W && got[1 * 4 + j] == 0.5f * W && got[2 * 4 + j] == 0.0f;
  }
  std::printf("worker %u of %d: weights[0] = %g, row 7 = %g, row 2^40 = %g, row 3 = %g: %s\n",
              worker.rank(), worker.num_workers(), values[0], got[0], got[4], got[8],
              ok ? "as expected" : "WRONG");
  worker.Stop();
  return ok ? 0 : 1;
}
