// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Sparse logistic regression trained through a LayerPS cluster.
//
// Each worker generates its own shard of a synthetic click-style data set with a known
// answer: every sample has `--active` features drawn from `--features` hashed ids, and
// its label is the sign of x . w_true (w_true drawn from a fixed seed, so every worker
// agrees). The weights live in a sparse table (dim 1, server-side SGD), the bias in a
// dense table. Each step a worker pulls only the rows its mini-batch touches, computes
// the logistic-loss gradient and pushes it back sparsely. The loss is printed as it
// falls; at the end every worker measures accuracy on fresh data and the cosine
// between the learned and the true weights.
//
// Run: layerps-launch --num_servers=2 --num_workers=2 -- ./sparse_logreg
#include <gflags/gflags.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "../tools/cli.h"
#include "ps/ps.h"

DEFINE_int32(steps, 300, "Training steps per worker");
DEFINE_int32(batch, 256, "Samples per mini-batch");
DEFINE_int32(features, 20000, "Distinct feature ids");
DEFINE_int32(active, 12, "Active features per sample");
DEFINE_double(lr, 20.0,
              "Server-side SGD learning rate of the sparse weights (gradients are averaged "
              "over the global batch, and each feature is touched rarely: hence the large rate)");
DEFINE_double(bias_lr, 0.5, "Server-side SGD learning rate of the dense bias");
DEFINE_double(min_accuracy, 0.0, "Exit 1 if the final test accuracy is below this");
DEFINE_int32(print_every, 25, "Print the loss every this many steps");

