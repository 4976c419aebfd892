// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// DLRM trained end to end in C++ with LibTorch: the embeddings on the LayerPS servers, the
// MLPs averaged by all-reduce among the workers. The C++ counterpart of
// examples/python/dlrm.py (docs/cpp.md, "DLRM in C++").
//
// The model is DLRM (Naumov et al., 2019): a bottom MLP over the 13 dense features, one
// embedding bag (sum pooling) per sparse feature (26 features, each its own sparse table),
// the pairwise dot products of the 27 resulting vectors, and a top MLP over them and the
// bottom MLP's output, ending in the click logit; BCE loss.
//
// Each step, every worker takes its shard of the global batch (--batch samples), then
//  - pulls the unique ids of its shard from all 26 tables with ONE Worker::PullSparseMany
//    (docs/sparse.md, "Many tables in one request"),
//  - pools them with torch::embedding_bag (sum) on the pulled rows, runs the MLPs and the
//    dot interaction, and backward: the gradient of the pulled-rows tensor is the rows'
//    gradient,
//  - pushes it, scaled by 1/W, with ONE Worker::PushSparseMany (the servers apply the
//    tables' rule: row-wise Adagrad by default), and meanwhile averages the MLPs'
//    gradients and the loss across the workers (one grouped all-reduce through
//    worker.communicator()), then steps a local torch Adagrad.
// With --sync=bsp (default) the servers sum each step's pushes of every worker and apply
// them once, so W workers train what one process would on the global batch (W x --batch
// samples), up to the order of float additions; the library sends each bsp table as its own
// part of the call (26 pulls and 26 pushes per server and step). With --sync=async each
// push is applied on arrival and the 26 tables travel fused: one message per server and call.
//
// The data is Criteo-shaped and generated from --seed (a compact port of
// examples/python/criteo_synth.py, not its numbers): 13 dense features (log1p of
// lognormal counts, a fifth of them zero), 26 sparse ids drawn from a power law over
// Criteo Kaggle's per-feature cardinalities (3 to 10.1 million), hashed into --rows rows
// per table, and a click label drawn from a hidden model (a logistic function of the dense
// features and of one hidden weight per raw id). Sample i of step s depends on
// (seed, s, i) only: a worker generates its own rows of the global batch.
//
//   layerps-launch --num_servers=1 --num_workers=2 -- dlrm --steps=50
//
// Rank 0 prints the global batch's loss every --print_every steps, then the held-out log
// loss and AUC (samples of a step no training batch used), samples/s and the messages and
// bytes each worker sent to the servers per step (the worker's traffic counters).
#include <gflags/gflags.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/cli.h"
#include "ps/ps.h"

DEFINE_int32(steps, 50, "Training steps");
DEFINE_int32(batch, 256, "Samples per worker and step (the global batch is workers x batch)");
DEFINE_double(lr, 0.05, "The embedding tables' learning rate (the servers' rule)");
DEFINE_double(dense_lr, 0.01,
              "The MLPs' learning rate (a local torch Adagrad on the averaged gradients)");
DEFINE_int32(emb_dim, 16, "Embedding dimension (also the bottom MLP's output)");
DEFINE_int32(seed, 0, "Seed of the data and of the MLPs' initial weights");
DEFINE_int64(rows, 100000,
             "Rows per table: every feature's ids are hashed into this many (0: 63-bit hashed ids, "
             "no collisions)");
DEFINE_string(rule, "rowwise_adagrad",
              "The servers' update rule for the tables (rowwise_adagrad, adagrad, sgd...)");
DEFINE_double(eps, 1e-8, "The tables' rule's epsilon (adagrad, rowwise_adagrad, adam)");
DEFINE_string(
    sync, "bsp",
    "bsp: the servers sum each step's pushes of every worker (equal to one process); async: "
    "each push applied on arrival");
DEFINE_string(bottom, "512,256,64", "The bottom MLP's hidden sizes (13 -> these -> emb_dim)");
DEFINE_string(top, "512,256", "The top MLP's hidden sizes (-> these -> 1)");
DEFINE_int32(eval_samples, 4096, "Held-out samples evaluated on rank 0 at the end (0: none)");
DEFINE_int32(print_every, 10, "Print the global batch's loss every this many steps");
DEFINE_int32(warmup, 1, "Untimed first steps (declares, first pulls)");
DEFINE_int32(threads, 1, "Torch threads per worker");

