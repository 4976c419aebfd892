// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// AR-SGD: every step, the gradients are summed by ring all-reduce (Worker::AllReduce,
// reduce-scatter then all-gather) and each worker applies the mean with the same local
// SGD: the replicas stay equal, and equal to one process training with the global batch.
#include <algorithm>
#include <vector>

#include "algorithms/local_sgd.h"
#include "algorithms/model_trainer.h"

namespace ps {
namespace algorithms {
namespace {

class ArsgdTrainer : public ModelTrainer {
 public:
  explicit ArsgdTrainer(const TrainerArgs& args)
      : ModelTrainer(args), sgd_(args.options.optimizer, args.n), sum_(args.n) {}

  Status Step(const float* grad) override {
    if (finished_) return FailedPrecondition("Trainer: Step after Finish");
    std::copy(grad, grad + n_, sum_.begin());
    Status st = worker_->communicator().AllReduce(sum_.data(), n_, options().timeout);
    if (!st.ok()) return st;
    MutexLock lock(&mu_);
    sgd_.Apply(params_, sum_.data(), 1.0f / static_cast<float>(worker_->num_workers()));
    ++stats_.steps;
    ++stats_.exchanges;
    return Status::OK();
  }

  Status Finish() override {
    finished_ = true;
    return Status::OK();
  }

 private:
  LocalSgd sgd_ GUARDED_BY(mu_);
  std::vector<float> sum_;
};

}  // namespace

StatusOr<std::unique_ptr<Trainer>> NewArsgdTrainer(const TrainerArgs& args) {
  Status st = BroadcastFromRankZero(args.worker, args.params, args.n, args.options.timeout);
  if (!st.ok()) return st;
  return std::unique_ptr<Trainer>(new ArsgdTrainer(args));
}

}  // namespace algorithms
}  // namespace ps
