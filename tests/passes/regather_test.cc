// RegatherPass, IR text in and out: the backward pass reads its own all-gather of a
// weight (and its own copy of what the forward made of it), the forward copy is left to the
// forward users, and on two virtual devices the program computes the same outputs.
#include "kiln/passes/regather.h"

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

// One layer's matmul with an FSDP weight w (each device holds 2 of its 4 rows), its
// transpose gathered once and used by the forward and the backward (as CSE leaves it).
constexpr const char* kLayer = R"(module @m

ENTRY computation @main {
  %x = f32[3,4] parameter(), index=0, name="embed"
  %w = f32[2,4] parameter(), index=1, name="layers.0.mlp.wi"
  %wg = f32[4,4] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
  %wt = f32[4,4] transpose(%wg), perm={1,0}
  %h = f32[3,4] dot_general(%x, %wt), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.hidden"
  %loss = f32[] reduce_sum(%h), dims={0,1}, name="loss"
  %dh = f32[3,4] tanh(%h), name="layers.0.mlp.hidden.grad"
  %dx = f32[3,4] dot_general(%dh, %wt), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}, name="embed.grad"
  %dw = f32[4,4] dot_general(%x, %dh), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.wi.grad"
  %dwg = f32[4,4] add(%dw, %wg), name="layers.0.mlp.wi.grad"
  ROOT %t = (f32[], f32[3,4], f32[4,4]) tuple(%loss, %dx, %dwg)
}
)";

constexpr const char* kRegathered = R"(module @m

ENTRY computation @main {
  %x = f32[3,4] parameter(), index=0, name="embed"
  %w = f32[2,4] parameter(), index=1, name="layers.0.mlp.wi"
  %wg = f32[4,4] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
  %wt = f32[4,4] transpose(%wg), perm={1,0}
  %h = f32[3,4] dot_general(%x, %wt), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.hidden"
  %loss = f32[] reduce_sum(%h), dims={0,1}, name="loss"
  %dh = f32[3,4] tanh(%h), name="layers.0.mlp.hidden.grad"
  %all_gather.0 = f32[4,4] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp, name="all_gather.regather"
  %transpose.1 = f32[4,4] transpose(%all_gather.0), perm={1,0}, name="transpose.regather"
  %dx = f32[3,4] dot_general(%dh, %transpose.1), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}, name="embed.grad"
  %dw = f32[4,4] dot_general(%x, %dh), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.wi.grad"
  %dwg = f32[4,4] add(%dw, %all_gather.0), name="layers.0.mlp.wi.grad"
  ROOT %t = (f32[], f32[3,4], f32[4,4]) tuple(%loss, %dx, %dwg)
}
)";

std::unique_ptr<ir::Module> parse(std::string_view text) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Runs `module` on 2 virtual devices of an fsdp=2 mesh with the same seeded arguments.
std::vector<std::vector<ir::Literal>> run_on_two(const ir::Module& module) {
  config::Mesh mesh({"fsdp"}, {2});
  runtime::LocalWorld world(2);
  std::vector<std::vector<ir::Literal>> out(2);
  Status s = runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::mt19937_64 rng(11 + d);
    std::vector<ir::Literal> args;
    for (const ir::Instr* p : module.entry()->params()) args.push_back(testing::random_literal(p->shape(), rng, -1, 1));
    KILN_ASSIGN_OR_RETURN(out[d], interp::run(module, args));
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TEST(Regather, TheBackwardGathersTheWeightAgainAndRebuildsWhatTheForwardMadeOfIt) {
  std::unique_ptr<ir::Module> m = parse(kLayer);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<ir::Module> before = m->clone();
  RegatherPass pass;
  auto changed = pass.run(*m);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(pass.regathered(), 1);
  EXPECT_EQ(pass.bytes(), 4 * 4 * 4);
  std::string printed = ir::print_module(*m);
  EXPECT_EQ(printed, kRegathered);
  ASSERT_TRUE(ops::verify(*m).ok());
  std::unique_ptr<ir::Module> reparsed = parse(printed);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(ir::print_module(*reparsed), printed);
  // Same outputs, bit for bit, on every device.
  auto want = run_on_two(*before), got = run_on_two(*m);
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t i = 0; i < want[d].size(); ++i) EXPECT_TRUE(want[d][i] == got[d][i]) << "device " << d << " output " << i;
  }
  // Its own output has nothing left to do.
  auto again = pass.run(*m);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << ir::print_module(*m);
}

TEST(Regather, AGatherOnlyTheForwardReadsIsLeftAlone) {
  constexpr const char* kForwardOnly = R"(module @m

ENTRY computation @main {
  %x = f32[3,4] parameter(), index=0, name="embed"
  %w = f32[2,4] parameter(), index=1, name="layers.0.mlp.wi"
  %wg = f32[4,4] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
  %h = f32[3,4] dot_general(%x, %wg), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.hidden"
  %dh = f32[3,4] tanh(%h), name="layers.0.mlp.hidden.grad"
  ROOT %t = (f32[3,4], f32[3,4]) tuple(%h, %dh)
}
)";
  std::unique_ptr<ir::Module> m = parse(kForwardOnly);
  ASSERT_NE(m, nullptr);
  RegatherPass pass;
  auto changed = pass.run(*m);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::print_module(*m), kForwardOnly);
}

TEST(Regather, AGatherOfComputedValuesIsNotAWeight) {
  // The gathered value comes from a matmul of the batch: not state, so not gathered again.
  constexpr const char* kActivation = R"(module @m

ENTRY computation @main {
  %x = f32[2,4] parameter(), index=0, name="embed"
  %w = f32[4,4] parameter(), index=1, name="layers.0.mlp.wi"
  %h = f32[2,4] dot_general(%x, %w), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}, name="layers.0.mlp.hidden"
  %hg = f32[4,4] all_gather(%h), dim=0, group_size=2, mesh_axes=fsdp
  %y = f32[4,4] tanh(%hg), name="layers.0.out"
  %dy = f32[4,4] mul(%y, %hg), name="layers.0.out.grad"
  ROOT %t = (f32[4,4], f32[4,4]) tuple(%y, %dy)
}
)";
  std::unique_ptr<ir::Module> m = parse(kActivation);
  ASSERT_NE(m, nullptr);
  RegatherPass pass;
  auto changed = pass.run(*m);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace kiln::passes
