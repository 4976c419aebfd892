// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Hashing used for routing and deterministic initialization. Part of the wire contract:
// every node must compute the same values, so these never change without a protocol
// version bump.
#ifndef PS_COMMON_HASH_H_
#define PS_COMMON_HASH_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ps {

// The splitmix64 finalizer: a bijection on uint64 that spreads skewed ids (0, 1, 2...)
// over the whole space. Sparse rows are routed by MixKey(key).
inline uint64_t MixKey(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over bytes, then mixed: a stable 64-bit hash of a table name.
inline uint64_t HashName(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return MixKey(h);
}

// `bytes` random bytes from the OS as 2 * bytes hex digits: session secrets and tags.
std::string RandomHex(size_t bytes);

}  // namespace ps

#endif  // PS_COMMON_HASH_H_
