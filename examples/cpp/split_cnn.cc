// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The split step in C++ (LibTorch): a small CNN whose convolutional part is trained
// data-parallel through LayerPS tables on the "conv workers", and whose FC head lives on
// "FC nodes" (Stanza's layer separation, docs/placement.md), with a sparse embedding
// pulled and pushed by the conv workers (PullSparse / PushSparse). The C++ counterpart
// of layerps.placement.SplitTrainer with suffix_parallel="data" (docs/python.md).
//
// The model: 1x16x16 images -> conv1 (8 3x3, ReLU, max-pool 2) -> conv2 (16 3x3, ReLU,
// max-pool 2) -> flatten (256) ++ the embedding of the sample's id (8) -> fc1 (264 -> 128,
// ReLU) -> fc2 (128 -> 4 classes). The data is synthetic and learnable: a class is a
// bright quadrant plus noise, and the id agrees with the class two times in three.
//
// Each step, conv worker k pulls the conv layers' values and its batch's embedding rows,
// runs the prefix, sends its activations and labels to its FC node (one all-to-all among
// the ranks with a role each), gets the activations' gradient back, and pushes the conv
// gradients (dense tables, server-side SGD) and the embedding rows' gradients (a sparse
// table). An FC node trains the head on the activations of the conv workers it serves;
// several FC nodes all-reduce the head's gradients among themselves (replicas). The loss
// is the mean over the global batch, so training equals one process training the whole
// model on the global batch, up to the order of float additions: --check makes the first
// FC node train that one process too and compare (exit 1 beyond --tolerance).
//
//   split_cnn --write_profile=cnn.json                        # the model, for layerps-plan
//   layerps-plan --model=cnn.json --workers=2 --servers=2 --strategy=stanza --write_plan=plan.json
//   layerps-launch -s 2 -w 3 --plan=plan.json -- split_cnn --plan=plan.json --check
//
// The plan gives the cut and the FC nodes (its roles.fc_nodes; park: one); they are the
// last worker ranks, so launch (conv workers + FC nodes) workers. Without --plan: one FC
// node, the last rank.
#include <gflags/gflags.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../../tools/cli.h"
#include "ps/placement.h"
#include "ps/ps.h"

DEFINE_int32(steps, 60, "Training steps");
DEFINE_int32(batch, 16, "Samples per conv worker per step");
DEFINE_double(lr, 0.05, "SGD learning rate (conv tables on the servers, the head on the FC nodes)");
DEFINE_int32(ids, 200, "Distinct sample ids (rows of the sparse embedding)");
DEFINE_int32(seed, 7, "Seed of the initial weights and of the data");
DEFINE_string(plan, "", "A stanza or park plan (layerps-plan --write_plan): cut and FC nodes");
DEFINE_string(write_profile, "", "Write the model's profile (JSON for layerps-plan --model) and exit");
DEFINE_bool(check, false, "The first FC node also trains one process on the global batch and compares");
DEFINE_double(tolerance, 1e-5,
              "--check: largest relative difference of the final loss, the head, the conv layers and "
              "the embedding (each to its largest magnitude)");
DEFINE_int32(print_every, 10, "Print the global batch's loss every this many steps");

