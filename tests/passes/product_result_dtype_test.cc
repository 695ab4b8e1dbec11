#include "kiln/passes/product_result_dtype.h"

#include "kiln/passes/compile_pipeline.h"
#include "kiln/passes/registry.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::parse_or_die;
using testing::random_inputs;

// Runs the pass on `input`, checks the printed result, that it verifies and round-trips, and
// that a second run changes nothing. Returns the rewritten module.
std::unique_ptr<ir::Module> run_and_check(std::string_view input, std::string_view expected, bool expect_changed) {
  std::unique_ptr<ir::Module> module = parse_or_die(input);
  EXPECT_NE(module, nullptr);
  if (!module) return nullptr;
  ProductResultDtypePass pass;
  auto changed = pass.run(*module);
  EXPECT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, expect_changed);
  std::string printed = ir::print_module(*module);
  EXPECT_EQ(printed, expected);
  Status s = ops::verify(*module);
  EXPECT_TRUE(s.ok()) << s.to_string() << "\n" << printed;
  auto reparsed = ir::parse_module(printed);
  EXPECT_TRUE(reparsed.ok()) << reparsed.status().to_string();
  if (reparsed.ok()) {
    EXPECT_EQ(ir::print_module(**reparsed), printed);
  }
  auto again = pass.run(*module);
  EXPECT_TRUE(again.ok() && !*again) << "the pass changed its own output";
  return module;
}

// The rewrite is not exact: it removes a rounding to bf16. The rewritten module must equal,
// bit for bit, the same product computed on the widened operands in f32 (both accumulate in
// double in the interpreter and round once to f32), and differ from the input module's
// result, which was rounded to bf16 first, on these random inputs.
void expect_f32_product(const ir::Module& before, const ir::Module& after, const ir::Module& f32_reference) {
  std::vector<ir::Literal> args = random_inputs(before, 7);
  auto rounded = interp::run(before, args);
  auto got = interp::run(after, args);
  auto want = interp::run(f32_reference, args);
  ASSERT_TRUE(rounded.ok() && got.ok() && want.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_TRUE((*got)[0] == (*want)[0]) << "after: " << (*got)[0].to_string() << "\nf32: " << (*want)[0].to_string();
  EXPECT_FALSE((*got)[0] == (*rounded)[0]) << "the inputs never exercise the rounding";
}

TEST(ProductResultDtype, WeightGradientOfGroupedMatmulWritesF32) {
  const char* input = R"(module @m

ENTRY computation @main {
  %x = bf16[6,8] parameter(), index=0
  %dy = bf16[6,5] parameter(), index=1
  %s = s32[3] constant({2, 0, 4})
  %g = bf16[3,8,5] grouped_matmul_weight_grad(%x, %dy, %s), name="layers.0.mlp.grad"
  %c = f32[3,8,5] convert(%g), name="layers.0.mlp.grad"
  ROOT %r = f32[3,8,5] neg(%c)
}
)";
  const char* expected = R"(module @m

ENTRY computation @main {
  %x = bf16[6,8] parameter(), index=0
  %dy = bf16[6,5] parameter(), index=1
  %s = s32[3] constant({2, 0, 4})
  %g = f32[3,8,5] grouped_matmul_weight_grad(%x, %dy, %s), name="layers.0.mlp.grad"
  ROOT %r = f32[3,8,5] neg(%g)
}
)";
  auto after = run_and_check(input, expected, true);
  auto reference = parse_or_die(R"(module @m

ENTRY computation @main {
  %x = bf16[6,8] parameter(), index=0
  %dy = bf16[6,5] parameter(), index=1
  %s = s32[3] constant({2, 0, 4})
  %xw = f32[6,8] convert(%x)
  %dyw = f32[6,5] convert(%dy)
  %g = f32[3,8,5] grouped_matmul_weight_grad(%xw, %dyw, %s)
  ROOT %r = f32[3,8,5] neg(%g)
}
)");
  ASSERT_TRUE(after && reference);
  expect_f32_product(*parse_or_die(input), *after, *reference);
}

TEST(ProductResultDtype, DotGeneralAtTheRootWritesF32) {
  const char* input = R"(module @m

ENTRY computation @main {
  %a = bf16[4,16] parameter(), index=0
  %b = bf16[16,3] parameter(), index=1
  %p = bf16[4,3] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  ROOT %c = f32[4,3] convert(%p), name="logits"
}
)";
  const char* expected = R"(module @m

ENTRY computation @main {
  %a = bf16[4,16] parameter(), index=0
  %b = bf16[16,3] parameter(), index=1
  ROOT %p = f32[4,3] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
}
)";
  auto after = run_and_check(input, expected, true);
  auto reference = parse_or_die(R"(module @m

ENTRY computation @main {
  %a = bf16[4,16] parameter(), index=0
  %b = bf16[16,3] parameter(), index=1
  %aw = f32[4,16] convert(%a)
  %bw = f32[16,3] convert(%b)
  ROOT %p = f32[4,3] dot_general(%aw, %bw), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
}
)");
  ASSERT_TRUE(after && reference);
  expect_f32_product(*parse_or_die(input), *after, *reference);
}

