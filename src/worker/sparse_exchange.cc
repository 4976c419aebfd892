// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The hybrid's row exchanges (ps/sparse_exchange.h) on the typed collectives: ids as
// int64 and rows as float32, each exchange one AllGatherV or AllToAllV per kind, both
// started together.
#include "ps/sparse_exchange.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "ps/communicator.h"

namespace ps {
namespace {

// The set's ranks, ascending (empty options.ranks: every worker); the collectives
// themselves check them, so a bad list fails there with its reason.
std::vector<uint32_t> Members(const Communicator& w, const CollectiveOptions& options) {
  std::vector<uint32_t> ranks = options.ranks;
  if (ranks.empty()) {
    for (int r = 0; r < w.size(); ++r) ranks.push_back(static_cast<uint32_t>(r));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

Status CheckRows(const int64_t* ids, const float* values, size_t n, size_t dim,
                 const char* what) {
  if (n > 0 && ids == nullptr) return InvalidArgument(std::string(what) + ": null ids");
  if (n > 0 && dim > 0 && values == nullptr) {
    return InvalidArgument(std::string(what) + ": null values");
  }
  if (dim > 0 && n > SIZE_MAX / sizeof(float) / dim) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(n) + " rows of " +
                           std::to_string(dim) + " overflow");
  }
  return Status::OK();
}

// Names each collective after the exchange (the user's name, when given, first).
CollectiveOptions Named(const CollectiveOptions& options, const char* what, const char* part) {
  CollectiveOptions o = options;
  o.name = (options.name.empty() ? std::string(what) : options.name + "/" + what) + "/" + part;
  return o;
}

// Sends rows by destination (dest[i]: the member position of row i) with one AllToAllV
// for the ids and one for the values; *got_ids and *got_values receive what every member
// sent this one.
Status ExchangeRows(Communicator& w, const int64_t* ids, const float* values, size_t n, size_t dim,
                    const std::vector<size_t>& dest, size_t members, const CollectiveOptions& options,
                    const char* what, GatherResult* got_ids, GatherResult* got_values) {
  std::vector<size_t> counts(members, 0);
  for (size_t i = 0; i < n; ++i) ++counts[dest[i]];
  std::vector<size_t> start(members, 0);
  for (size_t q = 1; q < members; ++q) start[q] = start[q - 1] + counts[q - 1];
  std::vector<int64_t> send_ids(n);
  std::vector<float> send_values(n * dim);
  for (size_t i = 0; i < n; ++i) {
    const size_t at = start[dest[i]]++;
    send_ids[at] = ids[i];
    if (dim > 0) std::memcpy(&send_values[at * dim], values + i * dim, dim * sizeof(float));
  }
  std::vector<size_t> value_counts(members);
  for (size_t q = 0; q < members; ++q) value_counts[q] = counts[q] * dim;
  const Ticket a = w.AllToAllVAsync(send_ids.data(), counts, DataType::kInt64, got_ids,
                                    Named(options, what, "ids"));
  const Ticket b = w.AllToAllVAsync(send_values.data(), value_counts, DataType::kFloat32,
                                    got_values, Named(options, what, "rows"));
  // The collectives' own timeouts bound both waits.
  const auto forever = std::chrono::hours(24 * 365);
  Status sa = w.Wait(a, forever);
  Status sb = w.Wait(b, forever);
  return sa.ok() ? sb : sa;
}

const int64_t* IdsOf(const GatherResult& r) {
  return reinterpret_cast<const int64_t*>(r.data.data());
}
const float* ValuesOf(const GatherResult& r) {
  return reinterpret_cast<const float*>(r.data.data());
}

size_t TotalCount(const GatherResult& r) {
  return std::accumulate(r.counts.begin(), r.counts.end(), size_t{0});
}

}  // namespace

SparseRows CoalesceRows(const int64_t* ids, const float* values, size_t n, size_t dim) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [ids](size_t a, size_t b) { return ids[a] < ids[b]; });
  SparseRows out;
  out.dim = dim;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    if (out.ids.empty() || out.ids.back() != ids[i]) {
      out.ids.push_back(ids[i]);
      out.values.insert(out.values.end(), values + i * dim, values + (i + 1) * dim);
      continue;
    }
    float* row = out.values.data() + (out.ids.size() - 1) * dim;
    for (size_t j = 0; j < dim; ++j) row[j] += values[i * dim + j];
  }
  return out;
}

