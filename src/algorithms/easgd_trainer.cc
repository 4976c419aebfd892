// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// EASGD(tau, alpha): every worker runs local SGD (LocalSgd: momentum, warm-up and decay
// as configured) on its own batch; every tau local steps it exchanges with the centre
// variable x~, a dense table "<name>/centre" of rule elastic (elastic_alpha = alpha):
//   d = x_i - x~;  x_i -= alpha * d;  x~ += alpha * d
// in one round trip: a pushpull carries x_i, the server answers with x~ as it was and
// moves it (atomically for its range, server/optimizers/elastic.cc), and the worker
// moves towards the x~ it got. Create makes every worker start from rank 0's parameters
// (BroadcastFromRankZero), which also seed the centre. Finish: a barrier (every worker's
// last exchange is in), then params = the centre, the model EASGD evaluates.
#include <algorithm>

#include "algorithms/local_sgd.h"
#include "algorithms/model_trainer.h"
#include "algorithms/table_exchange.h"

namespace ps {
namespace algorithms {
namespace {

class EasgdTrainer : public ModelTrainer {
 public:
  EasgdTrainer(const TrainerArgs& args, TableId centre)
      : ModelTrainer(args),
        centre_(centre),
        sgd_(args.options.optimizer, args.n),
        exchange_(args.n) {}

  // Rank 0 seeds the centre with the (already common) parameters.
  Status Init() {
    return SeedFromRankZero(worker_, exchange_, centre_, params_, n_, options().timeout,
                            "the centre");
  }

  Status Step(const float* grad) override {
    PS_RETURN_IF_ERROR(CheckStep());
    {
      MutexLock lock(&mu_);
      sgd_.Apply(params_, grad);
      ++stats_.steps;
      if (stats_.steps % static_cast<uint64_t>(options().algorithm.tau) != 0) return Status::OK();
      std::copy(params_, params_ + n_, exchange_.send());
    }
    Status st = exchange_.Run(
        [&](const float* s, float* r, Worker::Callback cb) {
          return worker_->PushPull(centre_, s, r, n_, std::move(cb));
        },
        options().timeout);
    if (!st.ok()) {
      failed_ = st;
      return st;
    }
    const float alpha = options().algorithm.alpha;
    const float* centre = exchange_.recv();
    MutexLock lock(&mu_);
    for (size_t i = 0; i < n_; ++i) params_[i] -= alpha * (params_[i] - centre[i]);
    ++stats_.exchanges;
    return Status::OK();
  }

  Status Finish() override { return FinishFromTable(exchange_, centre_); }

 private:
  const TableId centre_;
  LocalSgd sgd_ GUARDED_BY(mu_);
  TableExchange exchange_;
};

}  // namespace

StatusOr<std::unique_ptr<Trainer>> NewEasgdTrainer(const TrainerArgs& args) {
  Status st = BroadcastFromRankZero(args.worker, args.params, args.n, args.options.timeout);
  if (!st.ok()) return st;
  TableSpec spec = TableSpec::Dense(args.options.name + "/centre", args.n, UpdateRule::kElastic);
  spec.elastic_alpha = args.options.algorithm.alpha;
  StatusOr<TableId> centre = args.worker->DeclareTable(spec);
  if (!centre.ok()) return centre.status();
  auto trainer = std::make_unique<EasgdTrainer>(args, *centre);
  st = trainer->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<Trainer>(std::move(trainer));
}

}  // namespace algorithms
}  // namespace ps
