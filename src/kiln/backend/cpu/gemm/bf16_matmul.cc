// oneDNN matmul primitives for bf16 products (see bf16_matmul.h).
//
// Transposes and strides go into the memory descriptors, so no operand is copied here.
// Why run-time dims: the shape-specialised implementation (brgemm) was measured no faster
// than the run-time-dims JIT GEMM on this CPU (and 2.4x slower with a transposed right
// operand), while grouped matmuls meet a new tile size almost every step; and brgemm's
// library scratchpad gave wrong results when two threads ran one primitive at once, which
// the grouped-matmul tiles do. The run-time-dims primitive is safe to share.
#include "kiln/backend/cpu/gemm/bf16_matmul.h"

#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/thread_scratch.h"
#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

constexpr int64_t kRt = DNNL_RUNTIME_DIM_VAL;
using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::atomic<int64_t> created{0};

// [batch, rows, cols] (or [rows, cols] when batch == 1); a transposed operand is stored
// [cols, rows] with row stride ld. With `runtime`, every dim and stride is left to run time
// except which stride is 1 (the layout the primitive is compiled for).
dnnl::memory::desc md(bool batched, int64_t batch, int64_t rows, int64_t cols, bool trans, int64_t ld,
                      int64_t batch_stride, dt type, bool runtime) {
  if (runtime) {
    if (!batched) return dnnl::memory::desc({kRt, kRt}, type, trans ? dnnl::memory::dims{1, kRt} : dnnl::memory::dims{kRt, 1});
    return dnnl::memory::desc({kRt, kRt, kRt}, type,
                              trans ? dnnl::memory::dims{kRt, 1, kRt} : dnnl::memory::dims{kRt, kRt, 1});
  }
  const int64_t rs = trans ? 1 : ld, cs = trans ? ld : 1;
  if (!batched) return dnnl::memory::desc({rows, cols}, type, {rs, cs});
  return dnnl::memory::desc({batch, rows, cols}, type, {batch_stride, rs, cs});
}

// Whether this CPU's oneDNN makes bf16 matmuls at all: it needs AVX-512 (or AVX2 with
// AVX-VNNI-2); on an AVX2-only CPU creating the primitive fails. Asked once.
bool onednn_has_bf16() {
  static const bool has = [] {
    try {
      const dnnl::memory::desc a = md(false, 0, 0, 0, false, 0, 0, dt::bf16, true);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, md(false, 0, 0, 0, false, 0, 0, dt::f32, true)),
                                      cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

// Without bf16 support: widen both operands to f32 (exact), multiply with sgemm (f32
// products of bf16 values are exact, sums in f32: the bf16 instructions' own arithmetic, in
// another order), then round once to the output dtype.
void widened_matmul(const Bf16MatmulDesc& d, const uint16_t* a, const uint16_t* b, void* c) {
  // op(A) stored [M, K] (or [K, M] transposed), op(B) [K, N] (or [N, K]), each with its
  // row stride; widened into dense row-major copies.
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  std::vector<float> wa(static_cast<size_t>(a_rows * a_cols)), wb(static_cast<size_t>(b_rows * b_cols));
  std::vector<float> wc(d.f32_out ? 0 : static_cast<size_t>(d.m * d.n));
  for (int64_t i = 0; i < d.batch; ++i) {
    for (int64_t r = 0; r < a_rows; ++r) {
      const uint16_t* row = a + i * d.batch_stride_a + r * d.lda;
      for (int64_t col = 0; col < a_cols; ++col) wa[r * a_cols + col] = bf16_to_f32(row[col]);
    }
    for (int64_t r = 0; r < b_rows; ++r) {
      const uint16_t* row = b + i * d.batch_stride_b + r * d.ldb;
      for (int64_t col = 0; col < b_cols; ++col) wb[r * b_cols + col] = bf16_to_f32(row[col]);
    }
    float* out = d.f32_out ? static_cast<float*>(c) + i * d.batch_stride_c : wc.data();
    const int64_t ldc = d.f32_out ? d.ldc : d.n;
    dnnl_status_t s = dnnl_sgemm(d.trans_a ? 'T' : 'N', d.trans_b ? 'T' : 'N', d.m, d.n, d.k, 1.0f, wa.data(), a_cols,
                                 wb.data(), b_cols, 0.0f, out, ldc);
    KILN_CHECK(s == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(s);
    if (d.f32_out) continue;
    uint16_t* narrow = static_cast<uint16_t*>(c) + i * d.batch_stride_c;
    for (int64_t r = 0; r < d.m; ++r) {
      for (int64_t col = 0; col < d.n; ++col) narrow[r * d.ldc + col] = f32_to_bf16(wc[r * d.n + col]);
    }
  }
}

// The primitive for one layout: index = batched | trans_a << 1 | trans_b << 2 | f32_out << 3.
const dnnl::matmul& primitive(const Bf16MatmulDesc& d) {
  static std::mutex mu;
  static std::unique_ptr<dnnl::matmul> cache[16];
  const bool batched = d.batch > 1;
  const int index = (batched ? 1 : 0) | (d.trans_a ? 2 : 0) | (d.trans_b ? 4 : 0) | (d.f32_out ? 8 : 0);
  std::lock_guard<std::mutex> lock(mu);
  if (!cache[index]) {
    dnnl::memory::desc src = md(batched, 0, 0, 0, d.trans_a, 0, 0, dt::bf16, true);
    dnnl::memory::desc weights = md(batched, 0, 0, 0, d.trans_b, 0, 0, dt::bf16, true);
    dnnl::memory::desc dst = md(batched, 0, 0, 0, false, 0, 0, d.f32_out ? dt::f32 : dt::bf16, true);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), cpu_engine());
    cache[index] = std::make_unique<dnnl::matmul>(pd);
    created.fetch_add(1, std::memory_order_relaxed);
  }
  return *cache[index];
}

}  // namespace

