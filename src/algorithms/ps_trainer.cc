// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// bsp, asp, ssp: the model lives in one dense table "<name>/params" on the servers, with
// the algorithm's synchronization (TableSpec::sync bsp, async, ssp(staleness)) and the
// LocalOptimizer's rule (sgd; momentum or nesterov with its momentum) at the fixed server
// learning rate lr0 = optimizer.learning_rate.
//
// Create: rank 0 assigns its parameters to the table; after a barrier every worker pulls
// them, and a second barrier holds every first push until all have (a plain pull is
// answered with the latest state: ssp would otherwise let it see an early step-0 push). Step(g): one pushpull of g * lr(t) / (lr0 * W), then params = what it returned:
//   bsp: the state after this step of every worker (the pull waits on the servers);
//   ssp: the latest state, once no live worker is more than s steps behind this one;
//   asp: the latest state, this push included.
// The scale 1/W makes the servers' sum of W batch means the global batch's mean; the
// factor lr(t)/lr0 carries warm-up and decay through the fixed server rate. With sgd
// that is exactly x -= lr(t) * g. With momentum it scales each gradient as it enters the
// velocity (x -= lr0 * sum_k m^k g(t-k) lr(t-k)/lr0), where torch scales the whole
// velocity by today's rate: the two agree while the rate is constant.
// Finish: a barrier, then params = the table's final state (every worker the same).
#include <algorithm>

#include "algorithms/model_trainer.h"
#include "algorithms/table_exchange.h"

namespace ps {
namespace algorithms {
namespace {

TableSpec ParamsSpec(const TrainerArgs& args) {
  const TrainerOptions& o = args.options;
  const LocalOptimizer& opt = o.optimizer;
  UpdateRule rule = UpdateRule::kSgd;
  if (opt.momentum > 0.0f) rule = opt.nesterov ? UpdateRule::kNesterov : UpdateRule::kMomentum;
  TableSpec spec = TableSpec::Dense(o.name + "/params", args.n, rule);
  spec.learning_rate = opt.learning_rate;
  if (opt.momentum > 0.0f) spec.momentum = opt.momentum;
  switch (o.algorithm.kind) {
    case Algorithm::kBsp:
      spec.sync = SyncMode::kBsp;
      break;
    case Algorithm::kSsp:
      spec.sync = SyncMode::kSsp;
      spec.staleness = o.algorithm.staleness;
      break;
    default:
      spec.sync = SyncMode::kAsync;
  }
  return spec;
}

class PsTrainer : public ModelTrainer {
 public:
  PsTrainer(const TrainerArgs& args, TableId table)
      : ModelTrainer(args),
        table_(table),
        world_(args.worker->num_workers()),
        exchange_(args.n) {}

  // Rank 0 seeds the table; every worker then starts from it. The second barrier keeps
  // every worker's first push (step 0) off the servers until every worker has read the
  // seeded state: the pull here is a plain pull of clock 0, which neither policy holds,
  // and ssp applies a push as it arrives, so without the barrier a worker slow to pull
  // could read the seed plus a fast worker's step-0 push (ssp(0) then differs from bsp;
  // asp starts a replica from a state that is not rank 0's). bsp sums step 0 until every
  // worker has pushed, so it never had the window, but the barrier costs one round trip.
  Status Init() {
    Status st =
        SeedFromRankZero(worker_, exchange_, table_, params_, n_, options().timeout, "the table");
    if (st.ok()) st = PullParams(exchange_, table_);
    if (!st.ok()) return st;
    st = worker_->Barrier(Group::kWorkers, options().timeout);
    return st.ok() ? st : st.WithContext("Trainer: barrier after the first pull");
  }

  Status Step(const float* grad) override {
    PS_RETURN_IF_ERROR(CheckStep());
    const LocalOptimizer& opt = options().optimizer;
    const float scale =
        opt.LearningRateAt(step_) / (opt.learning_rate * static_cast<float>(world_));
    float* send = exchange_.send();
    for (size_t i = 0; i < n_; ++i) send[i] = grad[i] * scale;
    Status st = exchange_.Run(
        [&](const float* s, float* r, Worker::Callback cb) {
          return worker_->PushPull(table_, s, r, n_, std::move(cb));
        },
        options().timeout);
    if (!st.ok()) {
      failed_ = st;
      return st;
    }
    MutexLock lock(&mu_);
    std::copy(exchange_.recv(), exchange_.recv() + n_, params_);
    ++step_;
    ++stats_.steps;
    ++stats_.exchanges;
    return Status::OK();
  }

  // (The final pull of bsp/ssp waits until this worker's clock allows it.)
  Status Finish() override { return FinishFromTable(exchange_, table_); }

 private:
  const TableId table_;
  const int world_;
  TableExchange exchange_;
  uint64_t step_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Trainer>> NewPsTrainer(const TrainerArgs& args) {
  StatusOr<TableId> table = args.worker->DeclareTable(ParamsSpec(args));
  if (!table.ok()) return table.status();
  auto trainer = std::make_unique<PsTrainer>(args, *table);
  Status st = trainer->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<Trainer>(std::move(trainer));
}

}  // namespace algorithms
}  // namespace ps
