#include "kiln/passes/cse.h"

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

TEST(Cse, MergesEqualValuesIntoTheFirstOccurrence) {
  CsePass cse;
  // Names and locations do not block merging; equal constants, rngs with one seed, and
  // chains built on merged values all merge.
  check_pass(cse, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %c1 = f32[4] constant({1, 2, 3, 4}), name="first"
  %c2 = f32[4] constant({1, 2, 3, 4}), name="second", loc="model.cc:3"
  %r1 = f32[4] rng(), distribution=normal, seed=7
  %r2 = f32[4] rng(), distribution=normal, seed=7
  %a1 = f32[4] add(%x, %c1)
  %a2 = f32[4] add(%x, %c2), axes={embed}
  %e1 = f32[4] exp(%a1)
  %e2 = f32[4] exp(%a2)
  %s1 = f32[4] add(%e1, %r1)
  %s2 = f32[4] add(%e2, %r2)
  ROOT %t = (f32[4], f32[4]) tuple(%s1, %s2)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %c1 = f32[4] constant({1, 2, 3, 4}), name="first"
  %r1 = f32[4] rng(), distribution=normal, seed=7
  %a1 = f32[4] add(%x, %c1)
  %e1 = f32[4] exp(%a1)
  %s1 = f32[4] add(%e1, %r1)
  ROOT %t = (f32[4], f32[4]) tuple(%s1, %s1)
}
)",
             true);
}

TEST(Cse, AValueTwoStagesComputeBelongsToNeither) {
  CsePass cse;
  // Gradient accumulation: each micro-batch (stage 1, 2) transposes the same weight. The
  // survivor is unstaged, so fusion may read it from either stage's kernels; values of one
  // stage keep it.
  check_pass(cse, R"(module @m

ENTRY computation @main {
  %w = f32[2,3] parameter(), index=0
  %x = f32[3,2] parameter(), index=1
  %t1 = f32[3,2] transpose(%w), perm={1,0}, stage=1
  %a1 = f32[3,2] add(%t1, %x), stage=1
  %b1 = f32[3,2] exp(%x), stage=2
  %t2 = f32[3,2] transpose(%w), perm={1,0}, stage=2
  %a2 = f32[3,2] add(%t2, %b1), stage=2
  %b2 = f32[3,2] exp(%x), stage=2
  %a3 = f32[3,2] add(%a2, %b2), stage=2
  ROOT %t = (f32[3,2], f32[3,2]) tuple(%a1, %a3)
}
)",
             R"(module @m

ENTRY computation @main {
  %w = f32[2,3] parameter(), index=0
  %x = f32[3,2] parameter(), index=1
  %t1 = f32[3,2] transpose(%w), perm={1,0}
  %a1 = f32[3,2] add(%t1, %x), stage=1
  %b1 = f32[3,2] exp(%x), stage=2
  %a2 = f32[3,2] add(%t1, %b1), stage=2
  %a3 = f32[3,2] add(%a2, %b1), stage=2
  ROOT %t = (f32[3,2], f32[3,2]) tuple(%a1, %a3)
}
)",
             true);
}

TEST(Cse, MergesIntoTheRoot) {
  CsePass cse;
  check_pass(cse, R"(module @m

ENTRY computation @main {
  %x = s32[2,3] parameter(), index=0
  %t1 = s32[3,2] transpose(%x), perm={1,0}
  %t2 = s32[3,2] transpose(%x), perm={1,0}
  ROOT %m = s32[3,2] mul(%t1, %t2)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = s32[2,3] parameter(), index=0
  %t1 = s32[3,2] transpose(%x), perm={1,0}
  ROOT %m = s32[3,2] mul(%t1, %t1)
}
)",
             true);
}

TEST(Cse, KeepsValuesThatDiffer) {
  // Different shardings, attributes, literal values (including +0 and -0), seeds, shapes and
  // operand orders; parameters are never merged.
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[4,2] parameter(), index=0
  %y = f32[4,2] parameter(), index=1
  %a1 = f32[4,2] add(%x, %y), sharding={[fsdp],[]}
  %a2 = f32[4,2] add(%x, %y), sharding={[],[tensor]}
  %a3 = f32[4,2] add(%y, %x)
  %z1 = f32[] constant(0)
  %z2 = f32[] constant(-0)
  %r1 = f32[4,2] rng(), distribution=uniform, seed=1
  %r2 = f32[4,2] rng(), distribution=uniform, seed=2
  %r3 = f32[4,2] rng(), distribution=normal, seed=1
  %s1 = f32[4] reduce_sum(%x), dims={1}
  %s2 = f32[2] reduce_sum(%x), dims={0}
  ROOT %t = (f32[4,2], f32[4,2], f32[4,2], f32[], f32[], f32[4,2], f32[4,2], f32[4,2], f32[4], f32[2]) tuple(%a1, %a2, %a3, %z1, %z2, %r1, %r2, %r3, %s1, %s2)
}
)";
  CsePass cse;
  check_pass(cse, text, text, false);
}

TEST(Cse, TreatsNaNConstantsAsEqual) {
  CsePass cse;
  check_pass(cse, R"(module @m

ENTRY computation @main {
  %a = f32[2] constant({nan, 1})
  %b = f32[2] constant({nan, 1})
  ROOT %t = (f32[2], f32[2]) tuple(%a, %b)
}
)",
             R"(module @m

ENTRY computation @main {
  %a = f32[2] constant({nan, 1})
  ROOT %t = (f32[2], f32[2]) tuple(%a, %a)
}
)",
             true);
}

}  // namespace
}  // namespace kiln::passes
