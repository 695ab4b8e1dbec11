// Differential tests: every compiled program must equal the reference interpreter. Every
// op's registry examples run through the CPU backend (fused and unfused), plus whole
// programs from the frontend.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

std::string cache_dir() { return ::testing::TempDir() + "kiln_backend_cache"; }

std::vector<ir::Literal> args_for(const ir::Computation& c, const ops::OpExample& ex, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::Literal> args;
  for (int i = 0; i < c.num_params(); ++i) {
    const ir::Shape& s = c.param(i)->shape();
    auto [lo, hi] = i < static_cast<int>(ex.ranges.size()) ? ex.ranges[i]
                    : ir::is_floating(s.dtype())          ? std::pair<double, double>{-2.0, 2.0}
                                                          : std::pair<double, double>{0.0, 4.0};
    args.push_back(testing::random_literal(s, rng, lo, hi));
  }
  return args;
}

// Compares a compiled result with the interpreter's. The interpreter rounds each op's exact
// result once; generated code computes in the dtype (float math library, FMA contraction),
// so allow a few ulps of the dtype relative to the value's magnitude.
void expect_close(const Buffer& got, const ir::Literal& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double tol = got.shape().dtype() == ir::DType::kF64 ? 1e-12 : got.shape().dtype() == ir::DType::kBF16 ? 1e-2 : 1e-5;
  for (int64_t i = 0; i < want.shape().num_elements(); ++i) {
    double g = got.get(i), w = want.at(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << "[" << i << "]";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(g, w, tol * (1 + std::fabs(w))) << what << "[" << i << "]";
    }
  }
}

// Runs `exe` (compiled from `module`) on `literals` and expects every output close to the
// interpreter's.
void expect_equals_interpreter(const ir::Module& module, Executable& exe, const std::vector<ir::Literal>& literals,
                               const std::string& what) {
  auto want = interp::run(module, literals);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  std::vector<Buffer> buffers;
  for (const ir::Literal& l : literals) buffers.push_back(Buffer::from_literal(l));
  auto got = exe.run(buffers);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want->size()) << what;
  for (size_t i = 0; i < want->size(); ++i) expect_close((*got)[i], (*want)[i], fmt::format("{} output {}", what, i));
}

// A module parsed from IR text and compiled with the tests' kernel cache.
struct Compiled {
  std::unique_ptr<ir::Module> module;
  std::unique_ptr<Executable> exe;
};
// Fails the test (use under ASSERT_NO_FATAL_FAILURE) when `text` does not parse or compile.
void compile_text(const char* text, Compiled& out) {
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  CompileOptions options;
  options.cache_dir = cache_dir();
  auto exe = compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  out.module = std::move(*module);
  out.exe = std::move(*exe);
}

// Every kernel of `exe` is one of `fused` fused loops: no library kernel, no fallback.
void expect_only_fused_kernels(const Executable& exe, int fused) {
  EXPECT_EQ(exe.report().fused_kernels, fused);
  EXPECT_EQ(exe.report().library_kernels, 0);
  EXPECT_EQ(exe.report().fallback_kernels, 0);
}

class EveryOp : public ::testing::TestWithParam<std::tuple<ir::Opcode, bool>> {};

