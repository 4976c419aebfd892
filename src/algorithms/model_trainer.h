// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ModelTrainer: what every trainer of this room holds and does the same way: the worker,
// the caller's parameter buffer and the statistics, under one lock (CopyParams and stats
// may be called from any thread while Step writes the parameters), and the end of a
// trainer whose model lives in a table (bsp/asp/ssp's parameters, EASGD's centre): a
// barrier, then every worker's parameters are the table's.
#ifndef PS_ALGORITHMS_MODEL_TRAINER_H_
#define PS_ALGORITHMS_MODEL_TRAINER_H_

#include <cstddef>

#include "algorithms/table_exchange.h"
#include "algorithms/trainers.h"
#include "common/mutex.h"

namespace ps {
namespace algorithms {

class ModelTrainer : public Trainer {
 public:
  void CopyParams(float* out) const override EXCLUDES(mu_);
  TrainerStats stats() const override EXCLUDES(mu_);

 protected:
  explicit ModelTrainer(const TrainerArgs& args);

  // Step's precondition: kFailedPrecondition after Finish, or after a step that failed
  // (failed_, whose error it names).
  Status CheckStep() const;
  // params = the values of dense table `table` (pulled through `exchange`).
  Status PullParams(TableExchange& exchange, TableId table) EXCLUDES(mu_);
  // Finish of a trainer whose model is `table`: once (finished_), unless a step failed, a
  // barrier of every worker (every last push is in), then PullParams.
  Status FinishFromTable(TableExchange& exchange, TableId table) EXCLUDES(mu_);

  Worker* const worker_;
  float* const params_;
  const size_t n_;
  mutable Mutex mu_;  // the model: params_ and what a derived class says
  TrainerStats stats_ GUARDED_BY(mu_);
  bool finished_ = false;  // Step/Finish's thread only
  Status failed_;          // Step/Finish's thread only: the first failed step
};

}  // namespace algorithms
}  // namespace ps

#endif  // PS_ALGORITHMS_MODEL_TRAINER_H_
