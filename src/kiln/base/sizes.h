// Sizes read from files: element counts and byte sizes computed from a file's dims without
// overflow, against one limit every reader shares. A header that claims a 2^60-element
// tensor is refused before anything is allocated or read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace kiln {

// The most elements one tensor read from a file may have (2^44: 64 TiB of float32, far
// beyond any model's largest tensor and far below what the products below can overflow).
inline constexpr uint64_t kMaxFileTensorElements = uint64_t{1} << 44;

// The product of `dims`, or nullopt when a dim is negative or the product passes `limit`.
inline std::optional<uint64_t> checked_element_count(std::span<const int64_t> dims,
                                                     uint64_t limit = kMaxFileTensorElements) {
  uint64_t n = 1;
  bool zero = false;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d == 0) zero = true;
  }
  if (zero) return 0;
  for (int64_t d : dims) {
    if (static_cast<uint64_t>(d) > limit || n > limit / static_cast<uint64_t>(d)) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace kiln
