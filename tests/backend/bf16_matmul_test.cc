// bf16 products on oneDNN's bf16 matmul (backend/cpu/bf16_matmul, gemm.cc,
// grouped_matmul_kernels.cc) against the reference interpreter, on every operand layout
// dot_general folds (plain, transposed, batched, permuted by a copy), f32 and bf16 results,
// and grouped matmuls over tiles with empty groups and padding rows.
//
// Tolerances: the interpreter sums the exact products in double and rounds once to the
// result dtype. The kernels form the same exact products (bf16 x bf16 fits in f32) and
// accumulate them in f32 in another order: for f32 results the difference is a few f32
// ulps of the sum of |products| (K <= 520 terms of magnitude <= 1 here: < 1e-4 absolute);
// a bf16 result may then round to the neighbouring bf16 value (one ulp = 2^-7 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/backend/backend.h"
#include "kiln/backend/cpu/gemm/bf16_matmul.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

using cpu::bf16_matmul;
using cpu::bf16_matmul_primitives_created;
using cpu::Bf16MatmulDesc;

constexpr double kF32Tol = 1e-4;          // absolute, for |products| sums up to a few hundred
constexpr double kBf16Rel = 1.0 / 128.0;  // one bf16 ulp

void expect_matches_interpreter(const std::string& text, uint64_t seed) {
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << text;
  CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_bf16_matmul_cache";
  auto exe = compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_kernels, 0) << text;
  std::mt19937_64 rng(seed);
  std::vector<ir::Literal> args;
  std::vector<Buffer> buffers;
  const ir::Computation& c = *(*module)->entry();
  for (int i = 0; i < c.num_params(); ++i) {
    args.push_back(testing::random_literal(c.param(i)->shape(), rng, -1.0, 1.0));
    buffers.push_back(Buffer::from_literal(args.back()));
  }
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = (*exe)->run(buffers);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want->size());
  for (size_t o = 0; o < want->size(); ++o) {
    const ir::Literal& w = (*want)[o];
    const Buffer& g = (*got)[o];
    ASSERT_EQ(g.shape(), w.shape());
    const bool bf16 = w.shape().dtype() == ir::DType::kBF16;
    for (int64_t i = 0; i < w.shape().num_elements(); ++i) {
      const double tol = kF32Tol + (bf16 ? kBf16Rel * std::fabs(w.at(i)) : 0.0);
      ASSERT_NEAR(g.get(i), w.at(i), tol) << "output " << o << " [" << i << "] of\n" << text;
    }
  }
}

std::string dot_module(const std::string& lhs, const std::string& rhs, const std::string& out,
                       const std::string& attrs) {
  return "module @t\n\nENTRY computation @main {\n  %a = " + lhs + " parameter(), index=0\n  %b = " + rhs +
         " parameter(), index=1\n  ROOT %d = " + out + " dot_general(%a, %b), " + attrs + "\n}\n";
}

TEST(Bf16Matmul, DotGeneralEqualsInterpreterOnEveryLayout) {
  const std::string mm = "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}";
  for (const char* out : {"f32", "bf16"}) {
    const std::string o = out;
    // plain [M, K] @ [K, N], sizes off every vector width
    expect_matches_interpreter(dot_module("bf16[67,130]", "bf16[130,45]", o + "[67,45]", mm), 1);
    // lhs stored transposed ([K, M]), rhs transposed ([N, K])
    expect_matches_interpreter(dot_module("bf16[130,67]", "bf16[130,45]", o + "[67,45]",
                                          "lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}"),
                               2);
    expect_matches_interpreter(dot_module("bf16[67,130]", "bf16[45,130]", o + "[67,45]",
                                          "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}"),
                               3);
    // batched attention scores: [B, T, Dh] x [B, S, Dh] -> [B, T, S]
    expect_matches_interpreter(dot_module("bf16[3,33,64]", "bf16[3,40,64]", o + "[3,33,40]",
                                          "lhs_batch={0}, lhs_contract={2}, rhs_batch={0}, rhs_contract={2}"),
                               4);
    // batch dim in the middle of the lhs: a strided copy first
    expect_matches_interpreter(dot_module("bf16[33,3,64]", "bf16[3,64,20]", o + "[3,33,20]",
                                          "lhs_batch={1}, lhs_contract={2}, rhs_batch={0}, rhs_contract={1}"),
                               5);
    // the model's projections: [B, T, D] x [D, H, Dh], two free rhs dims
    expect_matches_interpreter(dot_module("bf16[2,17,96]", "bf16[96,4,16]", o + "[2,17,4,16]",
                                          "lhs_batch={}, lhs_contract={2}, rhs_batch={}, rhs_contract={0}"),
                               6);
  }
}

