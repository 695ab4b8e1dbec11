// bf16 x bf16 matrix products on oneDNN's matmul primitive (its JIT bf16 GEMM, which uses
// the CPU's bf16 dot-product instructions with f32 accumulation), writing f32 or bf16.
// Primitives are created with run-time dims and strides, so one primitive per layout
// (transposes, batched or not, output dtype) serves every shape: creation JIT-compiles
// kernels and is far too slow to repeat per call, and MoE tiles come in ever new sizes.
// On a CPU where oneDNN has no bf16 matmul (AVX2 without AVX-VNNI-2, e.g. Zen 1-3) the
// operands are widened to f32 and multiplied with sgemm: the same exact products and f32
// sums, slower.
#pragma once

#include <cstdint>

namespace kiln::backend::cpu {

// C[b] (M x N, row stride ldc) = op(A[b]) (M x K) @ op(B[b]) (K x N) for b < batch, where
// op(A) is A read as [M, K] with row stride lda, or as its transpose stored [K, M] when
// trans_a (likewise B: [K, N] or, with trans_b, [N, K]). Batch strides are in elements.
struct Bf16MatmulDesc {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;
  bool f32_out = true;  // C is float; else bf16 (rounded to nearest even from the f32 sum)

  bool operator==(const Bf16MatmulDesc&) const = default;
};

// Runs the product (m, n >= 1; k == 0 writes zeros). A and B hold bf16 bits; C is float or
// bf16 bits as the description says. Thread-safe.
void bf16_matmul(const Bf16MatmulDesc& desc, const uint16_t* a, const uint16_t* b, void* c);

// Whether oneDNN runs bf16 products natively on this CPU (else they are widened to f32).
bool bf16_matmul_native();

// Number of primitives created so far (tests: a repeated shape must not create another).
int64_t bf16_matmul_primitives_created();

}  // namespace kiln::backend::cpu
