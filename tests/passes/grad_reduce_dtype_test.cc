// GradReduceDtypePass, IR text in and out: a bf16 gradient's reduce-scatter widened to f32
// becomes an f32 reduce-scatter of the widened partial (an earlier f32 sum rounded to bf16
// is read unrounded), an f32 gradient's all-reduce becomes a bf16 one widened back, and a
// reduction that is not a gradient's (the loss's) keeps its dtype. On 2 x 2 virtual devices
// the f32 reductions give the bf16 ones' values up to their rounding.
#include "kiln/passes/grad_reduce_dtype.h"

#include <gtest/gtest.h>

#include "kiln/ops/registry.h"
#include "tests/passes/mesh_runner.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

// %g0: a bf16 partial gradient; %s: an f32 sum of two partials rounded to bf16 (what
// reduce_scatter_reassociate leaves); %loss: a sum that is not a gradient.
constexpr const char* kMixed = R"(module @mixed

ENTRY computation @main {
  %g0 = bf16[8,4] parameter(), index=0
  %a = f32[8,4] parameter(), index=1
  %b = f32[8,4] parameter(), index=2
  %loss = f32[2] parameter(), index=3
  %r0 = bf16[4,4] reduce_scatter(%g0), dim=0, group_size=2, mesh_axes=fsdp, name="layers.0.w.grad"
  %w0 = f32[4,4] convert(%r0), name="layers.0.w.grad"
  %s = f32[8,4] add(%a, %b), name="layers.1.w.grad"
  %n = bf16[8,4] convert(%s), name="layers.1.w.grad"
  %r1 = bf16[4,4] reduce_scatter(%n), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.w.grad"
  %w1 = f32[4,4] convert(%r1), name="layers.1.w.grad"
  %l = f32[2] all_reduce(%loss), group_size=2, mesh_axes=fsdp, name="loss"
  ROOT %out = (f32[4,4], f32[4,4], f32[2]) tuple(%w0, %w1, %l)
}
)";

constexpr const char* kMixedF32 = R"(module @mixed

ENTRY computation @main {
  %g0 = bf16[8,4] parameter(), index=0
  %a = f32[8,4] parameter(), index=1
  %b = f32[8,4] parameter(), index=2
  %loss = f32[2] parameter(), index=3
  %s = f32[8,4] add(%a, %b), name="layers.1.w.grad"
  %l = f32[2] all_reduce(%loss), group_size=2, mesh_axes=fsdp, name="loss"
  %convert.0 = f32[8,4] convert(%g0), name="layers.0.w.grad"
  %reduce_scatter.1 = f32[4,4] reduce_scatter(%convert.0), dim=0, group_size=2, mesh_axes=fsdp, name="layers.0.w.grad"
  %reduce_scatter.2 = f32[4,4] reduce_scatter(%s), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.w.grad"
  ROOT %out = (f32[4,4], f32[4,4], f32[2]) tuple(%reduce_scatter.1, %reduce_scatter.2, %l)
}
)";

// An f32 program's gradient all-reduce (data parallelism), read in f32.
constexpr const char* kWide = R"(module @wide

ENTRY computation @main {
  %g = f32[4,4] parameter(), index=0
  %r = f32[4,4] all_reduce(%g), group_size=2, mesh_axes=data, name="w.grad"
  ROOT %t = f32[4,4] transpose(%r), perm={1,0}
}
)";

constexpr const char* kWideBf16 = R"(module @wide

ENTRY computation @main {
  %g = f32[4,4] parameter(), index=0
  %convert.0 = bf16[4,4] convert(%g), name="w.grad"
  %all_reduce.1 = bf16[4,4] all_reduce(%convert.0), group_size=2, mesh_axes=data, name="w.grad"
  %convert.2 = f32[4,4] convert(%all_reduce.1), name="w.grad"
  ROOT %t = f32[4,4] transpose(%convert.2), perm={1,0}
}
)";

const config::Mesh kMesh({"data", "fsdp"}, {2, 2});

TEST(GradReduceDtype, Float32ReducesTheWidenedPartials) {
  // bf16 sums of two devices' partials against f32 ones: within a bf16 rounding or two.
  GradReduceDtypePass pass(ir::DType::kF32);
  testing::check_pass_on_mesh(pass, kMixed, kMixedF32, kMesh, 2e-2);
}

TEST(GradReduceDtype, Bfloat16NarrowsAnF32GradientsReduction) {
  GradReduceDtypePass pass(ir::DType::kBF16);
  testing::check_pass_on_mesh(pass, kWide, kWideBf16, kMesh, 2e-2);
}

TEST(GradReduceDtype, LeavesReductionsAlreadyInTheDtypeAlone) {
  std::unique_ptr<ir::Module> module = testing::parse_or_die(kWide);
  ASSERT_NE(module, nullptr);
  GradReduceDtypePass pass(ir::DType::kF32);
  auto changed = pass.run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::print_module(*module), kWide);
}

}  // namespace
}  // namespace kiln::passes