TEST(Bf16Matmul, PrimitivesAreReusedAcrossShapes) {
  // One run-time-dims primitive per layout serves every shape: products of new shapes in
  // a layout already seen create nothing.
  std::vector<uint16_t> a(64 * 64, 0x3f80), b(64 * 64, 0x4000);  // ones and twos
  std::vector<float> c(64 * 64);
  Bf16MatmulDesc d;
  d.m = 8, d.n = 8, d.k = 8, d.lda = 8, d.ldb = 8, d.ldc = 8;
  bf16_matmul(d, a.data(), b.data(), c.data());
  const int64_t before = bf16_matmul_primitives_created();
  for (int64_t m : {1, 5, 64}) {
    for (int64_t k : {3, 64}) {
      d.m = m, d.n = 64 - m + 1, d.k = k, d.lda = k, d.ldb = d.n, d.ldc = d.n;
      bf16_matmul(d, a.data(), b.data(), c.data());
      EXPECT_EQ(c[0], 2.0f * k);
      EXPECT_EQ(c[(m - 1) * d.ldc + d.n - 1], 2.0f * k);
    }
  }
  EXPECT_EQ(bf16_matmul_primitives_created(), before);
}

TEST(Bf16Matmul, StridedRowsAndZeroDepth) {
  // Leading dims wider than the rows read (a tile of a larger matrix); k == 0 writes zeros.
  const int64_t M = 5, N = 3, K = 4, ld = 10;
  std::vector<uint16_t> a(M * ld), b(K * ld);
  std::vector<float> fa(M * ld), fb(K * ld);
  std::mt19937_64 rng(7);
  auto fill = [&](std::vector<uint16_t>& bits, std::vector<float>& f) {
    for (size_t i = 0; i < bits.size(); ++i) {
      f[i] = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 4;  // exact in bf16
      bits[i] = ir::float_to_bf16_bits(f[i]);
    }
  };
  fill(a, fa), fill(b, fb);
  std::vector<uint16_t> c(M * ld, 0xffff);
  Bf16MatmulDesc d;
  d.m = M, d.n = N, d.k = K, d.lda = ld, d.ldb = ld, d.ldc = ld, d.f32_out = false;
  bf16_matmul(d, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < ld; ++j) {
      if (j >= N) {
        EXPECT_EQ(c[i * ld + j], 0xffff) << "wrote outside the tile at " << i << "," << j;
        continue;
      }
      float want = 0;
      for (int64_t k = 0; k < K; ++k) want += fa[i * ld + k] * fb[k * ld + j];
      EXPECT_EQ(ir::bf16_bits_to_float(c[i * ld + j]), want) << i << "," << j;  // small exact sums
    }
  }
  d.k = 0;
  bf16_matmul(d, a.data(), b.data(), c.data());
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[(M - 1) * ld + N - 1], 0);
  EXPECT_EQ(c[N], 0xffff);
}

std::string gmm_module(int64_t M, int64_t K, int64_t N, const std::vector<int>& sizes, bool transpose,
                       const std::string& out) {
  std::string s = "{";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  s += "}";
  const std::string G = std::to_string(sizes.size()), m = std::to_string(M), k = std::to_string(K),
                    n = std::to_string(N);
  return "module @t\n\nENTRY computation @main {\n"
         "  %x = bf16[" + m + "," + k + "] parameter(), index=0\n"
         "  %w = bf16[" + G + "," + (transpose ? n + "," + k : k + "," + n) + "] parameter(), index=1\n"
         "  %dy = bf16[" + m + "," + n + "] parameter(), index=2\n"
         "  %s = s32[" + G + "] constant(" + s + ")\n"
         "  %y = " + out + "[" + m + "," + n + "] grouped_matmul(%x, %w, %s), transpose_rhs=" + (transpose ? "1" : "0") + "\n"
         "  %gw = " + out + "[" + G + "," + k + "," + n + "] grouped_matmul_weight_grad(%x, %dy, %s)\n"
         "  ROOT %r = (" + out + "[" + m + "," + n + "], " + out + "[" + G + "," + k + "," + n + "]) tuple(%y, %gw)\n}\n";
}