void bf16_matmul(const Bf16MatmulDesc& d, const uint16_t* a, const uint16_t* b, void* c) {
  KILN_CHECK(d.m > 0 && d.n > 0 && d.k >= 0 && d.batch > 0) << "bf16_matmul of an empty product";
  if (d.k == 0) {
    const size_t elem = d.f32_out ? 4 : 2;
    for (int64_t i = 0; i < d.batch; ++i) {
      for (int64_t r = 0; r < d.m; ++r) {
        std::memset(static_cast<char*>(c) + (i * d.batch_stride_c + r * d.ldc) * elem, 0, d.n * elem);
      }
    }
    return;
  }
  if (!onednn_has_bf16()) return widened_matmul(d, a, b, c);
  if (!d.f32_out) {
    // The primitive with run-time dims writing bf16 allocates its f32 sums afresh on every
    // call, and a fresh block of 1 MiB or more is a fresh mapping (apps/malloc_settings.cc):
    // a page fault per 4 KiB, so it ran 2-20x slower than the same product written in f32
    // (Zen 4, 2 threads: 1024x512x8 1.0 vs 0.05 ms, 1024x4096x512 32 vs 12 ms). The sums
    // go to this thread's own buffer instead, kept for the next call up to 64 MiB, and are
    // rounded here, once, to nearest even as the primitive would.
    constexpr size_t kKeep = size_t{64} << 20;
    const int64_t rows = d.batch * d.m;
    const size_t floats = static_cast<size_t>(rows * d.n);
    std::unique_ptr<float[]> once;
    float* sums = nullptr;
    if (floats * sizeof(float) > kKeep) {
      once.reset(new float[floats]);
      sums = once.get();
    } else {
      sums = thread_scratch<float>(ScratchSlot::kMatmulSums, floats);
    }
    Bf16MatmulDesc wide = d;
    wide.f32_out = true;
    wide.ldc = d.n;
    wide.batch_stride_c = d.m * d.n;
    bf16_matmul(wide, a, b, sums);
    uint16_t* narrow = static_cast<uint16_t*>(c);
#pragma omp parallel for schedule(static) if (rows * d.n > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r / d.m, row = r % d.m;
      uint16_t* dst = narrow + i * d.batch_stride_c + row * d.ldc;
      const float* src = sums + r * d.n;
      for (int64_t col = 0; col < d.n; ++col) dst[col] = f32_to_bf16(src[col]);
    }
    return;
  }
  const dnnl::matmul& prim = primitive(d);
  const bool batched = d.batch > 1;
  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(cpu_engine());
  dnnl::memory src(md(batched, d.batch, d.m, d.k, d.trans_a, d.lda, d.batch_stride_a, dt::bf16, false), engine,
                   const_cast<uint16_t*>(a));
  dnnl::memory weights(md(batched, d.batch, d.k, d.n, d.trans_b, d.ldb, d.batch_stride_b, dt::bf16, false), engine,
                       const_cast<uint16_t*>(b));
  dnnl::memory dst(md(batched, d.batch, d.m, d.n, false, d.ldc, d.batch_stride_c, d.f32_out ? dt::f32 : dt::bf16, false),
                   engine, c);
  prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  stream.wait();
}

bool bf16_matmul_native() { return onednn_has_bf16(); }

int64_t bf16_matmul_primitives_created() { return created.load(std::memory_order_relaxed); }

}  // namespace kiln::backend::cpu
