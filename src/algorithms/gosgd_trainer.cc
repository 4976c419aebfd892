// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PLACEHOLDER: gosgd are being built; until then Create refuses them.
#include "algorithms/trainers.h"

namespace ps {
namespace algorithms {

StatusOr<std::unique_ptr<Trainer>> NewGosgdTrainer(const TrainerArgs& args) {
  return FailedPrecondition("Trainer: gosgd are not built yet");
}

}  // namespace algorithms
}  // namespace ps
