// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// GPU packing kernels checked against the CPU reference (worker/packing.h).
// - Inputs are random and drawn fresh per test; the seed is printed, and
//   LAYERPS_TEST_SEED=<seed> replays a run.
// - Every device output is poisoned (0xFF bytes: NaN floats, all-ones keys and counts)
//   before the kernels run, and the parts past the data-dependent count are checked to
//   be untouched.
// - Keys, inverse maps, offsets, conversions and copies must be bit-identical to the
//   CPU reference; summed rows must agree within the rounding bound of the two
//   summation orders, about 2 (k - 1) 2^-24 sum|x| for a key seen k times, and be
//   bit-identical for keys seen once.
// - Without a GPU every GPU case skips (GTEST_SKIP, with a message) and the process
//   exits 77 after the host-only cases pass, which CTest reports as skipped.
#include "cuda/packing_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/hash.h"
#include "cuda/mix_key.h"
#include "test_inputs.h"
#include "test_framework.h"
#include "worker/packing.h"

namespace {

using ps::Key;
using ps::pack::WireType;
namespace gpu = ps::pack::gpu;
namespace ti = ps::pack::testing_inputs;

constexpr size_t kTenMillion = 10000000;

// A fresh seed per test, printed so that a failure can be replayed.
uint64_t NewSeed(const char* test) {
  const uint64_t seed = ti::SeedFromEnvOrRandom();
  std::cout << "[ seed     ] " << test << ": LAYERPS_TEST_SEED=" << seed << std::endl;
  return seed;
}

std::string Replay(uint64_t seed) {
  return "replay with LAYERPS_TEST_SEED=" + std::to_string(seed);
}

#define SKIP_WITHOUT_GPU()                                              \
  if (!gpu::DeviceAvailable()) {                                        \
    GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped"; \
  }

#define CUDA_OK(expr)                                                                  \
  do {                                                                                 \
    const int cuda_ok_err_ = static_cast<int>(expr);                                   \
    ASSERT_TRUE(cuda_ok_err_ == 0) << #expr << ": " << gpu::ErrorString(cuda_ok_err_); \
  } while (0)

// A device array poisoned with 0xFF bytes at creation.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)) !=
        cudaSuccess)
      p_ = nullptr;
    if (p_) cudaMemset(p_, 0xFF, std::max<size_t>(n, 1) * sizeof(T));
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) {
    if (p_ && !v.empty()) cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() {
    if (p_) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  bool ok() const { return p_ != nullptr; }
  std::vector<T> Download() const {
    std::vector<T> v(n_);
    if (n_) cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// An explicit stream, so that the tests exercise the stream argument.
class Stream {
 public:
  Stream() { cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(s_); }
  void* get() const { return s_; }
  int Sync() const { return static_cast<int>(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool AllBytesFF(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::all_of(b, b + bytes, [](uint8_t x) { return x == 0xFF; });
}

// Summed rows: gpu vs cpu within the rounding bound; count[u] = multiplicity of unique
// u, abssum = the same coalescing applied to |rows|. Returns "" or the first mismatch.
std::string CompareSums(const std::vector<float>& gpu_rows, const std::vector<float>& cpu_rows,
                        const std::vector<float>& abssum, const std::vector<uint32_t>& count,
                        size_t m, uint32_t dim) {
  for (size_t u = 0; u < m; ++u) {
    for (uint32_t j = 0; j < dim; ++j) {
      const size_t i = u * dim + j;
      const double g = gpu_rows[i], c = cpu_rows[i];
      // Each order's error is at most gamma(k-1) * sum|x|, gamma(j) = j*u / (1 - j*u),
      // u = 2^-24; 1% slack covers the rounding of abssum itself.
      const double ku = (static_cast<double>(count[u]) - 1.0) * std::ldexp(1.0, -24);
      const double bound = 2.0 * ku / (1.0 - ku) * abssum[i] * 1.01;
      const bool ok =
          count[u] == 1 ? Bits(gpu_rows[i]) == Bits(cpu_rows[i]) : std::fabs(g - c) <= bound;
      if (!ok || std::isnan(g)) {
        return "row " + std::to_string(u) + " col " + std::to_string(j) + ": gpu " +
               std::to_string(g) + " cpu " + std::to_string(c) + " (k=" + std::to_string(count[u]) +
               ", bound " + std::to_string(bound) + ")";
      }
    }
  }
  return "";
}

std::vector<float> Abs(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

std::vector<uint32_t> Multiplicity(const std::vector<uint32_t>& inverse, size_t m) {
  std::vector<uint32_t> count(m, 0);
  for (uint32_t u : inverse) ++count[u];
  return count;
}

struct SparseCase {
  size_t n;
  uint32_t dim;
  ti::KeyDist dist;
  uint64_t space;
  int key_bits;  // what the caller promises (64 always valid)
};

std::string Describe(const SparseCase& c) {
  static const char* kDist[] = {"uniform", "zipf", "full64"};
  return "n=" + std::to_string(c.n) + " dim=" + std::to_string(c.dim) +
         " keys=" + kDist[static_cast<int>(c.dist)] + " space=" + std::to_string(c.space) +
         " key_bits=" + std::to_string(c.key_bits);
}

std::vector<SparseCase> SparseCases() {
  using ti::KeyDist;
  return {
      {0, 16, KeyDist::kUniform, 100, 64},
      {1, 1, KeyDist::kFull64, 0, 64},
      {1, 129, KeyDist::kUniform, 10, 64},
      {7, 16, KeyDist::kUniform, 3, 2},
      {33, 1, KeyDist::kUniform, 2, 64},  // runs crossing one tile boundary
      {1001, 1, KeyDist::kZipf, 1000, 64},
      {1001, 16, KeyDist::kFull64, 0, 64},
      {1001, 129, KeyDist::kUniform, 50, 64},
      {65537, 16, KeyDist::kZipf, 100000000, 27},
      {65537, 129, KeyDist::kUniform, 7, 64},  // long runs: many tiles per key
      {65537, 3, KeyDist::kUniform, 1000, 64},
      {kTenMillion, 1, KeyDist::kFull64, 0, 64},
      {kTenMillion, 16, KeyDist::kZipf, 100000000, 64},
  };
}

// ---- Host-only checks (run everywhere) ----------------------------------------------------

TEST(PackingCudaHost, MixKeyCopyMatchesCommonHash) {
  const uint64_t seed = NewSeed("MixKeyCopyMatchesCommonHash");
  ti::Rng rng(seed);
  for (uint64_t x : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    ASSERT_EQ(gpu::MixKeyHD(x), ps::MixKey(x));
  }
  for (int i = 0; i < 100000; ++i) {
    const uint64_t x = rng.Next();
    ASSERT_EQ(gpu::MixKeyHD(x), ps::MixKey(x)) << Replay(seed);
  }
}

TEST(PackingCudaHost, BadArgumentsAreRejectedBeforeAnyCudaCall) {
  gpu::Workspace ws;
  Key k = 1;
  size_t off[2];
  EXPECT_EQ(gpu::Coalesce(&k, nullptr, 1, 0, &k, nullptr, nullptr, nullptr, nullptr, nullptr),
            gpu::kInvalidArgument);
  EXPECT_EQ(gpu::Coalesce(&k, nullptr, 1, 4, &k, nullptr, nullptr, nullptr, &ws, nullptr),
            gpu::kInvalidArgument);
  EXPECT_EQ(gpu::UniqueKeys(&k, 1, &k, nullptr, nullptr, &ws, nullptr, 0), gpu::kInvalidArgument);
  EXPECT_EQ(gpu::UniqueKeys(&k, 1, &k, nullptr, nullptr, &ws, nullptr, 65), gpu::kInvalidArgument);
  EXPECT_EQ(gpu::CoalesceAndBucket(&k, nullptr, 1, 0, nullptr, 1, &k, nullptr, nullptr, off, &ws,
                                   nullptr),
            gpu::kInvalidArgument);
  const uint64_t begin = 0;
  EXPECT_EQ(gpu::Bucket(&k, nullptr, 1, 0, &begin, 0, &k, nullptr, off, &ws, nullptr),
            gpu::kInvalidArgument);
  EXPECT_EQ(gpu::ScatterRows(nullptr, 1, nullptr, 4, nullptr, nullptr), gpu::kInvalidArgument);
  EXPECT_EQ(gpu::ToWire(nullptr, 4, WireType::kFloat16, nullptr, nullptr), gpu::kInvalidArgument);
  EXPECT_EQ(gpu::AllocPinned(16, nullptr), gpu::kInvalidArgument);
  // Empty work is a no-op everywhere.
  EXPECT_EQ(gpu::ToWire(nullptr, 0, WireType::kFloat16, nullptr, nullptr), gpu::kOk);
  EXPECT_EQ(gpu::Fuse(nullptr, nullptr, 0, WireType::kFloat32, nullptr, nullptr), gpu::kOk);
  EXPECT_TRUE(std::string(gpu::ErrorString(gpu::kInvalidArgument)) == "invalid argument");
}

TEST(PackingCudaHost, DeviceAvailableDoesNotCrash) {
  const bool available = gpu::DeviceAvailable();
  std::cout << "  CUDA device available: " << (available ? "yes" : "no") << std::endl;
}

// ---- Sparse ---------------------------------------------------------------------------------

TEST(PackingCuda, CoalesceMatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("CoalesceMatchesCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  gpu::Workspace ws;
  for (const SparseCase& c : SparseCases()) {
    SCOPED_TRACE(Describe(c) + " " + Replay(seed));
    const auto keys = ti::MakeKeys(rng, c.n, c.dist, c.space);
    const auto rows = ti::MakeRows(rng, c.n * c.dim);
    // CPU reference.
    std::vector<Key> cpu_keys(c.n);
    std::vector<float> cpu_rows(c.n * c.dim), cpu_abs(c.n * c.dim);
    std::vector<uint32_t> cpu_inv(c.n);
    const size_t m = ps::pack::Coalesce(keys.data(), rows.data(), c.n, c.dim, cpu_keys.data(),
                                        cpu_rows.data(), cpu_inv.data());
    const auto abs_rows = Abs(rows);
    ps::pack::Coalesce(keys.data(), abs_rows.data(), c.n, c.dim, cpu_keys.data(), cpu_abs.data(),
                       nullptr);
    // GPU, twice (the result must be deterministic).
    DeviceArray<Key> d_keys(keys), d_out_keys(c.n);
    DeviceArray<float> d_rows(rows), d_out_rows(c.n * c.dim), d_out_rows2(c.n * c.dim);
    DeviceArray<uint32_t> d_inv(c.n);
    DeviceArray<size_t> d_m(1);
    ASSERT_TRUE(d_keys.ok() && d_out_keys.ok() && d_rows.ok() && d_out_rows.ok() && d_inv.ok());
    CUDA_OK(gpu::Coalesce(d_keys.get(), d_rows.get(), c.n, c.dim, d_out_keys.get(),
                          d_out_rows.get(), d_inv.get(), d_m.get(), &ws, stream.get(), c.key_bits));
    CUDA_OK(gpu::Coalesce(d_keys.get(), d_rows.get(), c.n, c.dim, d_out_keys.get(),
                          d_out_rows2.get(), nullptr, nullptr, &ws, stream.get(), c.key_bits));
    CUDA_OK(stream.Sync());
    ASSERT_EQ(d_m.Download()[0], m);
    const auto g_keys = d_out_keys.Download();
    const auto g_inv = d_inv.Download();
    const auto g_rows = d_out_rows.Download();
    const auto g_rows2 = d_out_rows2.Download();
    ASSERT_TRUE(std::equal(cpu_keys.begin(), cpu_keys.begin() + m, g_keys.begin()));
    ASSERT_TRUE(AllBytesFF(g_keys.data() + m, (c.n - m) * sizeof(Key))) << "wrote past m";
    ASSERT_TRUE(cpu_inv == g_inv);
    const std::string err =
        CompareSums(g_rows, cpu_rows, cpu_abs, Multiplicity(cpu_inv, m), m, c.dim);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_TRUE(AllBytesFF(g_rows.data() + m * c.dim, (c.n - m) * c.dim * sizeof(float)));
    ASSERT_TRUE(c.n == 0 ||
                std::memcmp(g_rows.data(), g_rows2.data(), g_rows.size() * sizeof(float)) == 0)
        << "two runs differ";
  }
}

TEST(PackingCuda, UniqueKeysMatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("UniqueKeysMatchesCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  gpu::Workspace ws;
  for (const SparseCase& c : SparseCases()) {
    SCOPED_TRACE(Describe(c) + " " + Replay(seed));
    const auto keys = ti::MakeKeys(rng, c.n, c.dist, c.space);
    std::vector<Key> cpu_keys(c.n);
    std::vector<uint32_t> cpu_inv(c.n);
    const size_t m = ps::pack::UniqueKeys(keys.data(), c.n, cpu_keys.data(), cpu_inv.data());
    DeviceArray<Key> d_keys(keys), d_out(c.n);
    DeviceArray<uint32_t> d_inv(c.n);
    DeviceArray<size_t> d_m(1);
    CUDA_OK(gpu::UniqueKeys(d_keys.get(), c.n, d_out.get(), d_inv.get(), d_m.get(), &ws,
                            stream.get(), c.key_bits));
    CUDA_OK(stream.Sync());
    ASSERT_EQ(d_m.Download()[0], m);
    const auto g_keys = d_out.Download();
    ASSERT_TRUE(std::equal(cpu_keys.begin(), cpu_keys.begin() + m, g_keys.begin()));
    ASSERT_TRUE(cpu_inv == d_inv.Download());
  }
}

TEST(PackingCuda, BucketMatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("BucketMatchesCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  gpu::Workspace ws;
  for (const SparseCase& c : SparseCases()) {
    for (size_t nb : {size_t{1}, size_t{2}, size_t{7}, size_t{256}, size_t{1000}}) {
      SCOPED_TRACE(Describe(c) + " buckets=" + std::to_string(nb) + " " + Replay(seed));
      if (c.n == kTenMillion && nb != 7) continue;  // keep the big case to one run
      const auto keys = ti::MakeKeys(rng, c.n, c.dist, c.space);
      const auto rows = ti::MakeRows(rng, c.n * c.dim);
      const auto begin = nb == 7 ? ti::EvenBuckets(nb) : ti::MakeBuckets(rng, nb);
      std::vector<Key> cpu_keys(c.n);
      std::vector<float> cpu_rows(c.n * c.dim);
      std::vector<size_t> cpu_off(nb + 1);
      ps::pack::Bucket(keys.data(), rows.data(), c.n, c.dim, begin.data(), nb, cpu_keys.data(),
                       cpu_rows.data(), cpu_off.data());
      DeviceArray<Key> d_keys(keys), d_out_keys(c.n);
      DeviceArray<float> d_rows(rows), d_out_rows(c.n * c.dim);
      DeviceArray<uint64_t> d_begin(begin);
      DeviceArray<size_t> d_off(nb + 1);
      CUDA_OK(gpu::Bucket(d_keys.get(), d_rows.get(), c.n, c.dim, d_begin.get(), nb,
                          d_out_keys.get(), d_out_rows.get(), d_off.get(), &ws, stream.get()));
      CUDA_OK(stream.Sync());
      ASSERT_TRUE(cpu_off == d_off.Download());
      ASSERT_TRUE(cpu_keys == d_out_keys.Download());
      const auto g_rows = d_out_rows.Download();
      ASSERT_TRUE(c.n == 0 ||
                  std::memcmp(cpu_rows.data(), g_rows.data(), g_rows.size() * sizeof(float)) == 0);
    }
  }
}

TEST(PackingCuda, CoalesceAndBucketMatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("CoalesceAndBucketMatchesCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  gpu::Workspace ws;
  for (const SparseCase& c : SparseCases()) {
    for (size_t nb : {size_t{1}, size_t{5}, size_t{300}}) {
      if (c.n == kTenMillion && nb != 5) continue;
      SCOPED_TRACE(Describe(c) + " buckets=" + std::to_string(nb) + " " + Replay(seed));
      const auto keys = ti::MakeKeys(rng, c.n, c.dist, c.space);
      const auto rows = ti::MakeRows(rng, c.n * c.dim);
      const auto begin = ti::MakeBuckets(rng, nb);
      std::vector<Key> cpu_keys(c.n);
      std::vector<float> cpu_rows(c.n * c.dim), cpu_abs(c.n * c.dim);
      std::vector<uint32_t> cpu_inv(c.n);
      std::vector<size_t> cpu_off(nb + 1);
      const size_t m = ps::pack::CoalesceAndBucket(keys.data(), rows.data(), c.n, c.dim,
                                                   begin.data(), nb, cpu_keys.data(),
                                                   cpu_rows.data(), cpu_inv.data(), cpu_off.data());
      const auto abs_rows = Abs(rows);
      ps::pack::CoalesceAndBucket(keys.data(), abs_rows.data(), c.n, c.dim, begin.data(), nb,
                                  cpu_keys.data(), cpu_abs.data(), nullptr, cpu_off.data());
      DeviceArray<Key> d_keys(keys), d_out_keys(c.n);
      DeviceArray<float> d_rows(rows), d_out_rows(c.n * c.dim);
      DeviceArray<uint32_t> d_inv(c.n);
      DeviceArray<uint64_t> d_begin(begin);
      DeviceArray<size_t> d_off(nb + 1);
      CUDA_OK(gpu::CoalesceAndBucket(d_keys.get(), d_rows.get(), c.n, c.dim, d_begin.get(), nb,
                                     d_out_keys.get(), d_out_rows.get(), d_inv.get(), d_off.get(),
                                     &ws, stream.get(), c.key_bits));
      CUDA_OK(stream.Sync());
      ASSERT_TRUE(cpu_off == d_off.Download());
      const auto g_keys = d_out_keys.Download();
      ASSERT_TRUE(std::equal(cpu_keys.begin(), cpu_keys.begin() + m, g_keys.begin()));
      ASSERT_TRUE(AllBytesFF(g_keys.data() + m, (c.n - m) * sizeof(Key)));
      ASSERT_TRUE(cpu_inv == d_inv.Download());
      const std::string err =
          CompareSums(d_out_rows.Download(), cpu_rows, cpu_abs, Multiplicity(cpu_inv, m), m, c.dim);
      ASSERT_TRUE(err.empty()) << err;
      // Keys only (what a device pull packs): the same keys, offsets and inverse.
      DeviceArray<Key> d_only_keys(c.n);
      DeviceArray<uint32_t> d_only_inv(c.n);
      DeviceArray<size_t> d_only_off(nb + 1);
      CUDA_OK(gpu::CoalesceAndBucket(d_keys.get(), nullptr, c.n, 0, d_begin.get(), nb,
                                     d_only_keys.get(), nullptr, d_only_inv.get(),
                                     d_only_off.get(), &ws, stream.get(), c.key_bits));
      CUDA_OK(stream.Sync());
      ASSERT_TRUE(cpu_off == d_only_off.Download());
      const auto o_keys = d_only_keys.Download();
      ASSERT_TRUE(std::equal(cpu_keys.begin(), cpu_keys.begin() + m, o_keys.begin()));
      ASSERT_TRUE(cpu_inv == d_only_inv.Download());
    }
  }
}

TEST(PackingCuda, ScatterRowsMatchesCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("ScatterRowsMatchesCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  for (const SparseCase& c : SparseCases()) {
    SCOPED_TRACE(Describe(c) + " " + Replay(seed));
    const auto keys = ti::MakeKeys(rng, c.n, c.dist, c.space);
    std::vector<Key> uniq(c.n);
    std::vector<uint32_t> inv(c.n);
    const size_t m = ps::pack::UniqueKeys(keys.data(), c.n, uniq.data(), inv.data());
    const auto pulled = ti::MakeRows(rng, m * c.dim);
    std::vector<float> cpu_out(c.n * c.dim);
    ps::pack::ScatterRows(inv.data(), c.n, pulled.data(), c.dim, cpu_out.data());
    DeviceArray<uint32_t> d_inv(inv);
    DeviceArray<float> d_pulled(pulled), d_out(c.n * c.dim);
    CUDA_OK(gpu::ScatterRows(d_inv.get(), c.n, d_pulled.get(), c.dim, d_out.get(), stream.get()));
    CUDA_OK(stream.Sync());
    const auto g = d_out.Download();
    ASSERT_TRUE(c.n == 0 || std::memcmp(g.data(), cpu_out.data(), g.size() * sizeof(float)) == 0);
  }
}

// ---- Dense ----------------------------------------------------------------------------------

// Random bit patterns (NaNs, infinities, subnormals included), plus edge values.
std::vector<float> SpecialFloats(ti::Rng& rng, size_t n) {
  std::vector<float> v(n);
  const float edges[] = {0.0f,
                         -0.0f,
                         65504.0f,
                         65520.0f,
                         -65519.996f,
                         2.9802322e-8f,
                         5.9604645e-8f,
                         6.1035156e-5f,
                         3.4028235e38f,
                         1e-45f,
                         FromBits(0x7F800000u),
                         FromBits(0xFF800000u),
                         FromBits(0x7FC00001u),
                         FromBits(0xFF800001u),
                         FromBits(0x7F7F8000u),
                         FromBits(0x00018000u)};
  for (size_t i = 0; i < n; ++i) {
    v[i] = i < sizeof(edges) / sizeof(edges[0]) ? edges[i]
                                                : FromBits(static_cast<uint32_t>(rng.Next()));
  }
  return v;
}

TEST(PackingCuda, ConversionsMatchCpuReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("ConversionsMatchCpuReferenceBitForBit");
  ti::Rng rng(seed);
  Stream stream;
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1001}, size_t{65537}, kTenMillion}) {
    for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
      for (size_t shift : {size_t{0}, size_t{1}}) {  // 1: misaligned, scalar path
        SCOPED_TRACE("n=" + std::to_string(n) + " type=" + std::to_string(static_cast<int>(t)) +
                     " shift=" + std::to_string(shift) + " " + Replay(seed));
        const size_t wb = ps::pack::WireBytes(t);
        const auto in = SpecialFloats(rng, n);
        std::vector<uint8_t> cpu_wire(n * wb);
        ps::pack::ToWire(in.data(), n, t, cpu_wire.data());
        std::vector<float> cpu_back(n);
        ps::pack::FromWire(cpu_wire.data(), n, t, cpu_back.data());
        DeviceArray<float> d_in(n + shift), d_back(n + shift);
        DeviceArray<uint8_t> d_wire((n + shift) * wb);
        if (n) cudaMemcpy(d_in.get() + shift, in.data(), n * 4, cudaMemcpyHostToDevice);
        CUDA_OK(gpu::ToWire(d_in.get() + shift, n, t, d_wire.get() + shift * wb, stream.get()));
        CUDA_OK(gpu::FromWire(d_wire.get() + shift * wb, n, t, d_back.get() + shift, stream.get()));
        CUDA_OK(stream.Sync());
        const auto g_wire = d_wire.Download();
        const auto g_back = d_back.Download();
        ASSERT_TRUE(n == 0 || std::memcmp(g_wire.data() + shift * wb, cpu_wire.data(), n * wb) == 0)
            << "narrowing differs";
        ASSERT_TRUE(n == 0 || std::memcmp(g_back.data() + shift, cpu_back.data(), n * 4) == 0)
            << "widening differs";
        ASSERT_TRUE(AllBytesFF(g_wire.data(), shift * wb));
      }
    }
  }
  // Every 16-bit pattern widened.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (WireType t : {WireType::kFloat16, WireType::kBFloat16}) {
    std::vector<float> cpu(65536);
    ps::pack::FromWire(all.data(), 65536, t, cpu.data());
    DeviceArray<uint16_t> d_all(all);
    DeviceArray<float> d_out(65536);
    CUDA_OK(gpu::FromWire(d_all.get(), 65536, t, d_out.get(), stream.get()));
    CUDA_OK(stream.Sync());
    ASSERT_TRUE(std::memcmp(d_out.Download().data(), cpu.data(), 65536 * 4) == 0);
  }
}

TEST(PackingCuda, FuseAndUnfuseMatchCpuReference) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("FuseAndUnfuseMatchCpuReference");
  ti::Rng rng(seed);
  Stream stream;
  for (size_t count : {size_t{1}, size_t{3}, size_t{200}, size_t{300}}) {
    std::vector<size_t> lens(count);
    for (auto& l : lens) l = rng.Below(3) == 0 ? rng.Below(5) : rng.Below(100000);
    if (count >= 3) {
      lens[1] = 0;  // an empty tensor with a null pointer
      lens[2] = 1;
    }
    std::vector<size_t> offsets(count + 1);
    const size_t total = ps::pack::FuseOffsets(lens.data(), count, offsets.data());
    const auto all = ti::MakeRows(rng, total);
    std::vector<const float*> h_srcs(count);
    for (size_t i = 0; i < count; ++i) h_srcs[i] = all.data() + offsets[i];
    DeviceArray<float> d_all(all), d_back(total);
    std::vector<const float*> d_srcs(count);
    std::vector<float*> d_dsts(count);
    for (size_t i = 0; i < count; ++i) {
      d_srcs[i] = lens[i] ? d_all.get() + offsets[i] : nullptr;
      d_dsts[i] = lens[i] ? d_back.get() + offsets[i] : nullptr;
    }
    for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
      SCOPED_TRACE("count=" + std::to_string(count) + " total=" + std::to_string(total) +
                   " type=" + std::to_string(static_cast<int>(t)) + " " + Replay(seed));
      const size_t wb = ps::pack::WireBytes(t);
      std::vector<uint8_t> cpu_fused(total * wb);
      ps::pack::Fuse(h_srcs.data(), lens.data(), count, t, cpu_fused.data());
      std::vector<float> cpu_back(total);
      std::vector<float*> h_dsts(count);
      for (size_t i = 0; i < count; ++i) h_dsts[i] = cpu_back.data() + offsets[i];
      ps::pack::Unfuse(cpu_fused.data(), t, h_dsts.data(), lens.data(), count);

      DeviceArray<uint8_t> d_fused(total * wb + 64);
      CUDA_OK(
          cudaMemsetAsync(d_back.get(), 0xFF, total * 4, static_cast<cudaStream_t>(stream.get())));
      CUDA_OK(gpu::Fuse(d_srcs.data(), lens.data(), count, t, d_fused.get(), stream.get()));
      CUDA_OK(gpu::Unfuse(d_fused.get(), t, d_dsts.data(), lens.data(), count, stream.get()));
      CUDA_OK(stream.Sync());
      const auto g_fused = d_fused.Download();
      ASSERT_TRUE(std::memcmp(g_fused.data(), cpu_fused.data(), total * wb) == 0);
      ASSERT_TRUE(AllBytesFF(g_fused.data() + total * wb, 64)) << "wrote past the end";
      ASSERT_TRUE(std::memcmp(d_back.Download().data(), cpu_back.data(), total * 4) == 0);
    }
  }
}

// ---- Into pinned host memory ------------------------------------------------------------------

TEST(PackingCuda, PackedBuffersLandInPinnedHostMemory) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = NewSeed("PackedBuffersLandInPinnedHostMemory");
  ti::Rng rng(seed);
  Stream stream;
  gpu::Workspace ws;
  const size_t n = 100003, nb = 4;
  const uint32_t dim = 16;
  const auto keys = ti::MakeKeys(rng, n, ti::KeyDist::kZipf, 1000000);
  const auto rows = ti::MakeRows(rng, n * dim);
  const auto begin = ti::EvenBuckets(nb);
  std::vector<Key> cpu_keys(n);
  std::vector<float> cpu_rows(n * dim), cpu_abs(n * dim);
  std::vector<uint32_t> cpu_inv(n);
  std::vector<size_t> cpu_off(nb + 1);
  const size_t m =
      ps::pack::CoalesceAndBucket(keys.data(), rows.data(), n, dim, begin.data(), nb,
                                  cpu_keys.data(), cpu_rows.data(), cpu_inv.data(), cpu_off.data());
  const auto abs_rows = Abs(rows);
  ps::pack::CoalesceAndBucket(keys.data(), abs_rows.data(), n, dim, begin.data(), nb,
                              cpu_keys.data(), cpu_abs.data(), nullptr, cpu_off.data());

  DeviceArray<Key> d_keys(keys), d_out_keys(n);
  DeviceArray<float> d_rows(rows), d_out_rows(n * dim);
  DeviceArray<uint64_t> d_begin(begin);
  DeviceArray<size_t> d_off(nb + 1);
  void* h_keys = nullptr;
  void* h_rows = nullptr;
  void* h_off = nullptr;
  CUDA_OK(gpu::AllocPinned(n * sizeof(Key), &h_keys));
  CUDA_OK(gpu::AllocPinned(n * dim * sizeof(float), &h_rows));
  CUDA_OK(gpu::AllocPinned((nb + 1) * sizeof(size_t), &h_off));
  std::memset(h_keys, 0xFF, n * sizeof(Key));
  std::memset(h_rows, 0xFF, n * dim * sizeof(float));
  CUDA_OK(gpu::CoalesceAndBucket(d_keys.get(), d_rows.get(), n, dim, d_begin.get(), nb,
                                 d_out_keys.get(), d_out_rows.get(), nullptr, d_off.get(), &ws,
                                 stream.get()));
  // Only the m packed entries travel, without the host learning m first.
  const size_t* d_m = d_off.get() + nb;
  CUDA_OK(gpu::CopyCountedAsync(h_keys, d_out_keys.get(), d_m, sizeof(Key), n, stream.get()));
  CUDA_OK(
      gpu::CopyCountedAsync(h_rows, d_out_rows.get(), d_m, dim * sizeof(float), n, stream.get()));
  CUDA_OK(gpu::CopyAsync(h_off, d_off.get(), (nb + 1) * sizeof(size_t), stream.get()));
  CUDA_OK(stream.Sync());
  const auto* hk = static_cast<const Key*>(h_keys);
  const auto* hr = static_cast<const float*>(h_rows);
  const auto* ho = static_cast<const size_t*>(h_off);
  bool ok = std::equal(cpu_off.begin(), cpu_off.end(), ho) &&
            std::equal(cpu_keys.begin(), cpu_keys.begin() + m, hk) &&
            AllBytesFF(hk + m, (n - m) * sizeof(Key)) &&
            AllBytesFF(hr + m * dim, (n - m) * dim * sizeof(float));
  const std::string err = CompareSums(std::vector<float>(hr, hr + n * dim), cpu_rows, cpu_abs,
                                      Multiplicity(cpu_inv, m), m, dim);
  CUDA_OK(gpu::FreePinned(h_keys));
  CUDA_OK(gpu::FreePinned(h_rows));
  CUDA_OK(gpu::FreePinned(h_off));
  ASSERT_TRUE(ok) << Replay(seed);
  ASSERT_TRUE(err.empty()) << err << " " << Replay(seed);
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = RunAllTests(&argc, argv);
  if (rc == 0 && !gpu::DeviceAvailable()) {
    std::cout << "No CUDA device: host-side checks passed, GPU checks skipped (exit 77)"
              << std::endl;
    return 77;
  }
  return rc;
}
