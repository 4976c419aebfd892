// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Trainer::Create: checks, then the algorithm family's factory.
#include <algorithm>

#include "algorithms/trainers.h"

namespace ps {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(Worker* worker, float* params, size_t n,
                                                   const TrainerOptions& options) {
  if (worker == nullptr) return InvalidArgument("Trainer: worker is null");
  if (params == nullptr || n == 0) return InvalidArgument("Trainer: params must be a non-empty buffer");
  Status st = options.algorithm.Validate();
  if (st.ok()) st = options.optimizer.Validate();
  if (!st.ok()) return st;
  if (options.name.empty()) return InvalidArgument("Trainer: name must not be empty");
  if (options.timeout.count() <= 0) return InvalidArgument("Trainer: timeout must be > 0");
  if (worker->num_workers() <= 0) return FailedPrecondition("Trainer: the worker is not started");
  algorithms::TrainerArgs args;
  args.worker = worker;
  args.params = params;
  args.n = n;
  args.options = options;
  switch (options.algorithm.kind) {
    case Algorithm::kBsp:
    case Algorithm::kAsp:
    case Algorithm::kSsp:
      return algorithms::NewPsTrainer(args);
    case Algorithm::kEasgd:
      return algorithms::NewEasgdTrainer(args);
    case Algorithm::kArsgd:
      return algorithms::NewArsgdTrainer(args);
    case Algorithm::kGosgd:
      return algorithms::NewGosgdTrainer(args);
    case Algorithm::kAdpsgd:
      return algorithms::NewAdpsgdTrainer(args);
  }
  return InvalidArgument("Trainer: unknown algorithm");
}

namespace algorithms {

Status BroadcastFromRankZero(Worker* worker, float* params, size_t n,
                             std::chrono::milliseconds timeout) {
  if (worker->num_workers() == 1) return Status::OK();
  if (worker->rank() != 0) std::fill(params, params + n, 0.0f);
  return worker->communicator().AllReduce(params, n, timeout);
}

}  // namespace algorithms
}  // namespace ps
