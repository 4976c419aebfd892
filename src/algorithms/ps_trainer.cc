// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PLACEHOLDER: bsp, asp and ssp are being built; until then Create refuses them.
#include "algorithms/trainers.h"

namespace ps {
namespace algorithms {

StatusOr<std::unique_ptr<Trainer>> NewPsTrainer(const TrainerArgs& args) {
  return FailedPrecondition("Trainer: bsp, asp and ssp are not built yet");
}

}  // namespace algorithms
}  // namespace ps
