// The native sort, top-k and s32 reduction / scatter_add kernels (backend/cpu/
// sort_kernels.cc, integer_kernels.cc) against the reference interpreter, bit for bit: the
// keys have many ties (stability and the lower-index rule decide the order), NaNs and
// infinities, bf16 and f64 and s32 operands, rows long enough to run on threads; and the
// compiled programs use no reference fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

std::string cache_dir() { return ::testing::TempDir() + "kiln_sort_integer_cache"; }

// Compiles `ir` unfused (each op its own kernel), runs it and the interpreter on `args`,
// and requires equal bits (NaN for NaN) in every output.
void check_exact(const std::string& ir, const std::vector<ir::Literal>& args) {
  auto module = ir::parse_module(ir);
  ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << ir;
  CompileOptions options;
  options.cache_dir = cache_dir();
  options.fuse = false;
  auto exe = compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_kernels, 0) << ir;
  std::vector<Buffer> buffers;
  for (const auto& l : args) buffers.push_back(Buffer::from_literal(l));
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = (*exe)->run(buffers);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want->size());
  for (size_t o = 0; o < want->size(); ++o) {
    const Buffer& g = (*got)[o];
    const ir::Literal& w = (*want)[o];
    ASSERT_EQ(g.shape(), w.shape()) << "output " << o;
    int mismatches = 0;
    for (int64_t i = 0; i < w.shape().num_elements() && mismatches < 5; ++i) {
      const double gv = g.get(i), wv = w.at(i);
      const bool same = (std::isnan(gv) && std::isnan(wv)) || gv == wv;
      if (!same) ++mismatches;
      EXPECT_TRUE(same) << "output " << o << "[" << i << "]: got " << gv << ", want " << wv << "\n" << ir;
    }
  }
}

std::string ordering_program(const std::string& x, const std::string& values, const std::string& op) {
  const std::string indices = "s32" + values.substr(values.find('['));
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %t = ({}, {}) {}\n"
      "  %v = {} get_tuple_element(%t), index=0\n"
      "  %i = {} get_tuple_element(%t), index=1\n"
      "  ROOT %r = ({}, {}) tuple(%v, %i)\n}}\n",
      x, values, indices, op, values, indices, values, indices);
}

// Integers in [0, levels) as keys of the given dtype: many ties per row.
ir::Literal tied(const ir::Shape& s, int levels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return testing::random_literal(s, rng, 0.0, static_cast<double>(levels));
}

// Tied keys with NaN, +inf and -inf sprinkled in (floating dtypes only).
ir::Literal tied_with_specials(const ir::Shape& s, int levels, uint64_t seed) {
  ir::Literal l = tied(s, levels, seed);
  std::vector<double> v = l.values();
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = specials[(i / 7) % 3];
  return ir::Literal(s, std::move(v));
}

TEST(SortKernelTest, StableAscendingAndDescendingOnTiedKeysOfEveryDtype) {
  for (const char* dtype : {"f32", "f64", "bf16", "s32"}) {
    for (int descending : {0, 1}) {
      const std::string shape = fmt::format("{}[5,37]", dtype);
      const std::string ir = ordering_program(shape, shape, fmt::format("sort(%x), descending={}", descending));
      ir::Shape s = ir::parse_module(ir).value()->entry()->param(0)->shape();
      const bool floating = std::string(dtype) != "s32";
      SCOPED_TRACE(ir);
      check_exact(ir, {floating ? tied_with_specials(s, 5, 11) : tied(s, 5, 11)});
    }
  }
}

TEST(SortKernelTest, OneRowAndManyRowsOnThreads) {
  // The MoE's shape: one shard's (token, slot) pairs by expert, s32 [2048]; and many rows.
  for (const char* shape : {"s32[2048]", "s32[4,1024]", "f32[600,64]"}) {
    const std::string ir = ordering_program(shape, shape, "sort(%x), descending=0");
    ir::Shape s = ir::parse_module(ir).value()->entry()->param(0)->shape();
    SCOPED_TRACE(ir);
    check_exact(ir, {tied(s, 16, 5)});
  }
}