namespace {

constexpr uint64_t kFeatureSalt = 0x5bd1e995u;

// Feature ids are hashed to spread over 64 bits, like real hashed features.
uint64_t FeatureKey(int f) {
  return (static_cast<uint64_t>(f) + 1) * 0x9E3779B97F4A7C15ull ^ kFeatureSalt;
}

struct Sample {
  std::vector<int> features;
  float label;  // 0 or 1
};

struct Data {
  std::vector<float> w_true;
  std::mt19937_64 rng;
  Data(int features, uint64_t seed) : w_true(features), rng(seed) {
    std::mt19937_64 truth(12345);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (auto& w : w_true) w = n(truth);
  }
  Sample Draw(int active) {
    Sample s;
    std::uniform_int_distribution<int> pick(0, static_cast<int>(w_true.size()) - 1);
    float dot = 0.25f;  // true bias
    for (int i = 0; i < active; ++i) {
      const int f = pick(rng);
      s.features.push_back(f);
      dot += w_true[f];
    }
    s.label = dot > 0 ? 1.0f : 0.0f;
    return s;
  }
};

// Every flag is checked before joining a cluster: a bad one is one line and exit code 2.
void CheckFlags() {
  auto bad = [](const std::string& line) { ps::cli::Fail("sparse_logreg", line); };
  if (FLAGS_steps < 1) bad("--steps=" + std::to_string(FLAGS_steps) + " must be at least 1");
  if (FLAGS_batch < 1 || FLAGS_batch > 1000000)
    bad("--batch=" + std::to_string(FLAGS_batch) + " is outside [1, 1000000]");
  if (FLAGS_features < 1 || FLAGS_features > 100000000)
    bad("--features=" + std::to_string(FLAGS_features) + " is outside [1, 100000000]");
  if (FLAGS_active < 1 || FLAGS_active > FLAGS_features)
    bad("--active=" + std::to_string(FLAGS_active) +
        " is outside [1, --features=" + std::to_string(FLAGS_features) + "]");
  if (FLAGS_print_every < 1)
    bad("--print_every=" + std::to_string(FLAGS_print_every) + " must be at least 1");
  if (!(FLAGS_lr > 0 && std::isfinite(FLAGS_lr)))
    bad("--lr=" + std::to_string(FLAGS_lr) + " must be a positive number");
  if (!(FLAGS_bias_lr >= 0 && std::isfinite(FLAGS_bias_lr)))
    bad("--bias_lr=" + std::to_string(FLAGS_bias_lr) + " must be a number >= 0");
  if (!(FLAGS_min_accuracy >= 0 && FLAGS_min_accuracy <= 1))
    bad("--min_accuracy=" + std::to_string(FLAGS_min_accuracy) + " is outside [0, 1]");
}

int Fail(const char* what, const ps::Status& s) {
  std::fprintf(stderr, "sparse_logreg: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ps::cli::ParseOrExit(argc, argv,
                       "sparse_logreg: sparse logistic regression through a LayerPS cluster.\n"
                       "Run it under layerps-launch, which sets the LAYERPS_* environment.",
                       /*stop_at_positional=*/false, /*roles=*/"w");
  CheckFlags();
  ps::StatusOr<ps::Options> options = ps::Options::FromEnv();
  if (!options.ok()) return Fail("options", options.status());
  ps::Worker worker(*options);
  ps::Status s = worker.Start();
  if (!s.ok()) return Fail("start", s);
  const auto timeout = std::chrono::milliseconds(options->request_timeout_ms);

  ps::TableSpec wspec = ps::TableSpec::Sparse("logreg.w", 1, ps::UpdateRule::kSgd);
  wspec.learning_rate = static_cast<float>(FLAGS_lr);
  wspec.layer = "linear";
  ps::TableSpec bspec = ps::TableSpec::Dense("logreg.b", 1, ps::UpdateRule::kSgd);
  bspec.learning_rate = static_cast<float>(FLAGS_bias_lr);
  bspec.layer = "linear";
  auto w = worker.DeclareTable(wspec);
  if (!w.ok()) return Fail("declare weights", w.status());
  auto b = worker.DeclareTable(bspec);
  if (!b.ok()) return Fail("declare bias", b.status());

  const int rank = static_cast<int>(worker.rank());
  const int nw = worker.num_workers();
  Data data(FLAGS_features, 1000 + rank);
  if (rank == 0) {
    std::printf("training: %d worker(s), %d server(s), %d steps x %d samples, %d features\n", nw,
                worker.num_servers(), FLAGS_steps, FLAGS_batch, FLAGS_features);
  }
  s = worker.Barrier(ps::Group::kWorkers, timeout);
  if (!s.ok()) return Fail("barrier", s);

  std::vector<ps::Key> keys;
  std::vector<float> rows, grads;
  float bias = 0.0f, bias_grad = 0.0f;
  double running_loss = 0.0;
  int running_n = 0;
  for (int step = 1; step <= FLAGS_steps; ++step) {
    std::vector<Sample> batch;
    for (int i = 0; i < FLAGS_batch; ++i) batch.push_back(data.Draw(FLAGS_active));
    keys.clear();
    for (const auto& smp : batch) {
      for (int f : smp.features) keys.push_back(FeatureKey(f));
    }
    rows.assign(keys.size(), 0.0f);
    ps::Ticket tw = worker.PullSparse(*w, keys.data(), keys.size(), rows.data(), rows.size());
    ps::Ticket tb = worker.Pull(*b, &bias, 1);
    if (!(s = worker.Wait(tw, timeout)).ok()) return Fail("pull weights", s);
    if (!(s = worker.Wait(tb, timeout)).ok()) return Fail("pull bias", s);

    // Forward and backward; gradients averaged over the global batch (all workers).
    grads.assign(keys.size(), 0.0f);
    bias_grad = 0.0f;
    double loss = 0.0;
    size_t k = 0;
    const float scale = 1.0f / static_cast<float>(FLAGS_batch * nw);
    for (const auto& smp : batch) {
      float z = bias;
      for (size_t j = 0; j < smp.features.size(); ++j) z += rows[k + j];
      const float p = 1.0f / (1.0f + std::exp(-z));
      loss += -(smp.label * std::log(std::max(p, 1e-7f)) +
                (1 - smp.label) * std::log(std::max(1 - p, 1e-7f)));
      const float g = (p - smp.label) * scale;
      for (size_t j = 0; j < smp.features.size(); ++j) grads[k + j] = g;
      bias_grad += g;
      k += smp.features.size();
    }
    ps::Ticket pw = worker.PushSparse(*w, keys.data(), keys.size(), grads.data(), grads.size());
    ps::Ticket pb = worker.Push(*b, &bias_grad, 1);
    if (!(s = worker.Wait(pw, timeout)).ok()) return Fail("push weights", s);
    if (!(s = worker.Wait(pb, timeout)).ok()) return Fail("push bias", s);
    running_loss += loss / FLAGS_batch;
    ++running_n;
    if (step % FLAGS_print_every == 0 || step == FLAGS_steps) {
      std::printf("worker %d step %4d  loss %.4f\n", rank, step, running_loss / running_n);
      std::fflush(stdout);
      running_loss = 0;
      running_n = 0;
    }
  }
  s = worker.Barrier(ps::Group::kWorkers, timeout);
  if (!s.ok()) return Fail("barrier", s);

  // Evaluate on fresh samples, and compare the learned weights with the truth.
  int correct = 0;
  const int tests = 4000;
  for (int i = 0; i < tests; ++i) {
    Sample smp = data.Draw(FLAGS_active);
    keys.clear();
    for (int f : smp.features) keys.push_back(FeatureKey(f));
    rows.assign(keys.size(), 0.0f);
    if (!(s = worker.Wait(worker.PullSparse(*w, keys.data(), keys.size(), rows.data(), rows.size()),
                          timeout))
             .ok()) {
      return Fail("pull", s);
    }
    float z = bias;
    for (float r : rows) z += r;
    correct += ((z > 0) == (smp.label > 0.5f));
  }
  keys.clear();
  for (int f = 0; f < FLAGS_features; ++f) keys.push_back(FeatureKey(f));
  rows.assign(keys.size(), 0.0f);
  if (!(s = worker.Wait(worker.PullSparse(*w, keys.data(), keys.size(), rows.data(), rows.size()),
                        timeout))
           .ok()) {
    return Fail("pull all", s);
  }
  double dot = 0, n1 = 0, n2 = 0;
  for (int f = 0; f < FLAGS_features; ++f) {
    dot += rows[f] * data.w_true[f];
    n1 += rows[f] * rows[f];
    n2 += data.w_true[f] * data.w_true[f];
  }
  const double accuracy = static_cast<double>(correct) / tests;
  const double cosine = dot / std::sqrt(n1 * n2 + 1e-30);
  const ps::WorkerStats st = worker.stats();
  std::printf(
      "worker %d done: test accuracy %.4f, cosine(w, w_true) %.4f, %llu requests, %.1f MB pushed, "
      "%.1f MB pulled\n",
      rank, accuracy, cosine, static_cast<unsigned long long>(st.requests_sent),
      st.bytes_sent / 1e6, st.bytes_received / 1e6);
  worker.Stop();
  if (accuracy < FLAGS_min_accuracy) {
    std::fprintf(stderr, "sparse_logreg: accuracy %.4f is below --min_accuracy %.4f\n", accuracy,
                 FLAGS_min_accuracy);
    return 1;
  }
  return 0;
}
