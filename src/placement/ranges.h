// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Key ranges: how one table is cut over a set of servers. The scheduler's table directory
// calls this for every declared table, over all servers or over the servers a plan pins
// the table's layer to.
#ifndef PS_PLACEMENT_RANGES_H_
#define PS_PLACEMENT_RANGES_H_

#include <cstdint>
#include <map>
#include <vector>

#include "ps/types.h"

namespace ps {
namespace placement {

// Splits a table over servers. `load` holds the bytes each server already stores and
// is updated. Dense: chunks spread so that bytes balance (ranges contiguous, bigger
// shares to less-loaded servers). Sparse: the hash space split evenly over all servers.
std::vector<KeyRange> AssignRanges(const TableSpec& spec, uint64_t chunk_elems,
                                   const std::vector<NodeId>& servers,
                                   std::map<NodeId, uint64_t>* load);

}  // namespace placement
}  // namespace ps

#endif  // PS_PLACEMENT_RANGES_H_
