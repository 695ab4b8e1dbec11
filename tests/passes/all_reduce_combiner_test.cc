// AllReduceCombinerPass, IR text in and out: independent scalar all-reduces over the same
// devices become one; one that reads another's result, a large one and one over other
// devices stay apart; on two virtual devices the results are bit for bit the same.
#include "kiln/passes/all_reduce_combiner.h"

#include <random>

#include <gtest/gtest.h>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/registry.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "tests/testing/random_literals.h"

namespace kiln::passes {
namespace {

// Two gradients' squared norms (independent), the loss sum (a [2] vector, also
// independent) and the norm's square root all-reduced again (depends on the first two).
constexpr const char* kNorms = R"(module @m

ENTRY computation @main {
  %g1 = f32[3,4] parameter(), index=0
  %g2 = f32[5] parameter(), index=1
  %l = f32[2] parameter(), index=2
  %s1 = f32[] reduce_sum(%g1), dims={0,1}
  %s2 = f32[] reduce_sum(%g2), dims={0}
  %a1 = f32[] all_reduce(%s1), group_size=2, mesh_axes=fsdp
  %a2 = f32[] all_reduce(%s2), group_size=2, mesh_axes=fsdp
  %al = f32[2] all_reduce(%l), group_size=2, mesh_axes=fsdp
  %n = f32[] add(%a1, %a2)
  %r = f32[] sqrt(%n)
  %ar = f32[] all_reduce(%r), group_size=2, mesh_axes=fsdp
  ROOT %t = (f32[], f32[2], f32[]) tuple(%n, %al, %ar)
}
)";

std::unique_ptr<ir::Module> parse(std::string_view text) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<std::vector<ir::Literal>> run_on_two(const ir::Module& module) {
  config::Mesh mesh({"fsdp"}, {2});
  runtime::LocalWorld world(2);
  std::vector<std::vector<ir::Literal>> out(2);
  Status s = runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::mt19937_64 rng(5 + d);
    std::vector<ir::Literal> args;
    for (const ir::Instr* p : module.entry()->params()) args.push_back(testing::random_literal(p->shape(), rng, 0, 1));
    KILN_ASSIGN_OR_RETURN(out[d], interp::run(module, args));
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(AllReduceCombiner, IndependentSmallAllReducesMeetOnce) {
  std::unique_ptr<ir::Module> m = parse(kNorms);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<ir::Module> before = m->clone();
  AllReduceCombinerPass pass;
  auto changed = pass.run(*m);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(pass.removed(), 2);
  std::string printed = ir::print_module(*m);
  EXPECT_EQ(printed, R"(module @m

ENTRY computation @main {
  %g1 = f32[3,4] parameter(), index=0
  %g2 = f32[5] parameter(), index=1
  %l = f32[2] parameter(), index=2
  %s1 = f32[] reduce_sum(%g1), dims={0,1}
  %s2 = f32[] reduce_sum(%g2), dims={0}
  %reshape.0 = f32[1] reshape(%s1)
  %reshape.1 = f32[1] reshape(%s2)
  %concatenate.2 = f32[4] concatenate(%reshape.0, %reshape.1, %l), dim=0
  %all_reduce.3 = f32[4] all_reduce(%concatenate.2), group_size=2, mesh_axes=fsdp
  %slice.4 = f32[1] slice(%all_reduce.3), limit={1}, start={0}
  %reshape.5 = f32[] reshape(%slice.4)
  %slice.6 = f32[1] slice(%all_reduce.3), limit={2}, start={1}
  %reshape.7 = f32[] reshape(%slice.6)
  %n = f32[] add(%reshape.5, %reshape.7)
  %r = f32[] sqrt(%n)
  %ar = f32[] all_reduce(%r), group_size=2, mesh_axes=fsdp
  %slice.8 = f32[2] slice(%all_reduce.3), limit={4}, start={2}
  ROOT %t = (f32[], f32[2], f32[]) tuple(%n, %slice.8, %ar)
}
)");
  ASSERT_TRUE(ops::verify(*m).ok());
  std::unique_ptr<ir::Module> reparsed = parse(printed);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(ir::print_module(*reparsed), printed);
  auto want = run_on_two(*before), got = run_on_two(*m);
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t i = 0; i < want[d].size(); ++i) EXPECT_TRUE(want[d][i] == got[d][i]) << "device " << d << " output " << i;
  }
  auto again = pass.run(*m);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << ir::print_module(*m);
}

TEST(AllReduceCombiner, OtherGroupsOtherDtypesAndLargeOperandsStayApart) {
  constexpr const char* kApart = R"(module @m

ENTRY computation @main {
  %x = f32[] parameter(), index=0
  %y = f32[] parameter(), index=1
  %z = f64[] parameter(), index=2
  %big = f32[128,256] parameter(), index=3
  %a = f32[] all_reduce(%x), group_size=2, mesh_axes=fsdp
  %b = f32[] all_reduce(%y), group_size=2, mesh_axes=data
  %c = f64[] all_reduce(%z), group_size=2, mesh_axes=fsdp
  %d = f32[128,256] all_reduce(%big), group_size=2, mesh_axes=fsdp
  ROOT %t = (f32[], f32[], f64[], f32[128,256]) tuple(%a, %b, %c, %d)
}
)";
  std::unique_ptr<ir::Module> m = parse(kApart);
  ASSERT_NE(m, nullptr);
  AllReduceCombinerPass pass;
  auto changed = pass.run(*m);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(count(ir::print_module(*m), "all_reduce("), 4);
}

}  // namespace
}  // namespace kiln::passes
