// ops::verify on programs from a user's file: an op that calls a body (fusion) must call one
// computation whose parameters and root match its operands and result, nothing may call
// itself, and the interpreter refuses a collective whose group does not fit the run's mesh
// instead of aborting. (tests/fuzz's ir_text target found the first and the last.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"
#include "tests/testing/ir_eval.h"

namespace kiln {
namespace {

using testing::verify_error;

std::string fusion_module(const std::string& operand, const std::string& call) {
  return R"(module @m

computation @body {
  %a = f32[16] parameter(), index=0
  %b = f32[16] parameter(), index=1
  ROOT %s = f32[16] sub(%a, %b)
}

ENTRY computation @main {
  %w = )" + operand + R"( parameter(), index=0
  %g = f32[16] parameter(), index=1
  ROOT %f = f32[16] fusion(%w, %g), kind=loop)" + call + R"(
}
)";
}

TEST(VerifyCalls, FusionOperandsMustMatchTheBodysParameters) {
  EXPECT_TRUE(ops::verify(**ir::parse_module(fusion_module("f32[16]", ", calls={@body}"))).ok());
  EXPECT_NE(verify_error(fusion_module("f32[10]", ", calls={@body}")).find("parameter 0 of @body is f32[16], operand 0 is f32[10]"),
            std::string::npos);
  EXPECT_NE(verify_error(fusion_module("f32[16]", "")).find("fusion calls exactly one computation"), std::string::npos);
}

TEST(VerifyCalls, OnlyBodyOpsCallAndNothingCallsItself) {
  const std::string calls_from_neg = R"(module @m

computation @body {
  ROOT %a = f32[2] parameter(), index=0
}

ENTRY computation @main {
  %x = f32[2] parameter(), index=0
  ROOT %y = f32[2] neg(%x), calls={@body}
}
)";
  EXPECT_NE(verify_error(calls_from_neg).find("neg calls no computation"), std::string::npos);
  const std::string recursive = R"(module @m

computation @body {
  %a = f32[2] parameter(), index=0
  ROOT %f = f32[2] fusion(%a), kind=loop, calls={@body}
}

ENTRY computation @main {
  %x = f32[2] parameter(), index=0
  ROOT %y = f32[2] fusion(%x), kind=loop, calls={@body}
}
)";
  EXPECT_NE(verify_error(recursive).find("@body calls itself"), std::string::npos);
}

TEST(VerifyCalls, InterpreterRefusesACollectiveLargerThanTheMesh) {
  auto m = ir::parse_module(R"(module @m

ENTRY computation @main {
  %x = f32[] parameter(), index=0
  ROOT %y = f32[] all_reduce(%x), group_size=2, mesh_axes=fsdp
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(ops::verify(**m).ok());
  const std::vector<ir::Literal> args = {ir::Literal(ir::Shape(ir::DType::kF32, {}))};
  auto r = interp::run(**m, args);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "%y: group_size=2 over mesh_axes=fsdp, but this run's mesh (1 device) makes a group of 1");
}

}  // namespace
}  // namespace kiln
