// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Micro-benchmarks of the data path's CPU work, each with memcpy of the same bytes in the
// same binary as the reference (compare bytes_per_second):
//   framing and validation of data messages; key slicing by the cluster map (dense
//   ranges, sparse hash buckets); sparse coalescing; update rules (sum, sgd, assign) on
//   dense ranges and sparse rows, and reads of both.
// Run: layerps-microbench [--benchmark_filter=REGEX] [--benchmark_repetitions=N]
#include <unistd.h>

#include <filesystem>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/cluster_map.h"
#include "common/hash.h"
#include "placement/ranges.h"
#include "server/store.h"
#include "transport/message.h"
#include "worker/packing.h"

namespace ps {
namespace {

std::vector<float> Floats(size_t n, float v = 1.0f) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = v + static_cast<float>(i % 13);
  return x;
}

std::vector<Key> RandomKeys(size_t n, uint64_t space, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Key> k(n);
  for (auto& x : k) x = (rng() % space) * 0x9E3779B97F4A7C15ull;
  return k;
}

// ---- Reference: memcpy ----------------------------------------------------------------

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}
BENCHMARK(BM_Memcpy)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(32 << 20)->UseRealTime();

// ---- Framing and validation ---------------------------------------------------------------

void BM_FrameDenseMessage(benchmark::State& state) {
  // Builds a dense push message borrowing the values (as the worker does), then parses
  // and validates it (as the server does).
  const size_t n = static_cast<size_t>(state.range(0)) / 4;
  auto values = std::make_shared<std::vector<float>>(Floats(n));
  for (auto _ : state) {
    Message m;
    m.header.type = static_cast<uint16_t>(MsgType::kPush);
    m.header.table = 1;
    m.header.request_id = 7;
    m.header.count = n;
    m.frames.push_back(Frame::Borrow(values->data(), n * 4, values));
    Header h;
    Status s = ParseHeader(&m.header, sizeof(Header), &h);
    if (s.ok()) s = ValidateDataFrames(m, uint64_t{1} << 30);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FrameDenseMessage)->Arg(4 << 10)->Arg(4 << 20);

void BM_FrameSparseMessage(benchmark::State& state) {
  const size_t keys = static_cast<size_t>(state.range(0));
  const uint32_t dim = 16;
  auto k = std::make_shared<std::vector<Key>>(RandomKeys(keys, 10000000, 1));
  auto r = std::make_shared<std::vector<float>>(Floats(keys * dim));
  for (auto _ : state) {
    Message m;
    m.header.type = static_cast<uint16_t>(MsgType::kPush);
    m.header.flags = kFlagSparse;
    m.header.count = keys;
    m.header.dim = dim;
    m.frames.push_back(Frame::Borrow(k->data(), keys * 8, k));
    m.frames.push_back(Frame::Borrow(r->data(), keys * dim * 4, r));
    Header h;
    Status s = ParseHeader(&m.header, sizeof(Header), &h);
    if (s.ok()) s = ValidateDataFrames(m, uint64_t{1} << 30);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FrameSparseMessage)->Arg(100000);

void BM_FrameCopySmall(benchmark::State& state) {
  // Frames at or below the transport's copy threshold are copied: the cost of that.
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 3);
  for (auto _ : state) {
    Frame f = Frame::Copy(src.data(), bytes);
    benchmark::DoNotOptimize(f.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}
BENCHMARK(BM_FrameCopySmall)->Arg(64)->Arg(512)->Arg(4096);

// ---- Key slicing by the cluster map ---------------------------------------------------------

TableInfo DenseInfo(uint64_t elems, int servers, uint64_t chunk = 65536) {
  TableInfo t;
  t.id = 1;
  t.spec = TableSpec::Dense("bench", elems);
  t.chunk_elems = chunk;
  std::vector<NodeId> ids;
  for (int i = 0; i < servers; ++i) ids.push_back(static_cast<NodeId>(i + 1));
  std::map<NodeId, uint64_t> load;
  t.ranges = placement::AssignRanges(t.spec, chunk, ids, &load);
  return t;
}

void BM_SliceDense(benchmark::State& state) {
  // What the worker does per dense request: one part per range of the table.
  const TableInfo t = DenseInfo(uint64_t{8} << 20, static_cast<int>(state.range(0)));
  struct Part {
    NodeId server;
    uint64_t offset, count;
  };
  for (auto _ : state) {
    std::vector<Part> parts;
    for (const KeyRange& r : t.ranges) {
      const uint64_t first = t.RangeFirstElem(r);
      parts.push_back(Part{r.server, first, t.RangeEndElem(r) - first});
    }
    benchmark::DoNotOptimize(parts.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SliceDense)->Arg(1)->Arg(4)->Arg(16);

void BM_SliceSparse(benchmark::State& state) {
  // Routing of 100k keys to servers by MixKey hash ranges (pack::BucketOf), per key, and
  // the whole bucketing pass (pack::Bucket) that moves keys and 16-float rows.
  const size_t n = 100000;
  const uint32_t dim = 16;
  const int servers = static_cast<int>(state.range(0));
  TableSpec spec = TableSpec::Sparse("bench", dim);
  std::vector<NodeId> ids;
  for (int i = 0; i < servers; ++i) ids.push_back(static_cast<NodeId>(i + 1));
  std::map<NodeId, uint64_t> load;
  const auto ranges = placement::AssignRanges(spec, 0, ids, &load);
  std::vector<uint64_t> begins;
  for (const auto& r : ranges) begins.push_back(r.begin);
  const auto keys = RandomKeys(n, 10000000, 2);
  const auto rows = Floats(n * dim);
  std::vector<Key> ok(n);
  std::vector<float> orows(n * dim);
  std::vector<size_t> offsets(begins.size() + 1);
  for (auto _ : state) {
    pack::Bucket(keys.data(), rows.data(), n, dim, begins.data(), begins.size(), ok.data(),
                 orows.data(), offsets.data());
    benchmark::DoNotOptimize(offsets.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * (8 + dim * 4));
}
BENCHMARK(BM_SliceSparse)->Arg(1)->Arg(4)->Arg(16);

// ---- Sparse coalescing --------------------------------------------------------------------

void BM_Coalesce(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const uint64_t space = static_cast<uint64_t>(state.range(1));
  const uint32_t dim = 16;
  const auto keys = RandomKeys(n, space, 3);
  const auto rows = Floats(n * dim);
  std::vector<Key> ok(n);
  std::vector<float> orows(n * dim);
  std::vector<uint32_t> inv(n);
  for (auto _ : state) {
    size_t m =
        pack::Coalesce(keys.data(), rows.data(), n, dim, ok.data(), orows.data(), inv.data());
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * (8 + dim * 4));
}
// (keys per request, key space): few duplicates, and many.
BENCHMARK(BM_Coalesce)->Args({100000, 10000000})->Args({100000, 10000});

void BM_CoalesceAndBucket(benchmark::State& state) {
  const size_t n = 100000;
  const uint32_t dim = 16;
  const int servers = static_cast<int>(state.range(0));
  std::vector<uint64_t> begins;
  for (int i = 0; i < servers; ++i) begins.push_back(~uint64_t{0} / servers * i);
  const auto keys = RandomKeys(n, 10000000, 4);
  const auto rows = Floats(n * dim);
  std::vector<Key> ok(n);
  std::vector<float> orows(n * dim);
  std::vector<uint32_t> inv(n);
  std::vector<size_t> offsets(servers + 1);
  for (auto _ : state) {
    size_t m =
        pack::CoalesceAndBucket(keys.data(), rows.data(), n, dim, begins.data(), begins.size(),
                                ok.data(), orows.data(), inv.data(), offsets.data());
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * (8 + dim * 4));
}
BENCHMARK(BM_CoalesceAndBucket)->Arg(1)->Arg(4);

// What the worker's host path packs with (pack::HashCoalesceAndBucket: no sort), checked
// once against the sorted CoalesceAndBucket. Second argument, the keys' order: 0 random
// (a few repeats), 1 distinct and ascending (the path without a hash table), 2 ascending
// with the last key repeating the first (the hash table, on sorted keys). Third argument:
// 0 a pull (keys only, the inverse kept), 1 a push (rows of 16 floats summed).
void BM_HashCoalesceAndBucket(benchmark::State& state) {
  const uint32_t dim = 16;
  const int servers = static_cast<int>(state.range(0));
  std::vector<uint64_t> begins;
  for (int i = 0; i < servers; ++i) begins.push_back(~uint64_t{0} / servers * i);
  auto keys = RandomKeys(100000, 10000000, 4);
  if (state.range(1) != 0) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    if (state.range(1) == 2) keys.back() = keys.front();
  }
  const size_t n = keys.size();
  const auto rows = Floats(n * dim);
  std::vector<Key> ok(n);
  std::vector<float> orows(n * dim);
  std::vector<uint32_t> inv(n);
  std::vector<size_t> offsets(servers + 1);
  // Same result as the library (as multisets per bucket), checked once.
  {
    std::vector<Key> rk(n);
    std::vector<float> rr(n * dim);
    std::vector<uint32_t> ri(n);
    std::vector<size_t> ro(servers + 1);
    const size_t m1 =
        pack::CoalesceAndBucket(keys.data(), rows.data(), n, dim, begins.data(), begins.size(),
                                rk.data(), rr.data(), ri.data(), ro.data());
    const size_t m2 =
        pack::HashCoalesceAndBucket(keys.data(), rows.data(), n, dim, begins.data(),
                                    begins.size(), ok.data(), orows.data(), inv.data(),
                                    offsets.data());
    bool same = m1 == m2 && ro == offsets;
    for (size_t i = 0; same && i < n; ++i) {
      same = rk[ri[i]] == ok[inv[i]] && rr[size_t{ri[i]} * dim] == orows[size_t{inv[i]} * dim];
    }
    if (!same) state.SkipWithError("HashCoalesceAndBucket disagrees with CoalesceAndBucket");
  }
  const bool push = state.range(2) != 0;
  for (auto _ : state) {
    size_t m = pack::HashCoalesceAndBucket(
        keys.data(), push ? rows.data() : nullptr, n, push ? dim : 0, begins.data(),
        begins.size(), ok.data(), push ? orows.data() : nullptr, push ? nullptr : inv.data(),
        offsets.data());
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * (push ? 8 + dim * 4 : 8));
}
BENCHMARK(BM_HashCoalesceAndBucket)->ArgsProduct({{1, 4}, {0, 1, 2}, {0, 1}});

// ---- Update rules on dense ranges -----------------------------------------------------------
// bytes_per_second counts the gradient bytes (count * 4), the same bytes BM_Memcpy copies.

constexpr NodeId kSelf = 1;

void DenseRule(benchmark::State& state, UpdateRule rule, ApplyOp op) {
  const size_t n = static_cast<size_t>(state.range(0)) / 4;
  Store store(kSelf);
  TableInfo t = DenseInfo(n, 1);
  t.spec.rule = rule;
  for (auto& r : t.ranges) r.server = kSelf;
  if (!store.Install(t).ok()) state.SkipWithError("install");
  const auto g = Floats(n, 0.001f);
  for (auto _ : state) {
    Status s = store.ApplyDense(t.id, 0, n, g.data(), op);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * 4);
}
void BM_DenseSum(benchmark::State& s) { DenseRule(s, UpdateRule::kSum, ApplyOp::kRule); }
void BM_DenseSgd(benchmark::State& s) { DenseRule(s, UpdateRule::kSgd, ApplyOp::kRule); }
void BM_DenseAssign(benchmark::State& s) { DenseRule(s, UpdateRule::kSum, ApplyOp::kAssign); }
BENCHMARK(BM_DenseSum)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(32 << 20)->UseRealTime();
BENCHMARK(BM_DenseSgd)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(32 << 20)->UseRealTime();
BENCHMARK(BM_DenseAssign)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(32 << 20)->UseRealTime();

void BM_DenseRead(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) / 4;
  Store store(kSelf);
  TableInfo t = DenseInfo(n, 1);
  for (auto& r : t.ranges) r.server = kSelf;
  if (!store.Install(t).ok()) state.SkipWithError("install");
  std::vector<float> out(n);
  for (auto _ : state) {
    Status s = store.ReadDense(t.id, 0, n, out.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * 4);
}
BENCHMARK(BM_DenseRead)->Arg(4 << 10)->Arg(4 << 20)->Arg(32 << 20)->UseRealTime();

// ---- Update rules on sparse rows ------------------------------------------------------------
// 100k keys x 16 floats per call, over rows that already exist (steady state). bytes
// count the rows (keys * dim * 4); compare with BM_Memcpy at 4M/32M (6.4 MB here).

void SparseRule(benchmark::State& state, UpdateRule rule, ApplyOp op, bool read) {
  const size_t n = 100000;
  const uint32_t dim = 16;
  const uint64_t space = static_cast<uint64_t>(state.range(0));
  Store store(kSelf);
  TableInfo t;
  t.id = 2;
  t.spec = TableSpec::Sparse("bench-sparse", dim, rule);
  t.ranges.push_back(KeyRange{0, 0, kSelf});
  if (!store.Install(t).ok()) state.SkipWithError("install");
  // Unique keys, as a coalesced request has.
  auto keys = RandomKeys(n, space, 5);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const size_t m = keys.size();
  const auto rows = Floats(m * dim, 0.01f);
  std::vector<float> out(m * dim);
  store.ApplySparse(t.id, keys.data(), m, dim, rows.data(), ApplyOp::kAssign);  // create rows
  for (auto _ : state) {
    Status s = read ? store.ReadSparse(t.id, keys.data(), m, dim, out.data())
                    : store.ApplySparse(t.id, keys.data(), m, dim, rows.data(), op);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * m);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * m * dim * 4);
}
void BM_SparseSum(benchmark::State& s) { SparseRule(s, UpdateRule::kSum, ApplyOp::kRule, false); }
void BM_SparseSgd(benchmark::State& s) { SparseRule(s, UpdateRule::kSgd, ApplyOp::kRule, false); }
void BM_SparseAssign(benchmark::State& s) {
  SparseRule(s, UpdateRule::kSum, ApplyOp::kAssign, false);
}
void BM_SparseRead(benchmark::State& s) { SparseRule(s, UpdateRule::kSum, ApplyOp::kRule, true); }

// What a server does for a pull of layerps-bench's sparse case: 100k unique keys x 16 in
// random order (a worker sends them in first-occurrence order) from a table that holds
// four such batches (400k rows).
void BM_SparseReadShuffled(benchmark::State& state) {
  const uint32_t dim = 16;
  Store store(kSelf);
  TableInfo t;
  t.id = 2;
  t.spec = TableSpec::Sparse("bench-sparse", dim, UpdateRule::kSum);
  t.ranges.push_back(KeyRange{0, 0, kSelf});
  if (!store.Install(t).ok()) state.SkipWithError("install");
  std::vector<Key> keys;
  for (uint64_t b = 0; b < 4; ++b) {
    auto batch = RandomKeys(100000, 10000000, 11 + b);
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    const auto rows = Floats(batch.size() * dim, 0.01f);
    store.ApplySparse(t.id, batch.data(), batch.size(), dim, rows.data(), ApplyOp::kAssign);
    if (b == 0) keys = batch;
  }
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(7));
  const size_t m = keys.size();
  std::vector<float> out(m * dim);
  for (auto _ : state) {
    Status s = store.ReadSparse(t.id, keys.data(), m, dim, out.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * m);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * m * dim * 4);
}
BENCHMARK(BM_SparseReadShuffled)->UseRealTime();
BENCHMARK(BM_SparseSum)->Arg(10000000)->UseRealTime();
BENCHMARK(BM_SparseSgd)->Arg(10000000)->UseRealTime();
BENCHMARK(BM_SparseAssign)->Arg(10000000)->UseRealTime();
BENCHMARK(BM_SparseRead)->Arg(10000000)->UseRealTime();

// Bounded tables (docs/sparse.md): a push of 100k keys x 16 into a table of capacity 1M
// rows (16 stripes), cycling through 16 batches of keys. range(0): key space (500K: every
// row stays held, no eviction; 10M: ~1.6M distinct keys cycled, so a key's row was evicted
// since its last push and every key evicts one); range(1): 0 unbounded (the same stream
// without a capacity, for comparison), 1 lru, 2 lfu.
void BM_SparseBoundedSum(benchmark::State& state) {
  const size_t n = 100000;
  const uint32_t dim = 16;
  Store store(kSelf);
  TableInfo t;
  t.id = 4;
  t.spec = TableSpec::Sparse("bench-bounded", dim, UpdateRule::kSum);
  t.spec.eviction = static_cast<Eviction>(state.range(1));
  t.spec.capacity = state.range(1) == 0 ? 0 : 1000000;  // 0: the same stream, unbounded
  t.ranges.push_back(KeyRange{0, 0, kSelf});
  if (!store.Install(t).ok()) state.SkipWithError("install");
  const auto rows = Floats(n * dim, 0.01f);
  std::vector<std::vector<Key>> batches;
  for (uint64_t seed = 0; seed < 16; ++seed) {  // 10M space: ~1.6M distinct keys cycled
    auto keys = RandomKeys(n, static_cast<uint64_t>(state.range(0)), 50 + seed);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    batches.push_back(std::move(keys));
  }
  // Warm: fill the table (up to its capacity) before timing.
  for (int r = 0; r < 32; ++r) {
    const auto& k = batches[r % batches.size()];
    store.ApplySparse(t.id, k.data(), k.size(), dim, rows.data(), ApplyOp::kRule);
  }
  size_t i = 0, keys = 0;
  for (auto _ : state) {
    const auto& k = batches[i++ % batches.size()];
    Status s = store.ApplySparse(t.id, k.data(), k.size(), dim, rows.data(), ApplyOp::kRule);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    keys += k.size();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(keys));
  state.counters["rows"] = static_cast<double>(store.sparse_rows());
}
BENCHMARK(BM_SparseBoundedSum)
    ->Args({500000, 0})
    ->Args({500000, 1})
    ->Args({500000, 2})
    ->Args({10000000, 0})
    ->Args({10000000, 1})
    ->Args({10000000, 2})
    ->UseRealTime();

// The cold tier (docs/sparse.md "Cold tier"): a table of 500K rows (dim 16, sum) with a
// memory capacity of 100K rows (16 stripes), so 5x the capacity; each iteration pushes
// then pulls one batch of 10K distinct keys. range(0): 0 memory-only bounded table, 1 the
// same with cold_tier (a RocksDB store under /tmp). range(1): 0 hot pattern (keys from the
// last 100K rows written, which fit in memory), 1 uniform over all 500K rows (most keys
// are on disk: a reload and a spill each with the cold tier, a fresh row without).
void BM_SparseColdTier(benchmark::State& state) {
  const size_t rows_total = 500000, capacity = 100000, batch = 10000;
  const uint32_t dim = 16;
  const bool cold = state.range(0) == 1;
  const std::string dir = "/tmp/layerps_bench_cold_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto store = std::make_unique<Store>(kSelf, dir);
  TableInfo t;
  t.id = 5;
  t.spec = TableSpec::Sparse("bench-cold", dim, UpdateRule::kSum);
  t.spec.capacity = capacity;
  t.spec.eviction = Eviction::kLru;
  t.spec.cold_tier = cold;
  t.ranges.push_back(KeyRange{0, 0, kSelf});
  Status st = store->Install(t);
  if (!st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  const auto rows = Floats(batch * dim, 0.01f);
  std::vector<Key> keys(batch);
  for (size_t first = 0; first < rows_total; first += batch) {  // write every row once
    for (size_t i = 0; i < batch; ++i) keys[i] = first + i;
    store->ApplySparse(t.id, keys.data(), batch, dim, rows.data(), ApplyOp::kRule);
  }
  std::vector<std::vector<Key>> batches;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const uint64_t span = state.range(1) == 0 ? capacity : rows_total;
    std::mt19937_64 rng(70 + seed);
    std::vector<Key> k(batch);
    for (Key& x : k) x = rng() % span + (rows_total - span);  // the ids written above
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    batches.push_back(std::move(k));
  }
  std::vector<float> out(batch * dim);
  size_t i = 0, n = 0;
  for (auto _ : state) {
    const auto& k = batches[i++ % batches.size()];
    Status s = store->ApplySparse(t.id, k.data(), k.size(), dim, rows.data(), ApplyOp::kRule);
    if (s.ok()) s = store->ReadSparse(t.id, k.data(), k.size(), dim, out.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    n += 2 * k.size();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));  // keys pushed + keys pulled
  const Store::SparseCounters c = store->SparseStats().at(t.id);
  state.counters["spilled"] = static_cast<double>(c.spilled);
  state.counters["reloaded"] = static_cast<double>(c.reloaded);
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SparseColdTier)->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1})->UseRealTime();

void BM_SparseFirstTouch(benchmark::State& state) {
  // Pushes of keys never seen before: row creation dominates.
  const size_t n = 100000;
  const uint32_t dim = 16;
  const auto rows = Floats(n * dim, 0.01f);
  uint64_t seed = 100;
  for (auto _ : state) {
    state.PauseTiming();
    auto store = std::make_unique<Store>(kSelf);
    TableInfo t;
    t.id = 3;
    t.spec = TableSpec::Sparse("bench-touch", dim);
    t.ranges.push_back(KeyRange{0, 0, kSelf});
    store->Install(t);
    auto keys = RandomKeys(n, uint64_t{1} << 40, seed++);
    state.ResumeTiming();
    Status s = store->ApplySparse(t.id, keys.data(), n, dim, rows.data(), ApplyOp::kRule);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    state.PauseTiming();
    store.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}
BENCHMARK(BM_SparseFirstTouch)->UseRealTime()->Iterations(20);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