Status AllGatherRows(Communicator& w, const int64_t* ids, const float* values, size_t n, size_t dim,
                     const CollectiveOptions& options, SparseRows* out) {
  PS_RETURN_IF_ERROR(CheckRows(ids, values, n, dim, "AllGatherRows"));
  GatherResult got_ids, got_values;
  const Ticket a = w.AllGatherVAsync(ids, n, DataType::kInt64, &got_ids,
                                     Named(options, "AllGatherRows", "ids"));
  const Ticket b = w.AllGatherVAsync(values, n * dim, DataType::kFloat32, &got_values,
                                     Named(options, "AllGatherRows", "rows"));
  const auto forever = std::chrono::hours(24 * 365);  // the collectives' timeouts bound it
  Status sa = w.Wait(a, forever);
  Status sb = w.Wait(b, forever);
  PS_RETURN_IF_ERROR(sa);
  PS_RETURN_IF_ERROR(sb);
  const size_t total = TotalCount(got_ids);
  if (TotalCount(got_values) != total * dim) {
    return InvalidArgument("AllGatherRows: the members' rows are not all " + std::to_string(dim) +
                           " wide (" + std::to_string(TotalCount(got_values)) + " values for " +
                           std::to_string(total) + " ids)");
  }
  *out = CoalesceRows(IdsOf(got_ids), ValuesOf(got_values), total, dim);
  return Status::OK();
}

Status RowsToOwners(Communicator& w, const int64_t* ids, const float* values, size_t n, size_t dim,
                    const CollectiveOptions& options, SparseRows* out) {
  PS_RETURN_IF_ERROR(CheckRows(ids, values, n, dim, "RowsToOwners"));
  const size_t members = Members(w, options).size();
  std::vector<size_t> dest(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = ids[i] < 0 ? 0 - static_cast<uint64_t>(ids[i]) : static_cast<uint64_t>(ids[i]);
    dest[i] = static_cast<size_t>(id % members);
  }
  GatherResult got_ids, got_values;
  PS_RETURN_IF_ERROR(ExchangeRows(w, ids, values, n, dim, dest, members, options, "RowsToOwners",
                                  &got_ids, &got_values));
  const size_t total = TotalCount(got_ids);
  if (TotalCount(got_values) != total * dim) {
    return InvalidArgument("RowsToOwners: the members' rows are not all " + std::to_string(dim) + " wide");
  }
  *out = CoalesceRows(IdsOf(got_ids), ValuesOf(got_values), total, dim);
  return Status::OK();
}

Status RowsToRoot(Communicator& w, const int64_t* ids, const float* values, size_t n, size_t dim,
                  uint32_t root, const CollectiveOptions& options, SparseRows* out) {
  PS_RETURN_IF_ERROR(CheckRows(ids, values, n, dim, "RowsToRoot"));
  const std::vector<uint32_t> members = Members(w, options);
  const auto at = std::find(members.begin(), members.end(), root);
  if (at == members.end()) {
    return InvalidArgument("RowsToRoot: root " + std::to_string(root) + " is not a member of the set");
  }
  const std::vector<size_t> dest(n, static_cast<size_t>(at - members.begin()));
  GatherResult got_ids, got_values;
  PS_RETURN_IF_ERROR(ExchangeRows(w, ids, values, n, dim, dest, members.size(), options,
                                  "RowsToRoot", &got_ids, &got_values));
  const size_t total = TotalCount(got_ids);
  if (TotalCount(got_values) != total * dim) {
    return InvalidArgument("RowsToRoot: the members' rows are not all " + std::to_string(dim) + " wide");
  }
  *out = CoalesceRows(IdsOf(got_ids), ValuesOf(got_values), total, dim);
  return Status::OK();
}

