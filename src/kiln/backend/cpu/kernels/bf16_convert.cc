#include "kiln/backend/cpu/kernels/bf16_convert.h"

#include "kiln/base/check.h"

namespace kiln::backend::cpu {

Buffer widen_to_f32(const Buffer& b) {
  if (b.shape().dtype() == ir::DType::kF32) return b;
  KILN_CHECK(b.shape().dtype() == ir::DType::kBF16) << "widen_to_f32 of " << b.shape().to_string();
  Buffer out(b.shape().with_dtype(ir::DType::kF32));
  const uint16_t* src = b.as<uint16_t>();
  float* dst = out.as<float>();
  int64_t n = b.num_elements();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  return out;
}

void narrow_to_bf16(const Buffer& wide, Buffer& out) {
  KILN_CHECK(out.shape().dtype() == ir::DType::kBF16 && wide.num_elements() == out.num_elements());
  const float* src = wide.as<float>();
  uint16_t* dst = out.as<uint16_t>();
  int64_t n = out.num_elements();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

Kernel via_f32(Kernel f32_kernel) {
  return [k = std::move(f32_kernel)](std::span<const Value* const> in, Value& out) {
    std::vector<Value> wide(in.size());
    std::vector<const Value*> args(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const bool bf16 = in[i]->size() == 1 && (*in[i])[0].shape().dtype() == ir::DType::kBF16;
      args[i] = bf16 ? &(wide[i] = Value{widen_to_f32((*in[i])[0])}) : in[i];
    }
    Value result{Buffer(out[0].shape().with_dtype(ir::DType::kF32))};
    k(args, result);
    narrow_to_bf16(result[0], out[0]);
  };
}

}  // namespace kiln::backend::cpu
