// The library data-movement and reduction kernels on shapes above their parallel thresholds
// (the gpt-oss-small step's gathers, scatter_adds, transposes, slices, pads, fills and bf16
// bias-gradient reductions), compiled
// unfused and run at 1, 2 and 3 OpenMP threads: every run must equal the interpreter bit
// for bit. Float inputs are multiples of 1/16 in [-4, 4] (exact in bf16), so f32 and bf16
// sums with duplicate indices are exact in any order and the interpreter's once-rounded
// double sum is the same value; f64 inputs are arbitrary, since the interpreter sums
// doubles in index order too.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

std::string cache_dir() { return ::testing::TempDir() + "kiln_library_kernels_cache"; }

// Restores the OpenMP thread count a test changed.
struct ThreadCount {
  int saved = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// Runs `text` (one entry computation) through the interpreter and the unfused CPU backend at
// 1, 2 and 3 threads; index parameters are drawn from [index_lo, index_hi).
void expect_bit_equal(const std::string& what, const std::string& text, int64_t index_lo, int64_t index_hi) {
  SCOPED_TRACE(what);
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << text;
  std::mt19937_64 rng(17);
  std::vector<ir::Literal> args;
  for (int i = 0; i < (*module)->entry()->num_params(); ++i) {
    const ir::Shape& s = (*module)->entry()->param(i)->shape();
    if (ir::is_floating(s.dtype())) {
      ir::Literal x = testing::random_literal(s, rng, -4.0, 4.0);
      if (s.dtype() != ir::DType::kF64) {
        for (double& v : x.mutable_values()) v = std::round(v * 16) / 16;
      }
      args.push_back(std::move(x));
    } else {
      args.push_back(testing::random_literal(s, rng, static_cast<double>(index_lo), static_cast<double>(index_hi)));
    }
  }
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ThreadCount restore;
  for (int threads : {1, 2, 3}) {
    // A fresh executable per run: a second run of one executable would find the first
    // run's result in its planned buffers, and a kernel that skipped rows would pass.
    CompileOptions options;
    options.cache_dir = cache_dir();
    options.fuse = false;  // the library kernels themselves, not fusions around them
    auto exe = compile_cpu(**module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    omp_set_num_threads(threads);
    std::vector<Buffer> buffers;
    for (const auto& l : args) buffers.push_back(Buffer::from_literal(l));
    auto got = (*exe)->run(buffers);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) {
      ir::Literal g = (*got)[i].to_literal();
      ASSERT_EQ(g.shape(), (*want)[i].shape());
      int64_t first_diff = -1;
      for (int64_t e = 0; e < g.shape().num_elements() && first_diff < 0; ++e) {
        if (g.at(e) != (*want)[i].at(e)) first_diff = e;
      }
      EXPECT_EQ(first_diff, -1) << "threads=" << threads << " output " << i << " differs at element " << first_diff
                                << ": got " << g.at(first_diff) << ", want " << (*want)[i].at(first_diff);
    }
  }
}

std::string one_op(const std::string& params, const std::string& root) {
  return fmt::format("module @m\nENTRY computation @main {{\n{}  ROOT {}\n}}\n", params, root);
}

// The MoE combine and its bf16 twin: 2048 update rows into 256 (batch = pre = 1, so the rows
// are cut into blocks), about 8 per row so that every row is hit, some out of range (dropped).
TEST(LibraryKernels, ScatterAddRowBlocksEqualInterpreter) {
  for (const char* t : {"f32", "bf16", "f64"}) {
    expect_bit_equal(fmt::format("{} combine", t),
                     one_op(fmt::format("  %x = {0}[256,96] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n"
                                        "  %u = {0}[2048,96] parameter(), index=2\n", t),
                            fmt::format("%s = {}[256,96] scatter_add(%x, %i, %u), axis=0", t)),
                     -5, 262);
  }
  // Few experts, many rows each (the expert bias gradient): blocks of one or two rows.
  expect_bit_equal("bf16 expert rows",
                   one_op("  %x = bf16[3,512] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n"
                          "  %u = bf16[2048,512] parameter(), index=2\n",
                          "%s = bf16[3,512] scatter_add(%x, %i, %u), axis=0"),
                   -1, 4);
  // Rows wide enough that a block's f32 sum is taken in several pieces (bf16 only).
  expect_bit_equal("bf16 wide rows",
                   one_op("  %x = bf16[64,2048] parameter(), index=0\n  %i = s32[600] parameter(), index=1\n"
                          "  %u = bf16[600,2048] parameter(), index=2\n",
                          "%s = bf16[64,2048] scatter_add(%x, %i, %u), axis=0"),
                   -2, 66);
  // Two slices (pre = 2) with more threads than slices at 3 threads.
  expect_bit_equal("f32 pre=2",
                   one_op("  %x = f32[2,300,64] parameter(), index=0\n  %i = u32[1800] parameter(), index=1\n"
                          "  %u = f32[2,1800,64] parameter(), index=2\n",
                          "%s = f32[2,300,64] scatter_add(%x, %i, %u), axis=1"),
                   0, 310);
}

// The loss gradient's one-hot: one index per (batch, position) slice of a wide row.
TEST(LibraryKernels, ScatterAddManySlicesEqualInterpreter) {
  for (const char* t : {"f32", "bf16"}) {
    expect_bit_equal(fmt::format("{} one-hot", t),
                     one_op(fmt::format("  %x = {0}[2,128,1000] parameter(), index=0\n  %i = s32[2,128,1] parameter(), index=1\n"
                                        "  %u = {0}[2,128,1] parameter(), index=2\n", t),
                            fmt::format("%s = {}[2,128,1000] scatter_add(%x, %i, %u), axis=2, batch_dims=2", t)),
                     -2, 1002);
  }
}

TEST(LibraryKernels, GatherRowsEqualInterpreter) {
  for (const char* t : {"f32", "bf16"}) {
    expect_bit_equal(fmt::format("{} rows", t),
                     one_op(fmt::format("  %x = {0}[1024,96] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n", t),
                            fmt::format("%g = {}[2048,96] gather(%x, %i), axis=0", t)),
                     -5, 1030);  // out of range clamps
  }
  expect_bit_equal("f32 batch_dims=1",
                   one_op("  %x = f32[4,300,128] parameter(), index=0\n  %i = s32[4,400] parameter(), index=1\n",
                          "%g = f32[4,400,128] gather(%x, %i), axis=1, batch_dims=1"),
                   0, 300);
}

// Transposes take the tiled path when the result's last dim is strided in the input;
// dims that are not multiples of the tile check the edges.
TEST(LibraryKernels, TransposesEqualInterpreter) {
  for (const char* t : {"f32", "bf16"}) {
    expect_bit_equal(fmt::format("{} [512,8,64] -> [8,64,512]", t),
                     one_op(fmt::format("  %x = {}[512,8,64] parameter(), index=0\n", t),
                            fmt::format("%t = {}[8,64,512] transpose(%x), perm={{1,2,0}}", t)),
                     0, 1);
    expect_bit_equal(fmt::format("{} [8,64,512] -> [512,8,64]", t),
                     one_op(fmt::format("  %x = {}[8,64,512] parameter(), index=0\n", t),
                            fmt::format("%t = {}[512,8,64] transpose(%x), perm={{2,0,1}}", t)),
                     0, 1);
  }
  expect_bit_equal("f32 [333,250] -> [250,333]",
                   one_op("  %x = f32[333,250] parameter(), index=0\n", "%t = f32[250,333] transpose(%x), perm={1,0}"), 0, 1);
  expect_bit_equal("f64 [2,5,3,97,70] -> [3,70,2,97,5]",
                   one_op("  %x = f64[2,5,3,97,70] parameter(), index=0\n",
                          "%t = f64[3,70,2,97,5] transpose(%x), perm={2,4,0,3,1}"),
                   0, 1);
}

// Slices, concatenation, pads and broadcasts of the step's [2,512,8,*] shapes (RoPE halves).
TEST(LibraryKernels, SlicesConcatenatesPadsAndBroadcastsEqualInterpreter) {
  expect_bit_equal("slice",
                   one_op("  %x = f32[2,512,8,64] parameter(), index=0\n",
                          "%s = f32[2,512,8,32] slice(%x), start={0,0,0,32}, limit={2,512,8,64}"),
                   0, 1);
  expect_bit_equal("strided slice",
                   one_op("  %x = bf16[2,512,8,64] parameter(), index=0\n",
                          "%s = bf16[1,256,8,21] slice(%x), start={1,0,0,1}, limit={2,512,8,64}, strides={1,2,1,3}"),
                   0, 1);
  expect_bit_equal("concatenate",
                   one_op("  %a = f32[2,512,8,32] parameter(), index=0\n  %b = f32[2,512,8,32] parameter(), index=1\n",
                          "%c = f32[2,512,8,64] concatenate(%a, %b), dim=3"),
                   0, 1);
  expect_bit_equal("pad",
                   one_op("  %x = f32[2,512,8,32] parameter(), index=0\n  %v = f32[] parameter(), index=1\n",
                          "%p = f32[2,512,8,64] pad(%x, %v), low={0,0,0,32}, high={0,0,0,0}"),
                   0, 1);
  expect_bit_equal("broadcast scalar",
                   one_op("  %x = f32[] parameter(), index=0\n", "%b = f32[2,256,1000] broadcast(%x), dims={}"), 0, 1);
  expect_bit_equal("broadcast rows",
                   one_op("  %x = bf16[1000] parameter(), index=0\n", "%b = bf16[2,256,1000] broadcast(%x), dims={2}"), 0, 1);
  expect_bit_equal("broadcast columns",
                   one_op("  %x = f32[512] parameter(), index=0\n", "%b = f32[512,300] broadcast(%x), dims={0}"), 0, 1);
  expect_bit_equal("iota", one_op("", "%i = s32[2,512,2,80] iota(), dim=2"), 0, 1);
}

// bf16 reductions over a contiguous block of dims read the bf16 input directly; {0,2} is not
// contiguous and still goes through the widened f32 copy. Sums of multiples of 1/16 are
// exact, so the once-rounded result equals the interpreter's.
TEST(LibraryKernels, Bf16ReductionsEqualInterpreter) {
  struct Case {
    const char* op;
    const char* in;
    const char* out;
    const char* dims;
  };
  for (const Case& c : {Case{"reduce_sum", "2,512,2,64", "2,64", "0,1"}, Case{"reduce_sum", "2,512,512", "512", "0,1"},
                        Case{"reduce_max", "4,300,70", "4", "1,2"}, Case{"reduce_min", "6,40000", "6", "1"},
                        Case{"reduce_sum", "3,9000", "3", "1"}, Case{"reduce_sum", "20,30,300", "30", "0,2"}}) {
    expect_bit_equal(fmt::format("{} of bf16[{}] over {{{}}}", c.op, c.in, c.dims),
                     one_op(fmt::format("  %x = bf16[{}] parameter(), index=0\n", c.in),
                            fmt::format("%r = bf16[{}] {}(%x), dims={{{}}}", c.out, c.op, c.dims)),
                     0, 1);
  }
}

}  // namespace
}  // namespace kiln::backend