TEST_P(EveryOp, CompiledEqualsInterpreter) {
  auto [opcode, fuse] = GetParam();
  const ops::OpDef& def = ops::op_def(opcode);
  for (const auto& ex : def.examples) {
    auto module = ir::parse_module(ex.ir);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    CompileOptions options;
    options.cache_dir = cache_dir();
    options.fuse = fuse;
    options.verify_each = true;
    auto exe = compile_cpu(**module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string() << "\n" << ex.ir;
    for (uint64_t seed : {3, 4}) {
      expect_equals_interpreter(**module, **exe, args_for(*(*module)->entry(), ex, seed), std::string(def.name));
    }
  }
}

std::vector<std::tuple<ir::Opcode, bool>> all_cases() {
  std::vector<std::tuple<ir::Opcode, bool>> out;
  for (int i = 0; i < ir::kNumOpcodes; ++i) {
    for (bool fuse : {true, false}) out.emplace_back(static_cast<ir::Opcode>(i), fuse);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, EveryOp, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(ir::opcode_name(std::get<0>(info.param))) + (std::get<1>(info.param) ? "_fused" : "_unfused");
});

// Large reductions take the split paths of reduce_plan.h (full reductions, few rows, columns
// over many rows), fused behind an elementwise prologue and as native kernels, with a NaN
// that max and min must keep. One module holds every case, so one kernel library is built.
// The library pad kernel fills with the padding value by element size (1, 2, 4, 8 bytes):
// every dtype, a non-zero value, low/high/interior padding, compiled equal to the interpreter.
TEST(CpuBackend, PadFillsWithItsValueInEveryDtype) {
  for (const char* dtype : {"pred", "bf16", "s32", "f32", "f64"}) {
    std::string text = fmt::format(
        "module @p\nENTRY computation @main {{\n"
        "  %x = {0}[3,5] parameter(), index=0\n  %v = {0}[] parameter(), index=1\n"
        "  ROOT %p = {0}[8,13] pad(%x, %v), low={{1,2}}, high={{2,1}}, interior={{1,1}}\n}}\n",
        dtype);
    auto module = ir::parse_module(text);
    ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << text;
    std::mt19937_64 rng(11);
    std::vector<ir::Literal> args;
    for (int i = 0; i < 2; ++i) {
      args.push_back(testing::random_literal((*module)->entry()->param(i)->shape(), rng, 1.0, 3.0));
    }
    auto want = interp::run(**module, args);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    CompileOptions options;
    options.cache_dir = cache_dir();
    options.fuse = false;
    auto exe = compile_cpu(**module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    std::vector<Buffer> buffers;
    for (const auto& l : args) buffers.push_back(Buffer::from_literal(l));
    auto got = (*exe)->run(buffers);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ((*got)[0].to_literal().shape(), (*want)[0].shape()) << dtype;
    EXPECT_TRUE((*got)[0].to_literal() == (*want)[0]) << dtype << "\n  got:  " << (*got)[0].to_literal().to_string()
                                                     << "\n  want: " << (*want)[0].to_string();
    EXPECT_NE(args[1].at(0), 0) << dtype << ": the padding value should be non-zero";
  }
}

TEST(CpuBackend, LargeReductionsEqualInterpreter) {
  struct Case {
    std::string dims, reduced, kept;
  };
  const std::vector<Case> cases = {
      {"131101", "0", ""}, {"3,70001", "1", "3"}, {"9001,40", "0", "40"}, {"2,3000,17", "1", "2,17"}, {"4,5,6000", "1,2", "4"}};
  // A distinct prologue per reduction, so none is shared (a shared one would not fuse).
  const std::vector<std::pair<std::string, std::string>> ops = {
      {"reduce_sum", "mul(%x{0}, %x{0})"}, {"reduce_max", "neg(%x{0})"}, {"reduce_min", "abs(%x{0})"}};
  std::string params, body, results, shapes;
  for (size_t c = 0; c < cases.size(); ++c) {
    params += fmt::format("  %x{} = f32[{}] parameter(), index={}\n", c, cases[c].dims, c);
    for (size_t k = 0; k < ops.size(); ++k) {
      body += fmt::format("  %p{0}_{1} = f32[{2}] {3}\n", c, k, cases[c].dims, fmt::format(fmt::runtime(ops[k].second), c));
      body += fmt::format("  %r{0}_{1} = f32[{2}] {3}(%p{0}_{1}), dims={{{4}}}\n", c, k, cases[c].kept, ops[k].first,
                          cases[c].reduced);
      results += fmt::format("{}%r{}_{}", results.empty() ? "" : ", ", c, k);
      shapes += fmt::format("{}f32[{}]", shapes.empty() ? "" : ", ", cases[c].kept);
    }
  }
  std::string text = fmt::format("module @r\nENTRY computation @main {{\n{}{}  ROOT %t = ({}) tuple({})\n}}\n", params,
                                 body, shapes, results);
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << text;
  std::mt19937_64 rng(7);
  std::vector<ir::Literal> args;
  for (size_t c = 0; c < cases.size(); ++c) {
    args.push_back(testing::random_literal((*module)->entry()->param(c)->shape(), rng, -2, 2));
  }
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  // The same cases with a NaN in every input: the sums are NaN, max and min must keep it.
  std::vector<ir::Literal> nan_args = args;
  for (ir::Literal& x : nan_args) x.mutable_values()[x.shape().num_elements() / 2 + 1] = std::nan("");
  auto want_nan = interp::run(**module, nan_args);
  ASSERT_TRUE(want_nan.ok()) << want_nan.status().to_string();
  for (bool fuse : {true, false}) {
    CompileOptions options;
    options.cache_dir = cache_dir();
    options.fuse = fuse;
    auto exe = compile_cpu(**module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    if (fuse) EXPECT_EQ((*exe)->report().fused_kernels, static_cast<int64_t>(cases.size() * ops.size()));
    for (const auto* inputs : {&args, &nan_args}) {
      std::vector<Buffer> buffers;
      for (const auto& l : *inputs) buffers.push_back(Buffer::from_literal(l));
      auto got = (*exe)->run(buffers);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const auto& expected = inputs == &args ? *want : *want_nan;
      for (size_t i = 0; i < expected.size(); ++i) {
        const Case& c = cases[i / ops.size()];
        expect_close((*got)[i], expected[i],
                     fmt::format("{} over {{{}}} of [{}] fused={} nan={}", ops[i % ops.size()].first, c.reduced, c.dims,
                                 fuse, inputs != &args));
      }
    }
  }
}

TEST(CpuBackend, FusesElementwiseChainsAndCachesKernels) {
  const char* text = R"(module @chain
ENTRY computation @main {
  %x = f32[64,32] parameter(), index=0
  %w = f32[32,16] parameter(), index=1
  %half = f32[] constant(0.5)
  %h = f32[64,32] broadcast(%half), dims={}
  %a = f32[64,32] mul(%x, %h)
  %e = f32[64,32] exp(%a)
  %s = f32[64,32] add(%e, %x)
  %d = f32[64,16] dot_general(%s, %w), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %t = f32[64,16] tanh(%d)
  ROOT %r = f32[64] reduce_sum(%t), dims={1}
}
)";
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok());
  std::string dir = ::testing::TempDir() + "kiln_cache_fresh";
  std::filesystem::remove_all(dir);
  CompileOptions options;
  options.cache_dir = dir;
  auto first = compile_cpu(**module, options);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ((*first)->report().fused_kernels, 2);  // mul+exp+add, and tanh
  EXPECT_EQ((*first)->report().gemms, 1);
  EXPECT_EQ((*first)->report().fallback_kernels, 0);
  // Libraries built: the kernels are cut into equal chunks, one per core or a multiple of it,
  // so two kernels may come out as one library or two.
  EXPECT_GE((*first)->report().kernels_compiled, 1);
  EXPECT_LE((*first)->report().kernels_compiled, 2);
  auto second = compile_cpu(**module, options);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->report().kernels_compiled, 0);  // everything came from the cache
  std::mt19937_64 rng(5);
  std::vector<ir::Literal> literals = {testing::random_literal(ir::Shape(ir::DType::kF32, {64, 32}), rng, -1, 1),
                                       testing::random_literal(ir::Shape(ir::DType::kF32, {32, 16}), rng, -1, 1)};
  auto want = interp::run(**module, literals);
  auto got = (*second)->run(std::vector<Buffer>{Buffer::from_literal(literals[0]), Buffer::from_literal(literals[1])});
  ASSERT_TRUE(got.ok());
  expect_close((*got)[0], (*want)[0], "chain");
}