namespace {

constexpr int kDense = 13;
constexpr int kSparse = 26;
// Criteo Kaggle's sparse-feature cardinalities (C1..C26), as in criteo_synth.py.
constexpr std::array<uint64_t, kSparse> kCardinalities = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

int Fail(const std::string& what, const ps::Status& s) {
  std::fprintf(stderr, "dlrm: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// splitmix64's finalizer: a good hash of ids and seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
// A hash's top 53 bits as a uniform in (0, 1).
double ToUnit(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0; }

// One shard of a global batch: dense (n x 13), keys[f] (n ids of feature f), labels (n).
struct Samples {
  int n = 0;
  std::vector<float> dense;
  std::vector<std::vector<ps::Key>> keys;
  std::vector<float> labels;
};

// The generator: everything is a function of (seed, step, sample index).
class CriteoSynth {
 public:
  CriteoSynth(uint64_t seed, uint64_t rows, double zipf = 1.2, double click_rate = 0.26)
      : seed_(seed), rows_(rows), zipf_(zipf) {
    std::mt19937_64 hidden(Mix(seed ^ 0x48494444454EULL));
    std::normal_distribution<double> w(0.0, 0.35);
    std::uniform_real_distribution<double> u(0.1, 1.0);
    for (double& d : dense_w_) d = w(hidden);
    // How much each feature's ids move the click: a few features matter a lot.
    for (double& s : feature_scale_) s = std::pow(u(hidden), 2.0);
    bias_ = std::log(click_rate / (1.0 - click_rate)) - 0.5;
  }

  // Samples first..first+n-1 of global step `step`.
  Samples Batch(int64_t step, int64_t first, int n) const {
    Samples s;
    s.n = n;
    s.dense.resize(static_cast<size_t>(n) * kDense);
    s.keys.assign(kSparse, std::vector<ps::Key>(n));
    s.labels.resize(n);
    for (int i = 0; i < n; ++i) {
      const uint64_t row = static_cast<uint64_t>(first + i);
      double logit = bias_;
      for (int j = 0; j < kDense; ++j) {
        // log1p of a lognormal count, a fifth of them zero (Criteo's many zeros).
        const double z = std::sqrt(-2.0 * std::log(Uniform(step, row, 0, j))) *
                         std::cos(2.0 * M_PI * Uniform(step, row, 1, j));
        double count = std::exp(1.0 + 1.2 * z);
        if (Uniform(step, row, 2, j) < 0.2) count = 0.0;
        const float x = static_cast<float>(std::log1p(std::floor(count)));
        s.dense[static_cast<size_t>(i) * kDense + j] = x;
        logit += (x - 1.0) * dense_w_[j];
      }
      for (int f = 0; f < kSparse; ++f) {
        // A popularity rank from a continuous power law (inverse CDF), capped by the
        // feature's cardinality, then hashed to a raw 63-bit id; the table's key is the
        // raw id hashed into --rows rows (collisions share a row, as with Criteo's hashing).
        const double r = std::floor(std::pow(Uniform(step, row, 3, f), -1.0 / (zipf_ - 1.0))) - 1.0;
        const uint64_t rank =
            static_cast<uint64_t>(std::min(r, static_cast<double>(kCardinalities[f] - 1)));
        const uint64_t raw = Mix(rank ^ (seed_ * 1000003ULL + f * 7919ULL + 1)) >> 1;
        s.keys[f][i] = rows_ > 0 ? raw % rows_ : raw;
        logit += HiddenWeight(f, raw);
      }
      s.labels[i] = Uniform(step, row, 4, 0) < 1.0 / (1.0 + std::exp(-logit)) ? 1.0f : 0.0f;
    }
    return s;
  }

 private:
  // A uniform in (0, 1) keyed by (seed, step, sample, stream, column).
  double Uniform(int64_t step, uint64_t row, uint64_t stream, uint64_t col) const {
    const uint64_t key =
        Mix((seed_ * 0x100000001B3ULL + static_cast<uint64_t>(step) * 0x9E3779B1ULL + stream) ^
            0xD1B54A32D192ED03ULL);
    return ToUnit(Mix(Mix(row ^ key) + col * 0x632BE59BD9B4E019ULL));
  }
  // The hidden model's weight of raw id `raw` of feature f: normal, scaled per feature.
  double HiddenWeight(int f, uint64_t raw) const {
    const uint64_t h = Mix(raw ^ ((seed_ << 8) + f + 0x51));
    return feature_scale_[f] * std::sqrt(-2.0 * std::log(ToUnit(h))) *
           std::cos(2.0 * M_PI * ToUnit(Mix(h)));
  }

  uint64_t seed_, rows_;
  double zipf_;
  std::array<double, kDense> dense_w_{};
  std::array<double, kSparse> feature_scale_{};
  double bias_ = 0;
};

std::vector<int64_t> ParseSizes(const std::string& flag, const std::string& text) {
  std::vector<int64_t> sizes;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1)
      ps::cli::Fail("dlrm", "--" + flag + ": a list of sizes >= 1, like 512,256");
    sizes.push_back(v);
  }
  return sizes;
}

torch::nn::Sequential Mlp(const std::vector<int64_t>& sizes, bool last_relu) {
  torch::nn::Sequential seq;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    seq->push_back(torch::nn::Linear(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size() || last_relu) seq->push_back(torch::nn::ReLU());
  }
  return seq;
}

// The dense half of DLRM: the two MLPs and the dot interaction. The pooled embeddings
// come from the servers' rows (Forward's `pooled`, B x 26 x dim).
struct Dlrm : torch::nn::Module {
  Dlrm(int dim, std::vector<int64_t> bottom_sizes, std::vector<int64_t> top_sizes) {
    bottom_sizes.insert(bottom_sizes.begin(), kDense);
    bottom_sizes.push_back(dim);
    bottom = register_module("bottom", Mlp(bottom_sizes, true));
    const int64_t n = kSparse + 1;
    torch::Tensor pairs = torch::triu_indices(n, n, 1);
    pair_index = (pairs[0] * n + pairs[1]).contiguous();  // into the flattened n x n products
    top_sizes.insert(top_sizes.begin(), dim + n * (n - 1) / 2);
    top_sizes.push_back(1);
    top = register_module("top", Mlp(top_sizes, false));
  }
  torch::Tensor Forward(const torch::Tensor& dense, const torch::Tensor& pooled) {
    torch::Tensor x = bottom->forward(dense);
    const int64_t b = x.size(0);
    torch::Tensor vectors = torch::cat({x.unsqueeze(1), pooled}, 1);  // B x 27 x dim
    torch::Tensor dots =
        torch::bmm(vectors, vectors.transpose(1, 2)).reshape({b, -1}).index_select(1, pair_index);
    return top->forward(torch::cat({x, dots}, 1)).squeeze(1);
  }
  torch::nn::Sequential bottom{nullptr}, top{nullptr};
  torch::Tensor pair_index;
};

// One shard's lookup plan: each table's unique keys, and where each (feature, sample)
// finds its row in the concatenation of the tables' pulled rows.
struct Lookup {
  std::vector<std::vector<ps::Key>> unique;  // per table
  std::vector<int64_t> index;                // kSparse * n: row of bag f * n + i
  int64_t rows = 0;                          // unique rows over every table
};
Lookup Plan(const Samples& s) {
  Lookup l;
  l.unique.resize(kSparse);
  l.index.resize(static_cast<size_t>(kSparse) * s.n);
  for (int f = 0; f < kSparse; ++f) {
    std::vector<ps::Key>& u = l.unique[f];
    u = s.keys[f];
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (int i = 0; i < s.n; ++i) {
      l.index[static_cast<size_t>(f) * s.n + i] =
          l.rows + (std::lower_bound(u.begin(), u.end(), s.keys[f][i]) - u.begin());
    }
    l.rows += static_cast<int64_t>(u.size());
  }
  return l;
}

// ROC AUC by ranks (ties averaged).
double Auc(const std::vector<float>& labels, const std::vector<float>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double pos = 0, rank_sum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && scores[order[j + 1]] == scores[order[i]]) ++j;
    const double rank = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) {
      if (labels[order[k]] > 0.5f) {
        pos += 1;
        rank_sum += rank;
      }
    }
    i = j + 1;
  }
  const double neg = static_cast<double>(labels.size()) - pos;
  if (pos == 0 || neg == 0) return NAN;
  return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

