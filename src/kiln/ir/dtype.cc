#include "kiln/ir/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::ir {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kPred: return "pred";
    case DType::kS32: return "s32";
    case DType::kU32: return "u32";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::kPred, DType::kS32, DType::kU32, DType::kBF16, DType::kF32, DType::kF64}) {
    if (dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kPred: return 1;
    case DType::kBF16: return 2;
    case DType::kS32:
    case DType::kU32:
    case DType::kF32: return 4;
    case DType::kF64: return 8;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF64;
}
bool is_integral(DType dtype) { return dtype == DType::kS32 || dtype == DType::kU32; }

uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

namespace {
double saturate_truncate(double value, double lo, double hi) {
  if (std::isnan(value)) return 0.0;
  double t = std::trunc(value);
  return t < lo ? lo : (t > hi ? hi : t);
}
}  // namespace

double round_to_dtype(DType dtype, double value) {
  switch (dtype) {
    case DType::kPred: return value != 0.0 ? 1.0 : 0.0;
    case DType::kS32:
      return saturate_truncate(value, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    case DType::kU32: return saturate_truncate(value, 0.0, std::numeric_limits<uint32_t>::max());
    case DType::kBF16: return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(value)));
    case DType::kF32: return static_cast<double>(static_cast<float>(value));
    case DType::kF64: return value;
  }
  return value;
}

}  // namespace kiln::ir
