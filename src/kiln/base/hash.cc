#include "kiln/base/hash.h"

#include <fmt/format.h>

namespace kiln {

uint64_t fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace kiln
