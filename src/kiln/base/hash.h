// Hashing: FNV-1a 64-bit for content addressing (kernel cache keys, CSE) and a combiner.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);

inline uint64_t hash_combine(uint64_t seed, uint64_t value) {
  // Boost's mix, widened to 64 bits.
  return seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 12) + (seed >> 4));
}

// 16 lowercase hex digits.
std::string hex64(uint64_t value);

// SplitMix64 finalizer: a good bijective mixer for counter-based random numbers.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace kiln
