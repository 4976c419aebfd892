// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "algorithms/model_trainer.h"

#include <algorithm>

namespace ps {
namespace algorithms {

ModelTrainer::ModelTrainer(const TrainerArgs& args)
    : Trainer(args.options), worker_(args.worker), params_(args.params), n_(args.n) {}

void ModelTrainer::CopyParams(float* out) const {
  MutexLock lock(&mu_);
  std::copy(params_, params_ + n_, out);
}

TrainerStats ModelTrainer::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

Status ModelTrainer::CheckStep() const {
  if (finished_) return FailedPrecondition("Trainer: Step after Finish");
  if (!failed_.ok())
    return FailedPrecondition("Trainer: an earlier step failed: " + failed_.ToString());
  return Status::OK();
}

Status ModelTrainer::PullParams(TableExchange& exchange, TableId table) {
  Status st = exchange.Run(
      [&](const float*, float* r, Worker::Callback cb) {
        return worker_->Pull(table, r, n_, std::move(cb));
      },
      options().timeout);
  if (!st.ok()) return st;
  MutexLock lock(&mu_);
  std::copy(exchange.recv(), exchange.recv() + n_, params_);
  return Status::OK();
}

Status ModelTrainer::FinishFromTable(TableExchange& exchange, TableId table) {
  if (finished_) return Status::OK();
  finished_ = true;
  if (!failed_.ok()) return failed_;
  Status st = worker_->Barrier(Group::kWorkers, options().timeout);
  if (!st.ok()) return st.WithContext("Trainer: Finish");
  return PullParams(exchange, table);
}

}  // namespace algorithms
}  // namespace ps