// The loss gradient's one-hot: scatter_add of one update per row into zeros, then an
// elementwise reader. Simplification turns it into select(iota == idx, u, 0), and the iota,
// the compare and the select fuse into the reader: one generated kernel, no fill and no
// scatter. Indices out of range (-2..-1 and 7..8 for 7 columns) add nothing either way.
TEST(CpuBackend, AOneHotScatterBecomesOneFusedKernel) {
  const char* text = R"(module @one_hot
ENTRY computation @main {
  %idx = s32[4,5,1] parameter(), index=0
  %u = f32[4,5,1] parameter(), index=1
  %p = f32[4,5,7] parameter(), index=2
  %zero = f32[] constant(0)
  %z = f32[4,5,7] broadcast(%zero), dims={}
  %s = f32[4,5,7] scatter_add(%z, %idx, %u), axis=2, batch_dims=2
  ROOT %r = f32[4,5,7] add(%s, %p)
}
)";
  Compiled c;
  ASSERT_NO_FATAL_FAILURE(compile_text(text, c));
  expect_only_fused_kernels(*c.exe, 1);  // no broadcast fill, no scatter_add
  std::mt19937_64 rng(11);
  for (int draw = 0; draw < 3; ++draw) {
    std::vector<ir::Literal> literals = {testing::random_literal(ir::Shape(ir::DType::kS32, {4, 5, 1}), rng, -2, 8),
                                         testing::random_literal(ir::Shape(ir::DType::kF32, {4, 5, 1}), rng, -1, 1),
                                         testing::random_literal(ir::Shape(ir::DType::kF32, {4, 5, 7}), rng, -1, 1)};
    expect_equals_interpreter(*c.module, *c.exe, literals, "one-hot");
  }
}