Status PullRowsThroughRoot(Communicator& w, const int64_t* ids, size_t n, size_t dim, uint32_t root,
                           const RowSource& pull, float* out, const CollectiveOptions& options) {
  PS_RETURN_IF_ERROR(CheckRows(ids, out, n, dim, "PullRowsThroughRoot"));
  const std::vector<uint32_t> members = Members(w, options);
  const auto at = std::find(members.begin(), members.end(), root);
  if (at == members.end()) {
    return InvalidArgument("PullRowsThroughRoot: root " + std::to_string(root) +
                           " is not a member of the set");
  }
  const size_t root_pos = static_cast<size_t>(at - members.begin());
  const bool is_root = w.rank() == root;
  if (is_root && !pull) return InvalidArgument("PullRowsThroughRoot: root has no row source");
  // 1. Every member's ids to root (root's own stay here).
  std::vector<size_t> counts(members.size(), 0);
  if (!is_root) counts[root_pos] = n;
  GatherResult asked;
  PS_RETURN_IF_ERROR(w.AllToAllV(ids, counts, DataType::kInt64, &asked,
                                 Named(options, "PullRowsThroughRoot", "ids")));
  // 2. Root pulls the union once and answers each member with its rows, in its order. A
  // failed pull still answers (no rows), with a one-value status block first, so that
  // nobody waits for rows that never come: every member fails with root's error.
  std::vector<float> reply;
  std::vector<size_t> reply_counts(members.size(), 0);
  Status pulled = Status::OK();
  if (is_root) {
    std::vector<int64_t> all(IdsOf(asked), IdsOf(asked) + TotalCount(asked));
    all.insert(all.end(), ids, ids + n);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    std::vector<float> rows(all.size() * dim);
    if (!all.empty()) pulled = pull(all, rows.data());
    auto row_of = [&](int64_t id) {
      return rows.data() + (std::lower_bound(all.begin(), all.end(), id) - all.begin()) * dim;
    };
    const int64_t* wanted = IdsOf(asked);
    for (size_t q = 0; q < members.size(); ++q) {
      const size_t k = asked.counts[q];
      if (q != root_pos) {
        reply.push_back(pulled.ok() ? 0.0f : 1.0f);
        reply_counts[q] = 1;
        if (pulled.ok()) {
          for (size_t i = 0; i < k; ++i) reply.insert(reply.end(), row_of(wanted[i]), row_of(wanted[i]) + dim);
          reply_counts[q] += k * dim;
        }
      }
      wanted += k;
    }
    if (pulled.ok()) {
      for (size_t i = 0; i < n; ++i) std::memcpy(out + i * dim, row_of(ids[i]), dim * sizeof(float));
    }
  }
  GatherResult rows;
  PS_RETURN_IF_ERROR(w.AllToAllV(reply.data(), reply_counts, DataType::kFloat32, &rows,
                                 Named(options, "PullRowsThroughRoot", "rows")));
  if (is_root) return pulled;
  const float* got = ValuesOf(rows);
  const size_t count = TotalCount(rows);
  if (count == 0) return ProtocolError("PullRowsThroughRoot: no answer from root");
  if (got[0] != 0.0f) {
    return Aborted("PullRowsThroughRoot: root " + std::to_string(root) + " could not pull the rows");
  }
  if (count != 1 + n * dim) {
    return ProtocolError("PullRowsThroughRoot: root sent " + std::to_string(count - 1) +
                         " values for " + std::to_string(n) + " rows of " + std::to_string(dim));
  }
  if (n * dim > 0) std::memcpy(out, got + 1, n * dim * sizeof(float));
  return Status::OK();
}

}  // namespace ps