TEST(Bf16Matmul, GroupedMatmulsEqualInterpreterAcrossTiles) {
  for (const char* out : {"bf16", "f32"}) {
    // Groups larger than a 256-row tile, empty groups, padding rows, N and K over a tile.
    expect_matches_interpreter(gmm_module(700, 300, 520, {0, 300, 1, 290, 0}, false, out), 11);
    expect_matches_interpreter(gmm_module(700, 300, 520, {0, 300, 1, 290, 0}, true, out), 12);
    // One group holds every row; sizes past M cut the last group.
    expect_matches_interpreter(gmm_module(600, 64, 72, {0, 0, 600}, false, out), 13);
    expect_matches_interpreter(gmm_module(300, 40, 40, {200, 200}, true, out), 14);
    // The bf16 kernels' own cuts: a 900-row group in three equal row parts, K over 512 (the
    // weight gradient's block cut both ways), and one small group whose output columns are
    // split further so that there are enough tiles.
    expect_matches_interpreter(gmm_module(1000, 520, 200, {0, 900, 100}, false, out), 15);
    expect_matches_interpreter(gmm_module(100, 64, 256, {100}, true, out), 16);
  }
}

// Expert-parallel (batched) form: P = 4 entries of M = 300 rows over E = 4 experts in blocks
// of Gl = 2, so entries 0 and 2 share experts 0-1 and 1 and 3 share 2-3 (the weight gradient
// adds the second entry of each block onto the first); groups over a 256-row tile, empty
// groups, padding rows, and sizes past M.
std::string batched_gmm_module(bool transpose, const std::string& out) {
  const std::string w = transpose ? "bf16[4,72,40]" : "bf16[4,40,72]";
  return "module @t\n\nENTRY computation @main {\n"
         "  %x = bf16[4,300,40] parameter(), index=0\n"
         "  %w = " + w + " parameter(), index=1\n"
         "  %dy = bf16[4,300,72] parameter(), index=2\n"
         "  %s = s32[4,2] constant({270, 20, 0, 299, 5, 0, 200, 400})\n"
         "  %y = " + out + "[4,300,72] grouped_matmul(%x, %w, %s), transpose_rhs=" + (transpose ? "1" : "0") + "\n"
         "  %gw = " + out + "[4,40,72] grouped_matmul_weight_grad(%x, %dy, %s), num_groups=4\n"
         "  ROOT %r = (" + out + "[4,300,72], " + out + "[4,40,72]) tuple(%y, %gw)\n}\n";
}

// One entry per block (P = 2 = E / Gl, as without expert parallelism): the weight gradient's
// tiles are written straight into the result, with no f32 accumulator.
std::string one_entry_per_block_module(const std::string& out) {
  return "module @t\n\nENTRY computation @main {\n"
         "  %x = bf16[2,300,40] parameter(), index=0\n"
         "  %dy = bf16[2,300,72] parameter(), index=1\n"
         "  %s = s32[2,2] constant({270, 20, 0, 299})\n"
         "  ROOT %gw = " + out + "[4,40,72] grouped_matmul_weight_grad(%x, %dy, %s), num_groups=4\n}\n";
}

TEST(Bf16Matmul, BatchedGroupedMatmulsEqualInterpreter) {
  for (const char* out : {"bf16", "f32"}) {
    expect_matches_interpreter(batched_gmm_module(false, out), 21);
    expect_matches_interpreter(batched_gmm_module(true, out), 22);
    expect_matches_interpreter(one_entry_per_block_module(out), 23);
  }
}

TEST(Bf16Matmul, Bf16ReductionsAndScatterAddRunNatively) {
  // The bf16 gradients of biases (reduce_sum) and of gathers (scatter_add) run natively
  // instead of on the reference fallback (reductions on the f32 kernels through widening,
  // scatter_add summing the bf16 update rows into an f32 copy of the operand); reductions
  // over a contiguous block and over a permuted set of dims, repeated scatter indices, on
  // the leading axis and on an inner one.
  expect_matches_interpreter(
      "module @t\n\nENTRY computation @main {\n"
      "  %x = bf16[6,5,40] parameter(), index=0\n"
      "  %s = bf16[40] reduce_sum(%x), dims={0,1}\n"
      "  %m = bf16[5] reduce_max(%x), dims={0,2}\n"
      "  %n = bf16[6,5] reduce_min(%x), dims={2}\n"
      "  %z = bf16[4,40] parameter(), index=1\n"
      "  %u = bf16[6,40] parameter(), index=2\n"
      "  %i = s32[6] constant({3, 0, 3, 1, 3, 2})\n"
      "  %a = bf16[4,40] scatter_add(%z, %i, %u), axis=0, batch_dims=0\n"
      "  %y = bf16[3,4,8] parameter(), index=3\n"
      "  %v = bf16[3,6,8] parameter(), index=4\n"
      "  %b = bf16[3,4,8] scatter_add(%y, %i, %v), axis=1, batch_dims=0\n"
      "  ROOT %r = (bf16[40], bf16[5], bf16[6,5], bf16[4,40], bf16[3,4,8]) tuple(%s, %m, %n, %a, %b)\n}\n",
      21);
}

}  // namespace
}  // namespace kiln::backend
