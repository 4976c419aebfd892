// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "placement/ranges.h"

#include <algorithm>

namespace ps {
namespace placement {

std::vector<KeyRange> AssignRanges(const TableSpec& spec, uint64_t chunk_elems,
                                   const std::vector<NodeId>& servers,
                                   std::map<NodeId, uint64_t>* load) {
  std::vector<KeyRange> ranges;
  const uint64_t s = servers.size();
  if (s == 0) return ranges;
  if (spec.kind == TableKind::kSparse) {
    // Even split of the hash space; begin of range i = floor(i * 2^64 / s).
    for (uint64_t i = 0; i < s; ++i) {
      const uint64_t begin =
          i == 0 ? 0 : static_cast<uint64_t>((static_cast<__uint128_t>(i) << 64) / s);
      const uint64_t end =
          i + 1 == s ? 0 : static_cast<uint64_t>((static_cast<__uint128_t>(i + 1) << 64) / s);
      ranges.push_back(KeyRange{begin, end, servers[i]});
    }
    return ranges;
  }
  const uint64_t chunks = (spec.size + chunk_elems - 1) / chunk_elems;
  const uint64_t parts = std::min<uint64_t>(chunks, s);
  // Servers by current load, least first: they receive the (possibly) larger shares.
  std::vector<NodeId> order(servers);
  std::stable_sort(order.begin(), order.end(),
                   [load](NodeId a, NodeId b) { return (*load)[a] < (*load)[b]; });
  uint64_t begin = 0;
  for (uint64_t i = 0; i < parts; ++i) {
    const uint64_t n = chunks / parts + (i < chunks % parts ? 1 : 0);
    KeyRange r{begin, begin + n, order[i]};
    const uint64_t first = r.begin * chunk_elems;
    const uint64_t last = std::min(r.end * chunk_elems, spec.size);
    (*load)[r.server] += (last - first) * spec.ElementBytes();
    ranges.push_back(r);
    begin += n;
  }
  return ranges;
}

}  // namespace placement
}  // namespace ps
