// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Optimizer: the update rule a server applies to pushed gradients, one class per rule
// (server/optimizers/*.cc). A rule may keep state per value element (momentum, Adam's
// moments...): the store allocates state_width() floats of it beside every dense element
// and every sparse row, zero-initialized, and hands it to the rule with every update.
//
// State layout: plane k of the state of element i is state[k * stride + i]. A dense range
// of n elements has stride n (planes side by side after the values' own array); a sparse
// row of dim values is laid out [values | plane 0 | plane 1 | ...] with stride dim, so one
// interface serves both.
//
// A sparse row's state is row_state_floats(dim) floats after its values: state_width() *
// dim (the planes above) unless the rule keeps state per row instead (rowwise_adagrad: one
// float). The store sizes rows by it, and a row's state goes wherever the row goes
// (checkpoints, replica copies, the cold tier) because they all move whole rows.
//
// To add a rule: a file in server/optimizers/ with a class deriving from Optimizer, a
// value in ps::UpdateRule (include/ps/types.h), and a case in MakeOptimizer.
//
// Thread-safety: const members are called concurrently on disjoint elements.
#ifndef PS_SERVER_OPTIMIZER_H_
#define PS_SERVER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Floats of state per value element (0: stateless).
  virtual uint32_t state_width() const = 0;
  // Floats of state after the dim values of a sparse row.
  virtual uint32_t row_state_floats(uint32_t dim) const { return state_width() * dim; }

  // x[i] updated by gradient g[i] for i < n, in place; state as described above.
  virtual void Apply(float* x, float* state, size_t stride, const float* g, size_t n) const = 0;

  // The same update written out of place: out[i] = update(x[i], g[i]) (x is left as it
  // is; state, if any, is updated in place). Used when x is lent to a reply in flight.
  virtual void ApplyTo(float* out, const float* x, float* state, size_t stride, const float* g,
                       size_t n) const = 0;

  // Sparse: rows[j] (dim values, followed by its row_state_floats(dim) floats of state:
  // the planes with stride dim) updated by grads[j], for j < count, in order (a row may
  // come more than once). One call per batch of rows, so a rule's row loop is a plain
  // inlined loop rather than a call per row.
  virtual void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                         uint32_t dim) const = 0;
};

// The rule a table declares. kInvalidArgument for a rule this server does not know, or a
// sparse-only rule (rowwise_adagrad) on a dense table.
StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TableSpec& spec);

// One factory per rule (server/optimizers/).
std::unique_ptr<Optimizer> NewSumOptimizer();
std::unique_ptr<Optimizer> NewSgdOptimizer(float learning_rate);
std::unique_ptr<Optimizer> NewMomentumOptimizer(const TableSpec& spec);  // kMomentum, kNesterov
std::unique_ptr<Optimizer> NewAdagradOptimizer(const TableSpec& spec);
std::unique_ptr<Optimizer> NewAdamOptimizer(const TableSpec& spec);
std::unique_ptr<Optimizer> NewFtrlOptimizer(const TableSpec& spec);
std::unique_ptr<Optimizer> NewElasticOptimizer(const TableSpec& spec);
std::unique_ptr<Optimizer> NewRowwiseAdagradOptimizer(const TableSpec& spec);  // sparse only

// A rule whose update of one element depends only on that element (and its state): its
// out-of-place and row-wise forms follow from one element-wise update `Step`, called as
// Step(x_in, &x_out, state planes at the element, stride, g). Rules derive from
// ElementwiseOptimizer<Derived> and define
//   void Step(float x, float* out, float* state, size_t stride, float g) const;
template <typename Derived>
class ElementwiseOptimizer : public Optimizer {
 public:
  void Apply(float* x, float* state, size_t stride, const float* g, size_t n) const override {
    const Derived& d = static_cast<const Derived&>(*this);
    for (size_t i = 0; i < n; ++i) d.Step(x[i], &x[i], state + i, stride, g[i]);
  }
  void ApplyTo(float* out, const float* x, float* state, size_t stride, const float* g,
               size_t n) const override {
    const Derived& d = static_cast<const Derived&>(*this);
    for (size_t i = 0; i < n; ++i) d.Step(x[i], &out[i], state + i, stride, g[i]);
  }
  // A row's state planes follow its dim values (stride dim).
  void ApplyRows(float* const* rows, const float* const* grads, size_t count,
                 uint32_t dim) const override {
    for (size_t j = 0; j < count; ++j) Apply(rows[j], rows[j] + dim, dim, grads[j], dim);
  }
};

}  // namespace ps

#endif  // PS_SERVER_OPTIMIZER_H_