struct ServerTraffic {
  uint64_t messages = 0, bytes = 0;
};
ServerTraffic ToServers(const ps::Worker& w, const std::set<ps::NodeId>& servers) {
  ServerTraffic t;
  for (const auto& [id, p] : w.traffic().peers) {
    if (servers.count(id) == 0) continue;
    t.messages += p.messages_sent;
    t.bytes += p.bytes_sent;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  ps::cli::ParseOrExit(
      argc, argv,
      "dlrm: DLRM (bottom MLP, 26 embedding bags on the LayerPS servers, dot interaction,\n"
      "top MLP) trained on Criteo-shaped synthetic data, in C++ with LibTorch.\n"
      "Run it under layerps-launch, e.g.\n"
      "  layerps-launch --num_servers=1 --num_workers=2 -- dlrm --steps=50",
      /*stop_at_positional=*/false, /*roles=*/"w");
  if (FLAGS_steps < 1 || FLAGS_batch < 1 || FLAGS_emb_dim < 1 || FLAGS_print_every < 1 ||
      FLAGS_threads < 1 || FLAGS_warmup < 0 || FLAGS_eval_samples < 0 || FLAGS_rows < 0 ||
      !(FLAGS_lr > 0) || !(FLAGS_dense_lr > 0)) {
    ps::cli::Fail(
        "dlrm",
        "--steps, --batch, --emb_dim, --print_every and --threads must be >= 1, --warmup, "
        "--eval_samples and --rows >= 0, --lr and --dense_lr > 0");
  }
  ps::StatusOr<ps::UpdateRule> rule = ps::ParseUpdateRule(FLAGS_rule);
  if (!rule.ok()) ps::cli::Fail("dlrm", "--rule: " + rule.status().ToString());
  ps::StatusOr<ps::SyncMode> sync = ps::ParseSyncMode(FLAGS_sync);
  if (!sync.ok() || *sync == ps::SyncMode::kSsp)
    ps::cli::Fail("dlrm", "--sync must be bsp or async");
  const std::vector<int64_t> bottom_sizes = ParseSizes("bottom", FLAGS_bottom);
  const std::vector<int64_t> top_sizes = ParseSizes("top", FLAGS_top);
  torch::set_num_threads(FLAGS_threads);  // several ranks share the machine's cores

  ps::StatusOr<ps::Options> options = ps::Options::FromEnv();
  if (!options.ok()) return Fail("options", options.status());
  ps::Worker w(*options);
  ps::Status s = w.Start();
  if (!s.ok()) return Fail("start", s);
  const auto timeout = std::chrono::milliseconds(options->request_timeout_ms);
  const int world = w.num_workers(), rank = static_cast<int>(w.rank());
  const int dim = FLAGS_emb_dim;
  std::set<ps::NodeId> servers;
  for (const ps::NodeInfo& n : w.Nodes()) {
    if (n.role == ps::Role::kServer) servers.insert(n.id);
  }

  // The 26 tables: rows created on first touch, uniform in [-0.05, 0.05) (seeded by the
  // table and the id, so every run and server agrees).
  std::vector<ps::TableId> tables;
  for (int f = 0; f < kSparse; ++f) {
    ps::TableSpec spec = ps::TableSpec::Sparse("dlrm.t_C" + std::to_string(f + 1), dim, *rule);
    spec.learning_rate = static_cast<float>(FLAGS_lr);
    spec.epsilon = static_cast<float>(FLAGS_eps);
    spec.sync = *sync;
    spec.init = ps::Initializer::kUniform;
    spec.init_a = -0.05f;
    spec.init_b = 0.05f;
    spec.seed = 7;
    ps::StatusOr<ps::TableId> t = w.DeclareTable(spec);
    if (!t.ok()) return Fail("declare " + spec.name, t.status());
    tables.push_back(*t);
  }

  // The MLPs: the same initial values on every worker (PyTorch's Linear bounds, drawn
  // from --seed), averaged gradients, the same local optimizer: they stay equal.
  torch::manual_seed(FLAGS_seed);
  Dlrm model(dim, bottom_sizes, top_sizes);
  {
    torch::NoGradGuard no_grad;
    for (auto& m : model.modules(/*include_self=*/false)) {
      if (auto* lin = m->as<torch::nn::Linear>()) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(lin->options.in_features()));
        lin->weight.uniform_(-bound, bound);
        lin->bias.uniform_(-bound, bound);
      }
    }
  }
  std::vector<torch::Tensor> params = model.parameters();
  int64_t dense_params = 0;
  for (const auto& p : params) dense_params += p.numel();
  torch::optim::Adagrad opt(params, torch::optim::AdagradOptions(FLAGS_dense_lr));
  const CriteoSynth gen(static_cast<uint64_t>(FLAGS_seed), static_cast<uint64_t>(FLAGS_rows));
  if (rank == 0) {
    const std::string ids =
        FLAGS_rows > 0 ? std::to_string(FLAGS_rows) + " rows each" : "63-bit hashed ids";
    std::printf(
        "dlrm: %d worker(s), %d server(s); %d steps of %d x %d samples; "
        "26 tables of dim %d (%s, %s, %s), MLPs of %lld parameters\n",
        world, w.num_servers(), FLAGS_steps, world, FLAGS_batch, dim, FLAGS_rule.c_str(),
        FLAGS_sync.c_str(), ids.c_str(), static_cast<long long>(dense_params));
    std::fflush(stdout);
  }

  // The pooled embeddings of a shard: rows pulled with one PullSparseMany, then one
  // embedding_bag (sum) over all 26 features (bag f * n + i is feature f of sample i).
  // `rows` receives the pulled-rows tensor (the leaf whose gradient is pushed).
  const auto pool = [&](const Samples& b, const Lookup& l,
                        torch::Tensor* rows) -> ps::StatusOr<torch::Tensor> {
    *rows = torch::empty({l.rows, dim});
    std::vector<ps::SparseOut> pulls;
    int64_t base = 0;
    for (int f = 0; f < kSparse; ++f) {
      const size_t u = l.unique[f].size();
      pulls.push_back(
          {tables[f], l.unique[f].data(), u, rows->data_ptr<float>() + base * dim, u * dim});
      base += static_cast<int64_t>(u);
    }
    ps::Status st = w.Wait(w.PullSparseMany(pulls), timeout);
    if (!st.ok()) return st;
    if (torch::GradMode::is_enabled()) rows->requires_grad_(true);
    const int64_t bags = static_cast<int64_t>(kSparse) * b.n;
    torch::Tensor index =
        torch::from_blob(const_cast<int64_t*>(l.index.data()), {bags}, torch::kInt64);
    torch::Tensor offsets = torch::arange(bags, torch::kInt64);
    torch::Tensor pooled =
        std::get<0>(torch::embedding_bag(*rows, index, offsets, false, /*mode=sum*/ 0));
    return pooled.view({kSparse, b.n, dim}).transpose(0, 1);  // B x 26 x dim
  };

  ps::AllReduceOptions average;
  average.op = ps::ReduceOp::kAverage;
  const int warmup = std::min(FLAGS_warmup, FLAGS_steps - 1);
  std::vector<float> losses;
  auto start = std::chrono::steady_clock::now();
  ServerTraffic before;
  for (int step = 0; step < FLAGS_steps; ++step) {
    if (step == warmup) {
      s = w.Barrier(ps::Group::kWorkers, timeout);
      if (!s.ok()) return Fail("barrier", s);
      start = std::chrono::steady_clock::now();
      before = ToServers(w, servers);
    }
    const Samples b = gen.Batch(step, static_cast<int64_t>(rank) * FLAGS_batch, FLAGS_batch);
    const Lookup l = Plan(b);
    torch::Tensor rows;
    ps::StatusOr<torch::Tensor> pooled = pool(b, l, &rows);
    if (!pooled.ok()) return Fail("pull the rows", pooled.status());
    torch::Tensor dense = torch::from_blob(const_cast<float*>(b.dense.data()), {b.n, kDense});
    torch::Tensor labels = torch::from_blob(const_cast<float*>(b.labels.data()), {b.n});
    opt.zero_grad();
    torch::Tensor loss =
        torch::binary_cross_entropy_with_logits(model.Forward(dense, *pooled), labels);
    loss.backward();

    // The rows' gradient (of this shard's mean loss) scaled by 1/W: the servers' sum over
    // the workers is the gradient of the global batch's mean loss.
    torch::Tensor grad = (world > 1 ? rows.grad() * (1.0 / world) : rows.grad()).contiguous();
    std::vector<ps::SparseRef> pushes;
    int64_t base = 0;
    for (int f = 0; f < kSparse; ++f) {
      const size_t u = l.unique[f].size();
      pushes.push_back(
          {tables[f], l.unique[f].data(), u, grad.data_ptr<float>() + base * dim, u * dim});
      base += static_cast<int64_t>(u);
    }
    const ps::Ticket push = w.PushSparseMany(pushes);

    // Meanwhile, the MLPs' gradients and the loss averaged over the workers.
    std::vector<float> loss_value = {loss.item<float>()};
    std::vector<ps::CollectiveTensor> grads;
    for (auto& p : params) {
      grads.push_back({p.grad().data_ptr<float>(), p.grad().data_ptr<float>(),
                       static_cast<size_t>(p.grad().numel()), ps::DataType::kFloat32});
    }
    grads.push_back({loss_value.data(), loss_value.data(), 1, ps::DataType::kFloat32});
    s = w.communicator().GroupedAllReduce(grads, average);
    if (!s.ok()) return Fail("all-reduce the MLPs' gradients", s);
    opt.step();
    s = w.Wait(push, timeout);
    if (!s.ok()) return Fail("push the rows' gradients", s);

    losses.push_back(loss_value[0]);
    if (rank == 0 && (step % FLAGS_print_every == 0 || step + 1 == FLAGS_steps)) {
      std::printf("step %d: loss %.6f\n", step, loss_value[0]);
      std::fflush(stdout);
    }
  }
  // Every worker's pushes applied before the evaluation reads the rows.
  s = w.Barrier(ps::Group::kWorkers, timeout);
  if (!s.ok()) return Fail("barrier", s);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ServerTraffic after = ToServers(w, servers);
  const int timed = FLAGS_steps - warmup;

  if (rank == 0) {
    const double per_step = static_cast<double>(after.messages - before.messages) / timed;
    const double bytes_per_step = static_cast<double>(after.bytes - before.bytes) / timed;
    if (FLAGS_eval_samples > 0) {
      // Held out: samples of a step no training batch used.
      torch::NoGradGuard no_grad;
      const Samples e = gen.Batch(1000000000LL, 0, FLAGS_eval_samples);
      const Lookup l = Plan(e);
      torch::Tensor rows;
      ps::StatusOr<torch::Tensor> pooled = pool(e, l, &rows);
      if (!pooled.ok()) return Fail("pull the held-out rows", pooled.status());
      torch::Tensor dense = torch::from_blob(const_cast<float*>(e.dense.data()), {e.n, kDense});
      torch::Tensor p = torch::sigmoid(model.Forward(dense, *pooled)).contiguous();
      std::vector<float> scores(p.data_ptr<float>(), p.data_ptr<float>() + e.n);
      double logloss = 0;
      for (int i = 0; i < e.n; ++i) {
        const double q = std::min(std::max(static_cast<double>(scores[i]), 1e-7), 1.0 - 1e-7);
        logloss -= e.labels[i] > 0.5f ? std::log(q) : std::log(1.0 - q);
      }
      logloss /= e.n;
      const double ctr = std::accumulate(e.labels.begin(), e.labels.end(), 0.0) / e.n;
      std::printf("held out (%d samples, click rate %.3f): log loss %.4f, AUC %.4f\n", e.n, ctr,
                  logloss, Auc(e.labels, scores));
    }
    // bsp tables travel as single-table parts of the fused call (their clocks count it as
    // one step): 26 pulls and 26 pushes per server; async ones as one message per server.
    std::printf(
        "%.0f samples/s with %d worker(s) over %d timed steps; requests per step (rank 0's traffic "
        "counters): 1 PullSparseMany + 1 PushSparseMany = %.1f messages to %d server(s), %.1f KB\n",
        static_cast<double>(timed) * FLAGS_batch * world / elapsed, world, timed, per_step,
        w.num_servers(), bytes_per_step / 1e3);
    std::fflush(stdout);
  }
  // The others wait for rank 0's evaluation before they leave (as examples/python/dlrm.py
  // does: a worker that leaves at once may fail another's collective still finishing).
  s = w.Barrier(ps::Group::kWorkers, timeout);
  if (!s.ok()) return Fail("barrier", s);
  if (rank == 0) {
    std::printf("dlrm: finished %d steps: loss %.4f -> %.4f\n", FLAGS_steps, losses.front(),
                losses.back());
    std::fflush(stdout);
  }
  w.Stop();
  return 0;
}
