// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The sparse half of the hybrid (docs/hybrid.md) for C++ programs: rows of a 2-D
// parameter's gradient (an embedding's), given as int64 ids and `dim` floats per id,
// exchanged among workers with the typed collectives (AllGatherV, AllToAllV; ids travel
// as int64, rows as float32). Each function is a collective among options.ranks' set
// (empty: every worker): every member calls it, in the same order as its other
// collectives, with the same dim; errors are the collectives' (ps/communicator.h).
#ifndef PS_SPARSE_EXCHANGE_H_
#define PS_SPARSE_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "ps/collectives.h"
#include "ps/export.h"
#include "ps/status.h"

namespace ps {

class Communicator;

// Rows of a 2-D parameter: ids.size() rows of dim floats each, row i at values[i * dim].
struct LAYERPS_EXPORT SparseRows {
  std::vector<int64_t> ids;
  std::vector<float> values;
  size_t dim = 0;
  size_t size() const { return ids.size(); }
};

// The rows with ascending, unique ids: rows of equal ids summed (in the order given).
LAYERPS_EXPORT SparseRows CoalesceRows(const int64_t* ids, const float* values, size_t n, size_t dim);

// Every member's rows, coalesced (what all-reduce systems do with a sparse gradient):
// *out is the same on every member.
LAYERPS_EXPORT Status AllGatherRows(Communicator& comm, const int64_t* ids, const float* values, size_t n,
                     size_t dim, const CollectiveOptions& options, SparseRows* out);

// Each row goes to its owner, the member at position id mod members (positions in
// ascending rank order; negative ids by their absolute value); *out is the coalesced sum
// of the rows this member owns, from every member (itself included). Afterwards each id
// is held by exactly one member: what a rule that is not linear in the gradient needs
// before the rows are pushed.
LAYERPS_EXPORT Status RowsToOwners(Communicator& comm, const int64_t* ids, const float* values, size_t n,
                    size_t dim, const CollectiveOptions& options, SparseRows* out);

// Every member's rows to `root` (a worker rank of the set), which gets their coalesced
// sum in *out; the other members get no rows (host-local aggregation: the host's leader
// pushes once for the host).
LAYERPS_EXPORT Status RowsToRoot(Communicator& comm, const int64_t* ids, const float* values, size_t n,
                  size_t dim, uint32_t root, const CollectiveOptions& options, SparseRows* out);

// Fetches rows for a member: the ids wanted (ascending unique) in, the rows out
// (ids.size() * dim floats).
using RowSource = std::function<Status(const std::vector<int64_t>& ids, float* rows)>;

// Lookups through `root`: every member sends root the ids it wants (any order, repeats
// allowed); root calls `pull` once with the union (ascending, unique) and sends each
// member its rows, which land in out[i * dim] for ids[i]. Only root's `pull` is called
// (the others may pass an empty one). When root's pull fails, every member fails with
// its error (kAborted naming root on the others).
LAYERPS_EXPORT Status PullRowsThroughRoot(Communicator& comm, const int64_t* ids, size_t n, size_t dim, uint32_t root,
                           const RowSource& pull, float* out, const CollectiveOptions& options);

}  // namespace ps

#endif  // PS_SPARSE_EXCHANGE_H_