// A dense weight gradient: the product is transposed (and here reshaped) before the cast's
// adjoint widens it.
TEST(ProductResultDtype, LooksThroughTransposesAndReshapes) {
  const char* input = R"(module @m

ENTRY computation @main {
  %a = bf16[16,4] parameter(), index=0
  %b = bf16[16,6] parameter(), index=1
  %p = bf16[4,6] dot_general(%a, %b), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %t = bf16[6,4] transpose(%p), perm={1,0}
  %r = bf16[6,2,2] reshape(%t)
  ROOT %c = f32[6,2,2] convert(%r), name="layers.0.grad"
}
)";
  const char* expected = R"(module @m

ENTRY computation @main {
  %a = bf16[16,4] parameter(), index=0
  %b = bf16[16,6] parameter(), index=1
  %p = f32[4,6] dot_general(%a, %b), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %t = f32[6,4] transpose(%p), perm={1,0}
  ROOT %r = f32[6,2,2] reshape(%t)
}
)";
  auto after = run_and_check(input, expected, true);
  auto reference = parse_or_die(R"(module @m

ENTRY computation @main {
  %a = bf16[16,4] parameter(), index=0
  %b = bf16[16,6] parameter(), index=1
  %aw = f32[16,4] convert(%a)
  %bw = f32[16,6] convert(%b)
  %p = f32[4,6] dot_general(%aw, %bw), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %t = f32[6,4] transpose(%p), perm={1,0}
  ROOT %r = f32[6,2,2] reshape(%t)
}
)");
  ASSERT_TRUE(after && reference);
  expect_f32_product(*parse_or_die(input), *after, *reference);
}

TEST(ProductResultDtype, GroupedMatmulWritesF32) {
  const char* input = R"(module @m

ENTRY computation @main {
  %x = bf16[5,8] parameter(), index=0
  %w = bf16[2,6,8] parameter(), index=1
  %s = s32[2] constant({3, 2})
  %y = bf16[5,6] grouped_matmul(%x, %w, %s), transpose_rhs=1
  ROOT %c = f32[5,6] convert(%y)
}
)";
  const char* expected = R"(module @m

ENTRY computation @main {
  %x = bf16[5,8] parameter(), index=0
  %w = bf16[2,6,8] parameter(), index=1
  %s = s32[2] constant({3, 2})
  ROOT %y = f32[5,6] grouped_matmul(%x, %w, %s), transpose_rhs=1
}
)";
  run_and_check(input, expected, true);
}

// The bf16 product has another reader, which must keep seeing the rounded value; a narrowing
// convert would add a second rounding; a convert of a non-product is not this pass's business.
TEST(ProductResultDtype, LeavesOtherConvertsAlone) {
  const char* input = R"(module @m

ENTRY computation @main {
  %a = bf16[4,16] parameter(), index=0
  %b = bf16[16,3] parameter(), index=1
  %f = f32[4,16] parameter(), index=2
  %g = f32[16,3] parameter(), index=3
  %p = bf16[4,3] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %c = f32[4,3] convert(%p)
  %e = bf16[4,3] exp(%p)
  %ce = f32[4,3] convert(%e)
  %q = f32[4,3] dot_general(%f, %g), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %n = bf16[4,3] convert(%q)
  %p2 = bf16[4,3] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %nw = f32[4,3] convert(%n)
  %s1 = f32[4,3] add(%c, %ce)
  %pt = bf16[3,4] transpose(%p2), perm={1,0}
  %ct = f32[3,4] convert(%pt)
  %et = bf16[3,4] exp(%pt)
  %s2 = f32[4,3] add(%s1, %nw)
  ROOT %s3 = (f32[4,3], f32[3,4], bf16[3,4]) tuple(%s2, %ct, %et)
}
)";
  run_and_check(input, input, false);
}

TEST(ProductResultDtype, IsInTheRegistryAndTheDefaultPipeline) {
  EXPECT_TRUE(ops::op_def(ir::Opcode::kDotGeneral).declared_result_dtype);
  EXPECT_TRUE(ops::op_def(ir::Opcode::kGroupedMatmulWeightGrad).declared_result_dtype);
  EXPECT_FALSE(ops::op_def(ir::Opcode::kAdd).declared_result_dtype);
  EXPECT_NE(default_pipeline({}).to_string().find("product_result_dtype"), std::string::npos);
  EXPECT_TRUE(make_pass("product_result_dtype").ok());
}

}  // namespace
}  // namespace kiln::passes
