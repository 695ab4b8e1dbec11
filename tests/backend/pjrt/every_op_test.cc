// Every opcode of the registry either lowers to StableHLO or says why it does not, and every
// op's registry examples run on XLA's CPU plugin with the interpreter's results (the PJRT
// twin of tests/backend/backend_test.cc's EveryOp).
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"
#include "tests/backend/pjrt/pjrt_testing.h"

namespace kiln::backend::pjrt {
namespace {

TEST(Lowerings, EveryOpcodeHasALoweringOrAReason) {
  for (int i = 0; i < ir::kNumOpcodes; ++i) {
    const auto opcode = static_cast<ir::Opcode>(i);
    const Lowering* lowering = lowerings().find(opcode);
    ASSERT_NE(lowering, nullptr) << ir::opcode_name(opcode) << " has no entry in the lowering table";
    EXPECT_TRUE(lowering->lower != nullptr || !lowering->no_lowering_reason.empty()) << ir::opcode_name(opcode);
  }
}

// Parameters are bound by the emitter, not lowered: the only opcode allowed no lowering today.
TEST(Lowerings, OnlyParametersGoWithoutALowering) {
  std::vector<std::string> without;
  for (int i = 0; i < ir::kNumOpcodes; ++i) {
    const auto opcode = static_cast<ir::Opcode>(i);
    const Lowering* lowering = lowerings().find(opcode);
    if (lowering != nullptr && lowering->lower == nullptr && opcode != ir::Opcode::kParameter) {
      without.push_back(fmt::format("{} ({})", ir::opcode_name(opcode), lowering->no_lowering_reason));
    }
  }
  EXPECT_TRUE(without.empty()) << fmt::format("{}", fmt::join(without, "; "));
}

// Kiln's max and min propagate a NaN from either operand; XLA:CPU's maximum and minimum
// alone do not always (min(y, NaN) gave y).
TEST(Lowerings, MaxAndMinPropagateNanFromEitherOperand) {
  auto module = ir::parse_module(R"(module @m

ENTRY computation @main {
  %a = f32[4] parameter(), index=0
  %b = f32[4] parameter(), index=1
  %max = f32[4] max(%a, %b)
  %min = f32[4] min(%a, %b)
  %maxr = f32[4] max(%b, %a)
  %minr = f32[4] min(%b, %a)
  ROOT %out = (f32[4], f32[4], f32[4], f32[4]) tuple(%max, %min, %maxr, %minr)
}
)");
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  const double nan = std::nan("");
  const std::vector<ir::Literal> args = {ir::Literal(ir::Shape(ir::DType::kF32, {4}), {nan, 1, nan, -2}),
                                         ir::Literal(ir::Shape(ir::DType::kF32, {4}), {3, nan, nan, 5})};
  auto want = testing::run_on_interpreter(**module, config::Mesh(), {args});
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = testing::run_on_cpu_plugin(**module, EmitOptions{}, {args});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  testing::expect_close(*want, *got, "max/min with NaN");
}

// A program the emitter cannot write for the plugin is one line naming the op, its value and
// the model line that made it, before XLA sees anything: here a collective whose group the
// mesh it is compiled for cannot make.
TEST(Lowerings, AnOpThatCannotBeEmittedIsNamedWithItsSourceLine) {
  auto module = ir::parse_module(R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  ROOT %g = f32[4,3] all_gather(%x), dim=0, mesh_axes=fsdp, group_size=2, loc="gpt_oss.cc:120"
}
)");
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  auto text = emit_stablehlo(**module, EmitOptions{});  // one device: no group of 2
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("all_gather %g (gpt_oss.cc:120)"), std::string::npos)
      << text.status().message();
  EXPECT_EQ(text.status().message().find('\n'), std::string::npos) << text.status().message();
}

class EveryOp : public ::testing::TestWithParam<ir::Opcode> {};

// All of an op's examples in one child process (one plugin load per op), two seeds each.
TEST_P(EveryOp, PluginEqualsInterpreter) {
  const ir::Opcode opcode = GetParam();
  const ops::OpDef& def = ops::op_def(opcode);
  const Lowering* lowering = lowerings().find(opcode);
  ASSERT_NE(lowering, nullptr);
  if (lowering->lower == nullptr) GTEST_SKIP() << lowering->no_lowering_reason;
  for (size_t e = 0; e < def.examples.size(); ++e) {
    const ops::OpExample& ex = def.examples[e];
    auto module = ir::parse_module(ex.ir);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    for (uint64_t seed : {3, 4}) {
      const std::vector<ir::Literal> args = testing::random_args(**module, seed, ex.ranges);
      auto want = testing::run_on_interpreter(**module, config::Mesh(), {args});
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      auto got = testing::run_on_cpu_plugin(**module, EmitOptions{}, {args});
      ASSERT_TRUE(got.ok()) << got.status().to_string() << "\n" << ex.ir;
      testing::expect_close(*want, *got, fmt::format("{} example {} seed {}", def.name, e, seed));
    }
  }
}

std::vector<ir::Opcode> all_opcodes() {
  std::vector<ir::Opcode> out;
  for (int i = 0; i < ir::kNumOpcodes; ++i) out.push_back(static_cast<ir::Opcode>(i));
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, EveryOp, ::testing::ValuesIn(all_opcodes()),
                         [](const auto& info) { return std::string(ir::opcode_name(info.param)); });

}  // namespace
}  // namespace kiln::backend::pjrt
