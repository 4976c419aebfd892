// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/optimizer.h"

#include <string>

namespace ps {

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TableSpec& spec) {
  switch (spec.rule) {
    case UpdateRule::kSum:
      return NewSumOptimizer();
    case UpdateRule::kSgd:
      return NewSgdOptimizer(spec.learning_rate);
    case UpdateRule::kMomentum:
    case UpdateRule::kNesterov:
      return NewMomentumOptimizer(spec);
    case UpdateRule::kAdagrad:
      return NewAdagradOptimizer(spec);
    case UpdateRule::kAdam:
      return NewAdamOptimizer(spec);
    case UpdateRule::kFtrl:
      return NewFtrlOptimizer(spec);
    case UpdateRule::kElastic:
      return NewElasticOptimizer(spec);
    case UpdateRule::kRowwiseAdagrad:
      if (spec.kind != TableKind::kSparse) {
        return InvalidArgument("table '" + spec.name +
                               "': rule rowwise_adagrad is for sparse tables (a dense table "
                               "has no rows)");
      }
      return NewRowwiseAdagradOptimizer(spec);
  }
  return InvalidArgument("table '" + spec.name + "': unknown update rule " +
                         std::to_string(static_cast<int>(spec.rule)));
}

}  // namespace ps