TEST(TopKKernelTest, TiesGoToTheLowerIndexForEveryDtype) {
  for (const char* dtype : {"f32", "f64", "bf16", "s32"}) {
    for (int k : {1, 2, 4, 9}) {
      const std::string ir = ordering_program(fmt::format("{}[6,9]", dtype), fmt::format("{}[6,{}]", dtype, k),
                                              fmt::format("topk(%x), k={}", k));
      ir::Shape s = ir::parse_module(ir).value()->entry()->param(0)->shape();
      const bool floating = std::string(dtype) != "s32";
      SCOPED_TRACE(ir);
      check_exact(ir, {floating ? tied_with_specials(s, 4, 7 + k) : tied(s, 4, 7 + k)});
    }
  }
}

TEST(TopKKernelTest, RouterShapeOnThreads) {
  // top-2 of 32 experts for 2 x 512 tokens, distinct random logits.
  const std::string ir = ordering_program("f32[2,512,32]", "f32[2,512,2]", "topk(%x), k=2");
  ir::Shape s = ir::parse_module(ir).value()->entry()->param(0)->shape();
  std::mt19937_64 rng(3);
  check_exact(ir, {testing::random_literal(s, rng, -3.0, 3.0)});
}

std::string unary_program(const std::string& x, const std::string& result, const std::string& op) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  ROOT %r = {} {}\n}}\n",
      x, result, op);
}

TEST(IntegerKernelTest, S32ReductionsOverAnyDims) {
  struct Case {
    const char* result;
    const char* dims;
  };
  for (const char* op : {"reduce_sum", "reduce_max", "reduce_min"}) {
    for (const Case& c : {Case{"s32[3,5]", "{1}"}, Case{"s32[4]", "{0,2}"}, Case{"s32[]", "{0,1,2}"},
                          Case{"s32[3,4]", "{2}"}, Case{"s32[4,5]", "{0}"}}) {
      const std::string ir = unary_program("s32[3,4,5]", c.result, fmt::format("{}(%x), dims={}", op, c.dims));
      ir::Shape s = ir::parse_module(ir).value()->entry()->param(0)->shape();
      std::mt19937_64 rng(9);
      SCOPED_TRACE(ir);
      check_exact(ir, {testing::random_literal(s, rng, -50.0, 50.0)});
    }
  }
}

TEST(IntegerKernelTest, S32ScatterAddCountsWithBatchDimsAndDroppedIndices) {
  // Counts per expert per shard, as the MoE builds them: ones scattered into [P, E] at the
  // pairs' experts; index E (a dropped pair's pseudo-expert) and -1 are out of range.
  const std::string ir =
      "module @ex\n\nENTRY computation @main {\n"
      "  %x = s32[3,6] parameter(), index=0\n"
      "  %i = s32[3,40] parameter(), index=1\n"
      "  %u = s32[3,40] parameter(), index=2\n"
      "  ROOT %r = s32[3,6] scatter_add(%x, %i, %u), axis=1, batch_dims=1\n}\n";
  std::mt19937_64 rng(4);
  ir::Shape x = ir::parse_module(ir).value()->entry()->param(0)->shape();
  ir::Shape i = ir::parse_module(ir).value()->entry()->param(1)->shape();
  check_exact(ir, {testing::random_literal(x, rng, -5.0, 5.0), testing::random_literal(i, rng, -1.0, 7.0),
                   testing::random_literal(i, rng, 1.0, 4.0)});
  // Rows of a trailing dimension, no batch dims.
  const std::string rows =
      "module @ex\n\nENTRY computation @main {\n"
      "  %x = s32[5,3] parameter(), index=0\n"
      "  %i = s32[12] parameter(), index=1\n"
      "  %u = s32[12,3] parameter(), index=2\n"
      "  ROOT %r = s32[5,3] scatter_add(%x, %i, %u), axis=0\n}\n";
  ir::Shape rx = ir::parse_module(rows).value()->entry()->param(0)->shape();
  ir::Shape ri = ir::parse_module(rows).value()->entry()->param(1)->shape();
  ir::Shape ru = ir::parse_module(rows).value()->entry()->param(2)->shape();
  check_exact(rows, {testing::random_literal(rx, rng, -5.0, 5.0), testing::random_literal(ri, rng, 0.0, 5.0),
                     testing::random_literal(ru, rng, -9.0, 9.0)});
}

}  // namespace
}  // namespace kiln::backend