namespace {

constexpr int kClasses = 4;
constexpr int kEmbedDim = 8;
constexpr int kFeatures = 16 * 4 * 4;  // conv2's output, flattened
constexpr int kActivation = kFeatures + kEmbedDim;

int Fail(const std::string& what, const ps::Status& s) {
  std::fprintf(stderr, "split_cnn: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// The conv part and the head: built alike on every rank from --seed.
struct Prefix : torch::nn::Module {
  Prefix() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return x.flatten(1);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
};

struct Head : torch::nn::Module {
  Head() {
    fc1 = register_module("fc1", torch::nn::Linear(kActivation, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, kClasses));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Conv worker k's batch of step s: images, labels, ids (the same on every rank that asks).
struct Batch {
  torch::Tensor x, y;
  std::vector<ps::Key> ids;
};
Batch MakeBatch(int step, int k, int n) {
  std::mt19937 rng(static_cast<uint32_t>(FLAGS_seed * 1000003 + step * 1009 + k));
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::uniform_int_distribution<int> cls(0, kClasses - 1), id(0, FLAGS_ids - 1), third(0, 2);
  Batch b;
  b.x = torch::empty({n, 1, 16, 16});
  b.y = torch::empty({n}, torch::kInt64);
  auto xa = b.x.accessor<float, 4>();
  for (int i = 0; i < n; ++i) {
    const int c = cls(rng);
    b.y[i] = c;
    for (int r = 0; r < 16; ++r) {
      for (int col = 0; col < 16; ++col) {
        const bool lit = (r < 8) == (c / 2 == 0) && (col < 8) == (c % 2 == 0);
        xa[i][0][r][col] = (lit ? 1.0f : 0.0f) + noise(rng);
      }
    }
    // The id says the class two times in three (id % 4 == class), else nothing.
    int v = id(rng);
    if (third(rng) < 2) v = v - v % kClasses + c;
    b.ids.push_back(static_cast<ps::Key>(v % FLAGS_ids));
  }
  return b;
}

// The model's profile for layerps-plan (docs/placement.md, "Profiles"): the dense layers
// in order. The embedding is a sparse table on every server, outside the plan.
ps::placement::ModelProfile Profile() {
  ps::placement::ModelProfile p;
  p.name = "split_cnn";
  p.input_bytes_per_sample = 16 * 16 * 4;
  const auto layer = [](const char* name, ps::placement::LayerKind kind, uint64_t params, double flops,
                        uint64_t act, const char* input) {
    ps::placement::LayerProfile l;
    l.name = name;
    l.kind = kind;
    l.param_bytes = params * 4;
    l.flops_per_sample = flops;
    l.activation_bytes = act * 4;
    if (input != nullptr) l.inputs.push_back(input);
    l.tables.push_back(name);
    return l;
  };
  p.layers.push_back(layer("conv1", ps::placement::LayerKind::kConv, 8 * 9 + 8, 2.0 * 8 * 9 * 16 * 16, 8 * 8 * 8, nullptr));
  p.layers.push_back(layer("conv2", ps::placement::LayerKind::kConv, 16 * 8 * 9 + 16, 2.0 * 16 * 8 * 9 * 8 * 8, kFeatures, "conv1"));
  p.layers.push_back(layer("fc1", ps::placement::LayerKind::kFc, kActivation * 128 + 128, 2.0 * kActivation * 128, 128, "conv2"));
  p.layers.push_back(layer("fc2", ps::placement::LayerKind::kFc, 128 * kClasses + kClasses, 2.0 * 128 * kClasses, kClasses, "fc1"));
  return p;
}

std::vector<float> Flat(const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().to(torch::kFloat32);
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// One process training the whole model on the global batch (--check).
struct Reference {
  double loss = 0;
  std::vector<float> head;       // fc1 and fc2, flattened
  std::vector<float> prefix;     // conv1 and conv2, flattened
  std::vector<float> embedding;  // ids x kEmbedDim
};
Reference TrainOneProcess(int conv_workers) {
  torch::manual_seed(FLAGS_seed);
  Prefix prefix;
  Head head;
  torch::Tensor emb = torch::zeros({FLAGS_ids, kEmbedDim}, torch::requires_grad());
  std::vector<torch::Tensor> params = prefix.parameters();
  for (const auto& p : head.parameters()) params.push_back(p);
  params.push_back(emb);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(FLAGS_lr));
  Reference r;
  for (int step = 0; step < FLAGS_steps; ++step) {
    std::vector<torch::Tensor> acts, ys;
    for (int k = 0; k < conv_workers; ++k) {
      Batch b = MakeBatch(step, k, FLAGS_batch);
      std::vector<int64_t> rows(b.ids.begin(), b.ids.end());
      acts.push_back(torch::cat({prefix.forward(b.x), emb.index_select(0, torch::tensor(rows))}, 1));
      ys.push_back(b.y);
    }
    sgd.zero_grad();
    torch::Tensor loss = torch::cross_entropy_loss(head.forward(torch::cat(acts)), torch::cat(ys));
    loss.backward();
    sgd.step();
    r.loss = loss.item<double>();
  }
  for (const auto& p : head.parameters()) {
    std::vector<float> f = Flat(p);
    r.head.insert(r.head.end(), f.begin(), f.end());
  }
  for (const auto& p : prefix.parameters()) {
    std::vector<float> f = Flat(p);
    r.prefix.insert(r.prefix.end(), f.begin(), f.end());
  }
  r.embedding = Flat(emb);
  return r;
}

// The largest difference between a and b, relative to b's largest magnitude.
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return a.size() != b.size() ? 1.0 : worst / std::max(1e-12, scale);
}

}  // namespace

int main(int argc, char** argv) {
  ps::cli::ParseOrExit(argc, argv,
                       "split_cnn: a CNN split between conv workers (LayerPS tables) and FC nodes,\n"
                       "with a sparse embedding, in C++ with LibTorch. Run it under layerps-launch.",
                       /*stop_at_positional=*/false, /*roles=*/"w");
  if (FLAGS_steps < 1 || FLAGS_batch < 1 || FLAGS_ids < kClasses || !(FLAGS_lr > 0) || FLAGS_print_every < 1) {
    ps::cli::Fail("split_cnn", "--steps, --batch and --print_every must be >= 1, --ids >= 4, --lr > 0");
  }
  if (!FLAGS_write_profile.empty()) {
    std::ofstream out(FLAGS_write_profile);
    out << ps::placement::ModelProfileToJson(Profile()) << "\n";
    if (!out) ps::cli::Fail("split_cnn", "cannot write " + FLAGS_write_profile);
    std::printf("wrote the profile of split_cnn to %s\n", FLAGS_write_profile.c_str());
    return 0;
  }
  torch::set_num_threads(1);  // several ranks share the machine's cores

  int fc_nodes = 1;
  std::vector<int> fc_of_worker;  // the plan's: which FC node (index) each conv worker feeds
  int plan_conv_workers = -1;
  if (!FLAGS_plan.empty()) {
    ps::StatusOr<ps::placement::Plan> plan = ps::placement::ReadPlanFile(FLAGS_plan);
    if (!plan.ok()) return Fail("--plan " + FLAGS_plan, plan.status());
    if ((plan->strategy != "stanza" && plan->strategy != "park") || plan->cut_layer != "fc1") {
      return Fail("--plan " + FLAGS_plan,
                  ps::InvalidArgument("a stanza or park plan cutting before fc1 is needed (strategy " +
                                      plan->strategy + ", cut '" + plan->cut_layer + "')"));
    }
    if (plan->fc_parallel != "data") {
      return Fail("--plan " + FLAGS_plan, ps::InvalidArgument("fc_parallel 'channel' is not supported here"));
    }
    if (plan->strategy == "stanza") {
      fc_nodes = std::max<int>(1, static_cast<int>(plan->roles.fc_nodes.size()));
      fc_of_worker = plan->roles.fc_node_of_worker;
    }
    plan_conv_workers = static_cast<int>(plan->roles.conv_workers.size());
  }

  ps::StatusOr<ps::Options> options = ps::Options::FromEnv();
  if (!options.ok()) return Fail("options", options.status());
  ps::Worker w(*options);
  ps::Status s = w.Start();
  if (!s.ok()) return Fail("start", s);
  const auto timeout = std::chrono::milliseconds(options->request_timeout_ms);
  const int n = w.num_workers(), rank = static_cast<int>(w.rank());
  const int conv_workers = n - fc_nodes;
  if (conv_workers < fc_nodes) {
    return Fail("roles", ps::InvalidArgument(std::to_string(n) + " workers for " + std::to_string(fc_nodes) +
                                             " FC node(s): launch at least twice as many"));
  }
  if (plan_conv_workers >= 0 && plan_conv_workers != conv_workers) {
    return Fail("--plan " + FLAGS_plan,
                ps::InvalidArgument("it has " + std::to_string(plan_conv_workers) + " conv worker(s) and " +
                                    std::to_string(fc_nodes) + " FC node(s): launch " +
                                    std::to_string(plan_conv_workers + fc_nodes) + " workers, not " +
                                    std::to_string(n)));
  }
  if (fc_of_worker.size() != static_cast<size_t>(conv_workers)) {
    fc_of_worker.resize(conv_workers);  // no plan (or none given): round robin
    for (int k = 0; k < conv_workers; ++k) fc_of_worker[k] = k % fc_nodes;
  }
  for (int f : fc_of_worker) {
    if (f < 0 || f >= fc_nodes) return Fail("--plan " + FLAGS_plan, ps::InvalidArgument("a bad fc_node_of_worker"));
  }
  const bool is_fc = rank >= conv_workers;
  const int fc_index = rank - conv_workers;  // FC node f serves the conv workers k with fc_of_worker[k] == f
  std::vector<uint32_t> fc_ranks;
  for (int r = conv_workers; r < n; ++r) fc_ranks.push_back(static_cast<uint32_t>(r));

  torch::manual_seed(FLAGS_seed);
  Prefix prefix;
  Head head;
  // The conv layers' tables (server-side SGD, pinned as the plan's layers say) and the
  // embedding (sparse, on every server, zeros to start).
  std::vector<std::pair<ps::TableId, torch::Tensor>> tables;
  for (const auto& kv : prefix.named_parameters()) {
    ps::TableSpec spec = ps::TableSpec::Dense("split_cnn." + kv.key(), kv.value().numel(), ps::UpdateRule::kSgd);
    spec.learning_rate = static_cast<float>(FLAGS_lr);
    spec.layer = kv.key().substr(0, kv.key().find('.'));
    ps::StatusOr<ps::TableId> t = w.DeclareTable(spec);
    if (!t.ok()) return Fail("declare " + spec.name, t.status());
    tables.emplace_back(*t, kv.value());
  }
  ps::TableSpec espec = ps::TableSpec::Sparse("split_cnn.emb", kEmbedDim, ps::UpdateRule::kSgd);
  espec.learning_rate = static_cast<float>(FLAGS_lr);
  ps::StatusOr<ps::TableId> emb_table = w.DeclareTable(espec);
  if (!emb_table.ok()) return Fail("declare the embedding", emb_table.status());
  if (rank == 0) {
    for (auto& [t, p] : tables) {
      std::vector<float> v = Flat(p);
      s = w.Wait(w.Assign(t, v.data(), v.size()), timeout);
      if (!s.ok()) return Fail("assign the initial values", s);
    }
    std::printf("split_cnn: %d conv worker(s), %d FC node(s), %d server(s); %d steps of %d x %d samples\n",
                conv_workers, fc_nodes, w.num_servers(), FLAGS_steps, conv_workers, FLAGS_batch);
  }
  s = w.Barrier(ps::Group::kWorkers, timeout);
  if (!s.ok()) return Fail("barrier", s);

  torch::optim::SGD head_sgd(head.parameters(), torch::optim::SGDOptions(FLAGS_lr));
  ps::CollectiveOptions all;  // every worker: conv workers and FC nodes
  ps::AllReduceOptions among_fc;
  among_fc.ranks = fc_ranks;
  double loss_value = 0;
  for (int step = 0; step < FLAGS_steps; ++step) {
    // 1. Activations and labels to the FC nodes (one all-to-all each).
    std::vector<size_t> counts(n, 0), label_counts(n, 0);
    std::vector<float> act_out;
    std::vector<int64_t> labels_out;
    Batch b;
    torch::Tensor act, emb;
    if (!is_fc) {
      b = MakeBatch(step, rank, FLAGS_batch);
      for (auto& [t, p] : tables) {
        torch::NoGradGuard no_grad;
        s = w.Wait(w.Pull(t, p.data_ptr<float>(), p.numel()), timeout);
        if (!s.ok()) return Fail("pull", s);
      }
      std::vector<float> rows(b.ids.size() * kEmbedDim);
      s = w.Wait(w.PullSparse(*emb_table, b.ids.data(), b.ids.size(), rows.data(), rows.size()), timeout);
      if (!s.ok()) return Fail("pull the embedding", s);
      emb = torch::from_blob(rows.data(), {FLAGS_batch, kEmbedDim}).clone().requires_grad_(true);
      act = torch::cat({prefix.forward(b.x), emb}, 1);
      act_out = Flat(act);
      labels_out.assign(b.y.data_ptr<int64_t>(), b.y.data_ptr<int64_t>() + FLAGS_batch);
      const int to = conv_workers + fc_of_worker[rank];
      counts[to] = act_out.size();
      label_counts[to] = labels_out.size();
    }
    ps::GatherResult acts, labels;
    s = w.communicator().AllToAllV(act_out.data(), counts, ps::DataType::kFloat32, &acts, all);
    if (s.ok()) s = w.communicator().AllToAllV(labels_out.data(), label_counts, ps::DataType::kInt64, &labels, all);
    if (!s.ok()) return Fail("send the activations", s);

    // 2. The FC nodes train the head and return the activations' gradients.
    std::vector<float> grad_out;
    std::vector<size_t> grad_counts(n, 0);
    if (is_fc) {
      const size_t rows = acts.data.size() / sizeof(float) / kActivation;
      torch::Tensor x = torch::from_blob(acts.data.data(), {static_cast<int64_t>(rows), kActivation})
                            .clone()
                            .requires_grad_(true);
      torch::Tensor y = torch::from_blob(labels.data.data(), {static_cast<int64_t>(rows)}, torch::kInt64).clone();
      head_sgd.zero_grad();
      // This node's share of the global batch's mean: the replicas' shares add up to it.
      const double share = static_cast<double>(rows) / (static_cast<double>(conv_workers) * FLAGS_batch);
      torch::Tensor loss = torch::cross_entropy_loss(head.forward(x), y) * share;
      loss.backward();
      std::vector<float> total = {static_cast<float>(loss.item<double>())};
      if (fc_nodes > 1) {
        std::vector<ps::CollectiveTensor> grads;
        for (auto& p : head.parameters()) {
          grads.push_back({p.grad().data_ptr<float>(), p.grad().data_ptr<float>(),
                           static_cast<size_t>(p.grad().numel()), ps::DataType::kFloat32});
        }
        grads.push_back({total.data(), total.data(), 1, ps::DataType::kFloat32});
        s = w.communicator().GroupedAllReduce(grads, among_fc);
        if (!s.ok()) return Fail("all-reduce the head's gradients", s);
      }
      head_sgd.step();
      loss_value = total[0];
      grad_out = Flat(x.grad());
      // Back to each conv worker served, in the order received (rank order).
      for (int k = 0; k < conv_workers; ++k) {
        if (fc_of_worker[k] == fc_index) grad_counts[k] = static_cast<size_t>(FLAGS_batch) * kActivation;
      }
      if (fc_index == 0 && (step % FLAGS_print_every == 0 || step + 1 == FLAGS_steps)) {
        std::printf("step %d: loss %.4f\n", step, loss_value);
        std::fflush(stdout);
      }
    }
    ps::GatherResult grads;
    s = w.communicator().AllToAllV(grad_out.data(), grad_counts, ps::DataType::kFloat32, &grads, all);
    if (!s.ok()) return Fail("return the gradients", s);

    // 3. The conv workers' backward and pushes.
    if (!is_fc) {
      torch::Tensor g = torch::from_blob(grads.data.data(), {FLAGS_batch, kActivation}).clone();
      for (auto& p : prefix.parameters()) p.mutable_grad() = torch::Tensor();
      act.backward(g);
      std::vector<ps::Ticket> pushes;
      std::vector<std::vector<float>> held;
      for (auto& [t, p] : tables) {
        held.push_back(Flat(p.grad()));
        pushes.push_back(w.Push(t, held.back().data(), held.back().size()));
      }
      held.push_back(Flat(emb.grad()));
      pushes.push_back(w.PushSparse(*emb_table, b.ids.data(), b.ids.size(), held.back().data(), held.back().size()));
      for (ps::Ticket t : pushes) {
        s = w.Wait(t, timeout);
        if (!s.ok()) return Fail("push", s);
      }
    }
    // Every push of this step applied before the next step's pulls.
    s = w.Barrier(ps::Group::kWorkers, timeout);
    if (!s.ok()) return Fail("barrier", s);
  }

  int code = 0;
  if (FLAGS_check && is_fc && fc_index == 0) {
    const Reference ref = TrainOneProcess(conv_workers);
    // What the cluster holds: the head here, the conv layers and the embedding on the servers.
    std::vector<float> head_here, prefix_there, emb_there(static_cast<size_t>(FLAGS_ids) * kEmbedDim);
    for (const auto& p : head.parameters()) {
      std::vector<float> f = Flat(p);
      head_here.insert(head_here.end(), f.begin(), f.end());
    }
    for (auto& [t, p] : tables) {
      std::vector<float> v(p.numel());
      s = w.Wait(w.Pull(t, v.data(), v.size()), timeout);
      if (!s.ok()) return Fail("pull for the check", s);
      prefix_there.insert(prefix_there.end(), v.begin(), v.end());
    }
    std::vector<ps::Key> all_ids(FLAGS_ids);
    for (int i = 0; i < FLAGS_ids; ++i) all_ids[i] = static_cast<ps::Key>(i);
    s = w.Wait(w.PullSparse(*emb_table, all_ids.data(), all_ids.size(), emb_there.data(), emb_there.size()), timeout);
    if (!s.ok()) return Fail("pull the embedding for the check", s);
    const double d_loss = std::fabs(loss_value - ref.loss) / std::max(1e-12, std::fabs(ref.loss));
    const double d_head = RelativeDifference(head_here, ref.head);
    const double d_prefix = RelativeDifference(prefix_there, ref.prefix);
    const double d_emb = RelativeDifference(emb_there, ref.embedding);
    const bool ok = std::max({d_loss, d_head, d_prefix, d_emb}) <= FLAGS_tolerance;
    std::printf("check against one process: final loss %.6f here, %.6f there; relative differences: "
                "loss %.1e, head %.1e, conv layers %.1e, embedding %.1e: %s\n",
                loss_value, ref.loss, d_loss, d_head, d_prefix, d_emb, ok ? "MATCH" : "MISMATCH");
    code = ok ? 0 : 1;
  }
  w.Stop();
  return code;
}
