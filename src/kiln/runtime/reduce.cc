#include "kiln/runtime/reduce.h"

#include <algorithm>
#include <cstring>

#include "kiln/base/check.h"

namespace kiln::runtime {

float bf16_to_f32(uint16_t v) {
  uint32_t bits = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

Segment segment_of(size_t count, size_t parts, size_t index) {
  size_t base = count / parts, extra = count % parts;
  size_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

namespace {

// Blocks keep the accumulator in L1 and make dst == srcs[k] safe. The inner loops are plain
// contiguous loops over restrict pointers so the compiler vectorizes them.
constexpr size_t kBlock = 1024;

// Storage type T, accumulator A (same type except bf16 -> f32 and s32 -> u32 for wrapping).
template <typename T, typename A>
struct Plain {
  static A load(T v) { return A(v); }
  static T store(A v) { return T(v); }
};
struct Bf16 {
  static float load(uint16_t v) { return bf16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
};

template <typename T, typename A, typename Conv>
void sum_blocks(const void* const* srcs, size_t n, void* dst_v, size_t count) {
  T* dst = static_cast<T*>(dst_v);
  A acc[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    size_t len = std::min(kBlock, count - b);
    const T* __restrict s0 = static_cast<const T*>(srcs[0]) + b;
    for (size_t i = 0; i < len; ++i) acc[i] = Conv::load(s0[i]);
    for (size_t k = 1; k < n; ++k) {
      const T* __restrict s = static_cast<const T*>(srcs[k]) + b;
      for (size_t i = 0; i < len; ++i) acc[i] += Conv::load(s[i]);
    }
    T* __restrict d = dst + b;
    for (size_t i = 0; i < len; ++i) d[i] = Conv::store(acc[i]);
  }
}

}  // namespace

void sum_in_rank_order(ReduceDType dtype, const void* const* srcs, size_t n, void* dst,
                       size_t count) {
  KILN_CHECK(n >= 1);
  switch (dtype) {
    case ReduceDType::kF32: return sum_blocks<float, float, Plain<float, float>>(srcs, n, dst, count);
    case ReduceDType::kF64:
      return sum_blocks<double, double, Plain<double, double>>(srcs, n, dst, count);
    case ReduceDType::kBF16: return sum_blocks<uint16_t, float, Bf16>(srcs, n, dst, count);
    case ReduceDType::kS32:
      return sum_blocks<int32_t, uint32_t, Plain<int32_t, uint32_t>>(srcs, n, dst, count);
  }
}

}  // namespace kiln::runtime
