#include "kiln/passes/dce.h"

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

TEST(Dce, RemovesUnusedChainsButKeepsParameters) {
  DcePass dce;
  check_pass(dce, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %y = f32[4] parameter(), index=1
  %e.1 = f32[4] exp(%y)
  %a.2 = f32[4] add(%e.1, %x), name="unused"
  %n.3 = f32[4] neg(%x)
  %t.4 = (f32[4], f32[4]) tuple(%n.3, %a.2)
  ROOT %m.5 = f32[4] mul(%n.3, %x)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %y = f32[4] parameter(), index=1
  %n.3 = f32[4] neg(%x)
  ROOT %m.5 = f32[4] mul(%n.3, %x)
}
)",
             true);
}

TEST(Dce, LeavesALiveModuleAlone) {
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %unused = s32[] parameter(), index=1
  %c = f32[] constant(2)
  %b = f32[2,3] broadcast(%c), dims={}
  %m = f32[2,3] mul(%x, %b)
  ROOT %t = (f32[2,3], f32[2,3]) tuple(%m, %x)
}
)";
  DcePass dce;
  check_pass(dce, text, text, false);
}

TEST(Dce, RemovesComputationsNothingCalls) {
  DcePass dce;
  check_pass(dce, R"(module @m

computation @unused {
  %p0 = f32[2] parameter(), index=0
  ROOT %n = f32[2] fusion(%p0), kind=loop, calls={@also_unused}
}

computation @also_unused {
  ROOT %p1 = f32[2] parameter(), index=0
}

computation @body {
  ROOT %p2 = f32[2] parameter(), index=0
}

ENTRY computation @main {
  %x = f32[2] parameter(), index=0
  %dead = f32[2] fusion(%x), kind=loop, calls={@unused}
  ROOT %c = f32[2] fusion(%x), kind=loop, calls={@body}
}
)",
             R"(module @m

computation @body {
  ROOT %p2 = f32[2] parameter(), index=0
}

ENTRY computation @main {
  %x = f32[2] parameter(), index=0
  ROOT %c = f32[2] fusion(%x), kind=loop, calls={@body}
}
)",
             true);
}

TEST(Dce, RemoveIfDeadOnlyTouchesTheGivenInstructions) {
  auto module = testing::parse_or_die(R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %old = f32[4] exp(%x)
  %a = f32[4] neg(%x)
  %b = f32[4] neg(%a)
  ROOT %r = f32[4] copy(%x)
}
)");
  ir::Computation& c = *module->entry();
  ir::Instr* b = c.instructions()[3].get();
  // %b is dead and releases %a; %old was dead before and stays.
  EXPECT_EQ(remove_if_dead(c, {b}), 2);
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(c.instructions()[1]->id(), "old");
}

}  // namespace
}  // namespace kiln::passes
