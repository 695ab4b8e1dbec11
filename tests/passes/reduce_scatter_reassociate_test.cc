// ReduceScatterReassociatePass, IR text in and out: a sum of reduce-scatters of the same kind,
// seen through the same rearrangements, becomes one reduce-scatter of the sum (a chain of
// three collapses to one); a pair of another group, one whose scattered value is read
// elsewhere and one behind different transposes stay. On 2 x 2 virtual devices the results
// equal the separate reduce-scatters' up to rounding (the same numbers added in another
// order).
#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/passes/reduce_scatter_reassociate.h"
#include "tests/passes/mesh_runner.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

// Three tiles' partial gradients %g0..%g2 of one [8, 4] weight, each reduce-scattered along
// dimension 0 and transposed back, summed: one reduce-scatter of their sum.
constexpr const char* kTiles = R"(module @tiles

ENTRY computation @main {
  %g0 = f32[8,4] parameter(), index=0
  %g1 = f32[8,4] parameter(), index=1
  %g2 = f32[8,4] parameter(), index=2
  %r0 = f32[4,4] reduce_scatter(%g0), dim=0, group_size=2, mesh_axes=fsdp, name="loss.vocab_tiles.0.grad"
  %t0 = f32[4,4] transpose(%r0), perm={1,0}
  %r1 = f32[4,4] reduce_scatter(%g1), dim=0, group_size=2, mesh_axes=fsdp, name="loss.vocab_tiles.1.grad"
  %t1 = f32[4,4] transpose(%r1), perm={1,0}
  %r2 = f32[4,4] reduce_scatter(%g2), dim=0, group_size=2, mesh_axes=fsdp, name="loss.vocab_tiles.2.grad"
  %t2 = f32[4,4] transpose(%r2), perm={1,0}
  %s01 = f32[4,4] add(%t0, %t1), name="grad"
  ROOT %s = f32[4,4] add(%s01, %t2), name="grad"
}
)";

constexpr const char* kTilesAfter = R"(module @tiles

ENTRY computation @main {
  %g0 = f32[8,4] parameter(), index=0
  %g1 = f32[8,4] parameter(), index=1
  %g2 = f32[8,4] parameter(), index=2
  %add.0 = f32[8,4] add(%g0, %g1), name="grad"
  %add.3 = f32[8,4] add(%add.0, %g2), name="grad"
  %reduce_scatter.4 = f32[4,4] reduce_scatter(%add.3), dim=0, group_size=2, mesh_axes=fsdp, name="loss.vocab_tiles.0.grad"
  ROOT %transpose.5 = f32[4,4] transpose(%reduce_scatter.4), perm={1,0}
}
)";

// Three chunks' bf16 partial gradients of one weight, each reduce-scattered in bf16 and
// widened to the f32 accumulator: summed in f32, rounded once, one bf16 reduce-scatter.
constexpr const char* kWidened = R"(module @widened

ENTRY computation @main {
  %g0 = bf16[8,4] parameter(), index=0
  %g1 = bf16[8,4] parameter(), index=1
  %g2 = bf16[8,4] parameter(), index=2
  %r0 = bf16[4,4] reduce_scatter(%g0), dim=0, group_size=2, mesh_axes=fsdp, name="chunks.0.grad"
  %w0 = f32[4,4] convert(%r0)
  %r1 = bf16[4,4] reduce_scatter(%g1), dim=0, group_size=2, mesh_axes=fsdp, name="chunks.1.grad"
  %w1 = f32[4,4] convert(%r1)
  %r2 = bf16[4,4] reduce_scatter(%g2), dim=0, group_size=2, mesh_axes=fsdp, name="chunks.2.grad"
  %w2 = f32[4,4] convert(%r2)
  %s01 = f32[4,4] add(%w0, %w1), name="grad"
  ROOT %s = f32[4,4] add(%s01, %w2), name="grad"
}
)";

constexpr const char* kWidenedAfter = R"(module @widened

ENTRY computation @main {
  %g0 = bf16[8,4] parameter(), index=0
  %g1 = bf16[8,4] parameter(), index=1
  %g2 = bf16[8,4] parameter(), index=2
  %convert.0 = f32[8,4] convert(%g0), name="grad"
  %convert.1 = f32[8,4] convert(%g1), name="grad"
  %add.2 = f32[8,4] add(%convert.0, %convert.1), name="grad"
  %convert.6 = f32[8,4] convert(%g2), name="grad"
  %add.7 = f32[8,4] add(%add.2, %convert.6), name="grad"
  %convert.8 = bf16[8,4] convert(%add.7), name="grad"
  %reduce_scatter.9 = bf16[4,4] reduce_scatter(%convert.8), dim=0, group_size=2, mesh_axes=fsdp, name="chunks.0.grad"
  ROOT %convert.10 = f32[4,4] convert(%reduce_scatter.9)
}
)";

// Apart: another group (data), a scattered value also read by the root, and a pair behind
// different rearrangements (a transpose against none).
constexpr const char* kApart = R"(module @apart

ENTRY computation @main {
  %a = f32[8,4] parameter(), index=0
  %b = f32[8,4] parameter(), index=1
  %c = f32[8,4] parameter(), index=2
  %ra = f32[4,4] reduce_scatter(%a), dim=0, group_size=2, mesh_axes=fsdp
  %rb = f32[4,4] reduce_scatter(%b), dim=0, group_size=2, mesh_axes=data
  %sab = f32[4,4] add(%ra, %rb)
  %rc = f32[4,4] reduce_scatter(%c), dim=0, group_size=2, mesh_axes=fsdp
  %rd = f32[4,4] reduce_scatter(%a), dim=0, group_size=2, mesh_axes=fsdp
  %td = f32[4,4] transpose(%rd), perm={1,0}
  %scd = f32[4,4] add(%rc, %td)
  %re = f32[4,4] reduce_scatter(%b), dim=0, group_size=2, mesh_axes=fsdp
  %rf = f32[4,4] reduce_scatter(%c), dim=0, group_size=2, mesh_axes=fsdp
  %sef = f32[4,4] add(%re, %rf)
  ROOT %out = (f32[4,4], f32[4,4], f32[4,4], f32[4,4]) tuple(%sab, %scd, %sef, %re)
}
)";

const config::Mesh kMesh({"data", "fsdp"}, {2, 2});

TEST(ReduceScatterReassociate, ASumOfScatteredTilesIsScatteredOnce) {
  // The same numbers added in another order: equal up to rounding on every device.
  ReduceScatterReassociatePass pass;
  testing::check_pass_on_mesh(pass, kTiles, kTilesAfter, kMesh, 1e-5);
}

TEST(ReduceScatterReassociate, WidenedPartialsAreSummedWideAndRoundedOnce) {
  // bf16 sums in another order: within a few bf16 roundings of the separate scatters'.
  ReduceScatterReassociatePass pass;
  testing::check_pass_on_mesh(pass, kWidened, kWidenedAfter, kMesh, 2e-2);
}

TEST(ReduceScatterReassociate, LeavesOtherGroupsSharedValuesAndOtherRearrangementsAlone) {
  std::unique_ptr<ir::Module> module = testing::parse_or_die(kApart);
  ASSERT_NE(module, nullptr);
  ReduceScatterReassociatePass pass;
  auto changed = pass.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::print_module(*module), kApart);
}

}  // namespace
}  // namespace kiln::passes
