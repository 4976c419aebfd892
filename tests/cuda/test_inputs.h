// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Random inputs shared by the GPU test and the benchmark (host code only): a fast
// seeded generator, uniform and Zipf keys, never-zero rows, bucket boundaries.
#ifndef PS_CUDA_TEST_INPUTS_H_
#define PS_CUDA_TEST_INPUTS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace ps {
namespace pack {
namespace testing_inputs {

// splitmix64: tiny, fast, good enough for test data; the sequence depends only on the seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) (bound > 0); the tiny modulo bias is irrelevant here.
  uint64_t Below(uint64_t bound) { return Next() % bound; }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// A seed from LAYERPS_TEST_SEED when set (to replay a run), else a fresh random one.
inline uint64_t SeedFromEnvOrRandom() {
  if (const char* s = std::getenv("LAYERPS_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

// Zipf over ranks 1..n with exponent s > 0, by rejection-inversion (W. Hormann and
// G. Derflinger, "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996): O(1) per sample for any n.
class Zipf {
 public:
  Zipf(uint64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_integral_x1_ = HIntegral(1.5) - 1.0;
    h_integral_n_ = HIntegral(n_ + 0.5);
    squeeze_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
  }
  uint64_t operator()(Rng& rng) const {
    for (;;) {
      const double u = h_integral_n_ + rng.Unit() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= squeeze_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<uint64_t>(k);
    }
  }

 private:
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const {
    const double lx = std::log(x);
    return Helper2((1.0 - s_) * lx) * lx;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }
  // log1p(x)/x and expm1(x)/x, continuous at 0.
  static double Helper1(double x) {
    return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {
    return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                               : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  double n_, s_;
  double h_integral_x1_, h_integral_n_, squeeze_;
};

enum class KeyDist { kUniform, kZipf, kFull64 };

// n keys: uniform in [0, space), Zipf ranks - 1 over [0, space), or any 64-bit value
// (then with 0 and 2^64-1 planted when n >= 4).
inline std::vector<uint64_t> MakeKeys(Rng& rng, size_t n, KeyDist dist, uint64_t space,
                                      double zipf_s = 1.05) {
  std::vector<uint64_t> keys(n);
  switch (dist) {
    case KeyDist::kUniform:
      for (auto& k : keys) k = rng.Below(space);
      break;
    case KeyDist::kZipf: {
      const Zipf zipf(space, zipf_s);
      for (auto& k : keys) k = zipf(rng) - 1;
      break;
    }
    case KeyDist::kFull64:
      for (auto& k : keys) k = rng.Next();
      if (n >= 4) {
        keys[n / 3] = 0;
        keys[n / 2] = ~uint64_t{0};
      }
      break;
  }
  return keys;
}

// Never zero: magnitudes in [0.5, 2) with a random sign.
inline std::vector<float> MakeRows(Rng& rng, size_t count) {
  std::vector<float> v(count);
  for (auto& x : v) {
    const uint64_t r = rng.Next();
    const float mag = 0.5f + 1.5f * static_cast<float>(r >> 40) * 0x1.0p-24f;
    x = (r & 1) ? -mag : mag;
  }
  return v;
}

// bucket_begin for num_buckets servers: 0, then distinct ascending random boundaries.
inline std::vector<uint64_t> MakeBuckets(Rng& rng, size_t num_buckets) {
  std::vector<uint64_t> b = {0};
  while (b.size() < num_buckets) {
    const uint64_t x = rng.Next();
    if (x != 0 && std::find(b.begin(), b.end(), x) == b.end()) b.push_back(x);
  }
  std::sort(b.begin(), b.end());
  return b;
}

// Even split of the 64-bit hash space: what a balanced cluster map looks like.
inline std::vector<uint64_t> EvenBuckets(size_t num_buckets) {
  std::vector<uint64_t> b(num_buckets);
  for (size_t i = 0; i < num_buckets; ++i) {
    b[i] = static_cast<uint64_t>((static_cast<unsigned __int128>(i) << 64) / num_buckets);
  }
  return b;
}

}  // namespace testing_inputs
}  // namespace pack
}  // namespace ps

#endif  // PS_CUDA_TEST_INPUTS_H_