// Slices read inside loop fusions at their windows: RoPE's halves along the last dim (offset
// into each row), a window along a middle dim, and a strided slice. No slice kernel runs,
// and the results equal the interpreter's.
TEST(CpuBackend, FusedSlicesReadTheirWindows) {
  const char* text = R"(module @windows
ENTRY computation @main {
  %x = f32[3,5,8] parameter(), index=0
  %c = f32[3,5,4] parameter(), index=1
  %a = f32[3,5,4] slice(%x), limit={3,5,4}, start={0,0,0}
  %b = f32[3,5,4] slice(%x), limit={3,5,8}, start={0,0,4}
  %ac = f32[3,5,4] mul(%a, %c)
  %r1 = f32[3,5,4] sub(%ac, %b)
  %mid = f32[3,2,4] slice(%x), limit={3,4,8}, start={0,2,4}
  %r2 = f32[3,2,4] exp(%mid)
  %odd = f32[2,3,4] slice(%x), limit={3,5,8}, start={1,0,1}, strides={1,2,2}
  %r3 = f32[2,3,4] neg(%odd)
  ROOT %out = (f32[3,5,4], f32[3,2,4], f32[2,3,4]) tuple(%r1, %r2, %r3)
}
)";
  Compiled c;
  ASSERT_NO_FATAL_FAILURE(compile_text(text, c));
  expect_only_fused_kernels(*c.exe, 3);  // no slice kernel
  std::mt19937_64 rng(13);
  std::vector<ir::Literal> literals = {testing::random_literal(ir::Shape(ir::DType::kF32, {3, 5, 8}), rng, -1, 1),
                                       testing::random_literal(ir::Shape(ir::DType::kF32, {3, 5, 4}), rng, -1, 1)};
  expect_equals_interpreter(*c.module, *c.exe, literals, "slice");
}

// Pads read inside loop fusions as windows: RoPE's backward (two halves padded to the full
// width, low and high, and added), a pad of a middle dim on both sides with a value that is
// a parameter, and a bf16 pad. No pad kernel runs, and the results equal the interpreter's.
TEST(CpuBackend, FusedPadsReadTheirWindows) {
  const char* text = R"(module @pads
ENTRY computation @main {
  %ga = f32[3,5,4] parameter(), index=0
  %gb = f32[3,5,4] parameter(), index=1
  %v = f32[] parameter(), index=2
  %h = bf16[3,2,4] parameter(), index=3
  %zero = f32[] constant(0)
  %pa = f32[3,5,8] pad(%ga, %zero), high={0,0,0}, low={0,0,4}
  %pb = f32[3,5,8] pad(%gb, %zero), high={0,0,4}, low={0,0,0}
  %sum = f32[3,5,8] add(%pa, %pb)
  %mid = f32[3,9,4] pad(%ga, %v), high={0,3,0}, low={0,1,0}
  %r2 = f32[3,9,4] mul(%mid, %mid)
  %hz = bf16[] constant(0.5)
  %hp = bf16[3,4,6] pad(%h, %hz), high={0,1,1}, low={0,1,1}
  %r3 = bf16[3,4,6] neg(%hp)
  ROOT %out = (f32[3,5,8], f32[3,9,4], bf16[3,4,6]) tuple(%sum, %r2, %r3)
}
)";
  Compiled c;
  ASSERT_NO_FATAL_FAILURE(compile_text(text, c));
  expect_only_fused_kernels(*c.exe, 3);  // no pad kernel
  std::mt19937_64 rng(17);
  std::vector<ir::Literal> literals = {testing::random_literal(ir::Shape(ir::DType::kF32, {3, 5, 4}), rng, -1, 1),
                                       testing::random_literal(ir::Shape(ir::DType::kF32, {3, 5, 4}), rng, -1, 1),
                                       testing::random_literal(ir::Shape(ir::DType::kF32, {}), rng, -1, 1),
                                       testing::random_literal(ir::Shape(ir::DType::kBF16, {3, 2, 4}), rng, -1, 1)};
  expect_equals_interpreter(*c.module, *c.exe, literals, "pad");
}

}  // namespace
}  // namespace kiln::backend
