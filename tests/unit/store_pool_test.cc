// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The sparse index fast path and the pooled reply buffers of the store.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <unordered_map>

#include "common/hash.h"
#include "server/store.h"

namespace ps {
namespace {

TableInfo Sparse(TableId id, uint32_t dim, UpdateRule rule,
                 Initializer init = Initializer::kZeros) {
  TableInfo t;
  t.id = id;
  t.spec = TableSpec::Sparse("fast" + std::to_string(id), dim, rule);
  t.spec.learning_rate = 0.5f;
  t.spec.init = init;
  t.spec.init_a = -1.0f;
  t.spec.init_b = 1.0f;
  t.ranges = {KeyRange{0, 0, 1}};
  return t;
}

TEST(StoreFastPathTest, DuplicateKeysInOneCallApplyInOrder) {
  Store store(1);
  ASSERT_TRUE(store.Install(Sparse(0, 2, UpdateRule::kSum)).ok());
  const Key keys[5] = {7, 9, 7, 7, 9};
  const float g[10] = {1, 2, 10, 20, 100, 200, 1000, 2000, 3, 4};
  ASSERT_TRUE(store.ApplySparse(0, keys, 5, 2, g, ApplyOp::kRule).ok());
  float out[4];
  const Key q[2] = {7, 9};
  ASSERT_TRUE(store.ReadSparse(0, q, 2, 2, out).ok());
  EXPECT_EQ(out[0], 1101);
  EXPECT_EQ(out[1], 2202);
  EXPECT_EQ(out[2], 13);
  EXPECT_EQ(out[3], 24);
  // Assign: the last row of a duplicated key wins.
  ASSERT_TRUE(store.ApplySparse(0, keys, 5, 2, g, ApplyOp::kAssign).ok());
  ASSERT_TRUE(store.ReadSparse(0, q, 2, 2, out).ok());
  EXPECT_EQ(out[0], 1000);
  EXPECT_EQ(out[3], 4);
  EXPECT_EQ(store.sparse_rows(), 2u);
}

TEST(StoreFastPathTest, GrowthKeepsRowsAndInitializers) {
  // Many rows (index rehashes, many row blocks), wide rows (one-row blocks), seeded init.
  for (uint32_t dim : {1u, 16u, 5000u}) {
    Store store(1);
    const TableInfo t = Sparse(1, dim, UpdateRule::kSgd, Initializer::kUniform);
    ASSERT_TRUE(store.Install(t).ok());
    const size_t n = dim > 100 ? 300 : 200000;
    std::mt19937_64 rng(dim);
    std::vector<Key> keys(n);
    for (auto& k : keys) k = rng() % (n * 4);  // with duplicates
    std::vector<float> g(n * dim, 1.0f);
    ASSERT_TRUE(store.ApplySparse(1, keys.data(), n, dim, g.data(), ApplyOp::kRule).ok());
    std::unordered_map<Key, int> count;
    for (Key k : keys) ++count[k];
    EXPECT_EQ(store.sparse_rows(), count.size());
    std::vector<float> out(n * dim);
    ASSERT_TRUE(store.ReadSparse(1, keys.data(), n, dim, out.data()).ok());
    const uint64_t h = HashName(t.spec.name);
    for (size_t i = 0; i < n; i += 7) {
      for (uint32_t j = 0; j < dim; j += (dim > 16 ? 997 : 1)) {
        const float want = InitialValue(t.spec, h, keys[i], j) - 0.5f * count[keys[i]];
        ASSERT_FLOAT_EQ(out[i * dim + j], want) << "dim " << dim << " key " << keys[i];
      }
    }
  }
}

TEST(StoreFastPathTest, ReadFramesComeFromThePool) {
  Store store(1);
  TableInfo d;
  d.id = 2;
  d.spec = TableSpec::Dense("dense", 1 << 20);
  d.chunk_elems = 65536;
  d.ranges = {KeyRange{0, 16, 1}};
  ASSERT_TRUE(store.Install(d).ok());
  std::vector<float> g(1 << 20);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 101);
  ASSERT_TRUE(store.ApplyDense(2, 0, g.size(), g.data(), ApplyOp::kAssign).ok());
  const uint8_t* first = nullptr;
  for (int round = 0; round < 3; ++round) {
    Frame f;
    ASSERT_TRUE(store.ReadDenseFrame(2, 1000, 500000, &f).ok());
    ASSERT_EQ(f.size(), 500000u * 4);
    ASSERT_EQ(std::memcmp(f.data(), g.data() + 1000, f.size()), 0);
    if (round == 0)
      first = f.data();
    else
      EXPECT_EQ(f.data(), first);  // released frames are reused
  }
  Frame bad;
  EXPECT_EQ(store.ReadDenseFrame(2, 1 << 20, 1, &bad).code(), StatusCode::kNotFound);
  // Sparse replies too; small ones are plain allocations.
  ASSERT_TRUE(store.Install(Sparse(3, 4, UpdateRule::kSum)).ok());
  const Key keys[3] = {1, 2, 1};
  Frame s;
  ASSERT_TRUE(store.ReadSparseFrame(3, keys, 3, 4, &s).ok());
  EXPECT_EQ(s.size(), 48u);
  EXPECT_EQ(store.ReadSparseFrame(3, keys, 3, 5, &s).code(), StatusCode::kInvalidArgument);
}

TEST(BufferPoolTest, ReusesAndBoundsIdleMemory) {
  BufferPool pool(size_t{1} << 20);
  auto a = pool.Get(300 << 10);
  uint8_t* pa = a.get();
  a.reset();
  EXPECT_GT(pool.idle_bytes(), 0u);
  auto b = pool.Get(290 << 10);  // same size class
  EXPECT_EQ(b.get(), pa);
  EXPECT_EQ(pool.idle_bytes(), 0u);
  auto big = pool.Get(4 << 20);  // beyond the idle bound: freed on release
  big.reset();
  EXPECT_EQ(pool.idle_bytes(), 0u);
  auto small = pool.Get(100);
  ASSERT_NE(small.get(), nullptr);
  // A buffer may outlive its pool.
  std::shared_ptr<uint8_t> late;
  {
    BufferPool p2;
    late = p2.Get(1 << 20);
  }
  late.reset();
}

// A pool over another allocator (the device path's page-locked memory): every size is
// pooled, each block comes from that allocator and goes back to it, and a failed
// allocation is null from TryGet and std::bad_alloc from Get.
std::atomic<int> g_allocated{0}, g_released{0};
std::atomic<bool> g_fail{false};
void* CountingAllocate(size_t bytes) {
  if (g_fail) return nullptr;
  ++g_allocated;
  return std::malloc(bytes);
}
void CountingRelease(void* p) {
  ++g_released;
  std::free(p);
}

TEST(BufferPoolTest, PoolsEverySizeOverAnotherAllocator) {
  g_allocated = g_released = 0;
  {
    BufferPool pool(size_t{64} << 10, BufferPool::Allocator{CountingAllocate, CountingRelease});
    auto a = pool.Get(100);  // small: pooled too (class 4 KiB)
    uint8_t* pa = a.get();
    EXPECT_EQ(g_allocated, 1);
    a.reset();
    EXPECT_EQ(pool.idle_bytes(), size_t{4} << 10);
    auto b = pool.Get(4000);  // same class: the same block, no new allocation
    EXPECT_EQ(b.get(), pa);
    EXPECT_EQ(g_allocated, 1);
    auto big = pool.Get(1 << 20);  // beyond the idle bound: released when dropped
    big.reset();
    EXPECT_EQ(g_released, 1);
    g_fail = true;
    EXPECT_EQ(pool.TryGet(8 << 10), nullptr);
    EXPECT_THROW(pool.Get(8 << 10), std::bad_alloc);
    g_fail = false;
    b.reset();  // idle again, released with the pool
  }
  EXPECT_EQ(g_allocated, 2);
  EXPECT_EQ(g_released, 2);
}

}  // namespace
}  // namespace ps
