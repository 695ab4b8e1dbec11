// Element types of IR values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::ir {

enum class DType : uint8_t { kPred, kS32, kU32, kBF16, kF32, kF64 };

std::string_view dtype_name(DType dtype);  // "f32"
std::optional<DType> parse_dtype(std::string_view name);
int dtype_size(DType dtype);  // bytes per element
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // s32, u32 (not pred)

// Rounds a double to the nearest value representable in `dtype`, with that type's
// conversion semantics: floats round to nearest even, integers truncate toward zero and
// saturate, pred is (x != 0). The interpreter applies it to every op result, so it computes
// exactly what an IEEE machine in that dtype would, up to one rounding per op.
double round_to_dtype(DType dtype, double value);

// bfloat16 helpers (round to nearest even, NaN preserved).
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);

}  // namespace kiln::ir
