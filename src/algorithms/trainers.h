// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// One factory per algorithm family, and what they share. Trainer::Create (trainer.cc)
// validates the options and the worker, then calls the family's factory. Each family
// lives in its own file; every one works over the public Worker API only (this room sits
// above src/worker/ and includes nothing below include/ps but common/).
#ifndef PS_ALGORITHMS_TRAINERS_H_
#define PS_ALGORITHMS_TRAINERS_H_

#include <memory>

#include "ps/algorithm.h"

namespace ps {
namespace algorithms {

// What every factory receives: a started worker, the caller's buffer, validated options.
struct TrainerArgs {
  Worker* worker = nullptr;
  float* params = nullptr;
  size_t n = 0;
  TrainerOptions options;
  // Whether the factory makes every worker's params rank 0's first (Trainer::Create: yes).
  // Tests of the decentralized trainers (gosgd, adpsgd) call their factory with false to
  // start every worker from its own point.
  bool broadcast = true;
};

// bsp, asp, ssp: the model in a table on the servers (ps_trainer.cc).
StatusOr<std::unique_ptr<Trainer>> NewPsTrainer(const TrainerArgs& args);
// easgd: local SGD, every tau steps an elastic exchange with a centre table (easgd_trainer.cc).
StatusOr<std::unique_ptr<Trainer>> NewEasgdTrainer(const TrainerArgs& args);
// arsgd: ring all-reduce of the gradients, local SGD (arsgd_trainer.cc).
StatusOr<std::unique_ptr<Trainer>> NewArsgdTrainer(const TrainerArgs& args);
// gosgd: push-sum gossip (gosgd_trainer.cc).
StatusOr<std::unique_ptr<Trainer>> NewGosgdTrainer(const TrainerArgs& args);
// adpsgd: bipartite neighbour averaging in a communication thread (adpsgd_trainer.cc).
StatusOr<std::unique_ptr<Trainer>> NewAdpsgdTrainer(const TrainerArgs& args);

// Makes every worker's params[0..n) equal to rank 0's (an all-reduce in which the others
// contribute zeros: exact). Collective.
Status BroadcastFromRankZero(Worker* worker, float* params, size_t n,
                             std::chrono::milliseconds timeout);

// A T built from args once, if args.broadcast asks, every worker's params are rank 0's.
template <typename T>
StatusOr<std::unique_ptr<Trainer>> NewAfterBroadcast(const TrainerArgs& args) {
  if (args.broadcast) {
    Status st = BroadcastFromRankZero(args.worker, args.params, args.n, args.options.timeout);
    if (!st.ok()) return st;
  }
  return std::unique_ptr<Trainer>(new T(args));
}

}  // namespace algorithms
}  // namespace ps

#endif  // PS_ALGORITHMS_TRAINERS_H_
