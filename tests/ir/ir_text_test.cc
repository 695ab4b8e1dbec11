#include <gtest/gtest.h>

#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/verifier.h"

namespace kiln::ir {
namespace {

constexpr const char* kModule = R"(module @block

computation @body {
  %a.0 = f32[] parameter(), index=0
  ROOT %n.1 = f32[] neg(%a.0)
}

ENTRY computation @main {
  %x.2 = f32[2,4] parameter(), index=0, name="x", axes={activation_batch,_}, sharding={[fsdp],[]}
  %c.3 = f32[3] constant({1, -2.5, inf})
  %s.4 = bf16[] constant(0.33398438), loc="block.cc:12"
  %p.5 = pred[2] constant({1, 0})
  %b.6 = f32[2,4] broadcast(%c.3), dims={}, note="a \"quoted\" string", scale=0.5, stage=2
  %t.7 = (f32[2,4], f32[3]) tuple(%x.2, %c.3), calls={@body}
  ROOT %g.8 = f32[2,4] get_tuple_element(%t.7), index=0, name="layers.0.out"
}
)";

TEST(IrText, PrintParseRoundTripIsIdentical) {
  auto m = parse_module(kModule);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::string printed = print_module(**m);
  EXPECT_EQ(printed, kModule);
  auto again = parse_module(printed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(print_module(**again), printed);
  EXPECT_TRUE(verify_structure(**again).ok());
}

TEST(IrText, ScheduleStageRoundTrips) {
  auto m = parse_module(kModule);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  int staged = 0;
  for (const auto& instr : (*m)->entry()->instructions()) {
    if (instr->meta().stage != 0) {
      EXPECT_EQ(instr->id(), "b.6");
      EXPECT_EQ(instr->meta().stage, 2);
      ++staged;
    }
  }
  EXPECT_EQ(staged, 1);
}

TEST(IrText, ParsedModuleKeepsAttributesAndMetadata) {
  auto m = parse_module(kModule);
  ASSERT_TRUE(m.ok());
  const Computation* entry = (*m)->entry();
  EXPECT_EQ(entry->name(), "main");
  const Instr* x = entry->param(0);
  EXPECT_EQ(x->meta().name, "x");
  EXPECT_EQ(x->meta().axes, (std::vector<std::string>{"activation_batch", ""}));
  ASSERT_TRUE(x->meta().sharding.has_value());
  EXPECT_EQ(x->meta().sharding->dims[0], std::vector<std::string>{"fsdp"});
  const Instr* b = entry->instructions()[4].get();
  EXPECT_EQ(b->attrs().get_string("note"), "a \"quoted\" string");
  EXPECT_DOUBLE_EQ(b->attrs().get_float("scale"), 0.5);
  EXPECT_TRUE(b->attrs().get_ints("dims").empty());
  const Instr* c = entry->instructions()[1].get();
  EXPECT_TRUE(std::isinf(c->literal().at(2)));
  EXPECT_EQ(entry->root()->meta().name, "layers.0.out");
  EXPECT_EQ(entry->instructions()[5]->called()[0]->name(), "body");
}

TEST(IrText, FloatValuesRoundTripExactly) {
  Literal lit(Shape(DType::kF32, {3}), {0.1, 1.0 / 3.0, 1e-30});
  Literal lit64(Shape(DType::kF64, {2}), {0.1, 1.0 / 3.0});
  Module m("values");
  Computation* c = m.add_computation("main");
  c->add_constant(lit);
  c->set_root(c->add_constant(lit64));
  auto parsed = parse_module(print_module(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ((*parsed)->entry()->instructions()[0]->literal(), lit);
  EXPECT_EQ((*parsed)->entry()->instructions()[1]->literal(), lit64);
}

void expect_parse_error(const std::string& text, const std::string& expected) {
  auto m = parse_module(text);
  ASSERT_FALSE(m.ok()) << "parsed: " << text;
  EXPECT_NE(m.status().message().find(expected), std::string::npos) << m.status().message();
}

TEST(IrText, ErrorsNameLineAndColumn) {
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[2] neg(%x)\n}\n",
                     "line 3, column 24: unknown operand %x");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f33[2] parameter(), index=0\n}\n",
                     "line 3, column 13: unknown element type");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[2] frobnicate()\n}\n",
                     "line 3, column 20: unknown opcode 'frobnicate'");
  expect_parse_error("module @m\nENTRY computation @main {\n  %y = f32[2] parameter(), index=0\n}\n", "has no ROOT");
  expect_parse_error("module @m\ncomputation @main {\n  ROOT %y = f32[2] parameter(), index=0\n}\n", "no ENTRY");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %c = f32[3] constant({1, 2})\n}\n", "needs 3 values, got 2");
  expect_parse_error("module @m\nENTRY computation @main {\n  %a = f32[] parameter(), index=0\n  ROOT %a = f32[] neg(%a)\n}\n",
                     "duplicate instruction name %a");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[2] parameter(), index=1\n}\n", "lacks parameter index 0");
}

// Sizes in hostile text are refused before they allocate or overflow (tests/fuzz found the
// first two: a parameter index of 888888888 resized the parameter list, 2^63 - 1 overflowed).
TEST(IrText, HugeSizesAreRefused) {
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[] parameter(), index=888888888\n}\n",
                     "too large (>= 1048576) parameter index 888888888");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[] parameter(), index=9223372036854775807\n}\n",
                     "parameter index 9223372036854775807");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[1048576,1048576,1048576] parameter(), index=0\n}\n",
                     "shape has more than 17592186044416 elements");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = " + std::string(40, '(') + "f32[]" +
                         std::string(40, ')') + " parameter(), index=0\n}\n",
                     "tuple shapes nest deeper than 32");
  // Found by tests/fuzz: a stage that is not a small number threw from std::stoi.
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[] parameter(), index=0, stage=99999999999\n}\n",
                     "stage must be in [0, 2^31)");
  expect_parse_error("module @m\nENTRY computation @main {\n  ROOT %y = f32[] parameter(), index=0, stage=+\n}\n",
                     "expected an integer");
}

TEST(IrGraph, ReplaceUsesRemoveAndTopoSort) {
  Module m("g");
  Computation* c = m.add_computation("main");
  Instr* x = c->add(Opcode::kParameter, Shape(DType::kF32, {2}), {}, {{"index", int64_t{0}}});
  Instr* n1 = c->add(Opcode::kNeg, x->shape(), {x});
  Instr* add = c->add(Opcode::kAdd, x->shape(), {n1, n1});
  c->set_root(add);
  EXPECT_EQ(n1->users().size(), 2u);
  // Append a replacement after its user, then restore order with topo_sort.
  Instr* n2 = c->add(Opcode::kAbs, x->shape(), {x});
  n1->replace_all_uses_with(n2);
  EXPECT_TRUE(n1->users().empty());
  EXPECT_FALSE(verify_structure(m).ok());  // %abs is used before it is defined
  c->topo_sort();
  c->remove(n1);
  EXPECT_TRUE(verify_structure(m).ok()) << verify_structure(m).to_string();
  EXPECT_EQ(c->size(), 3);
  auto clone = m.clone();
  EXPECT_EQ(print_module(*clone), print_module(m));
  EXPECT_EQ(m.fresh_id("add"), "add.4");
}

TEST(IrShape, ToStringAndTuples) {
  Shape t = Shape::tuple({Shape(DType::kF32, {2, 3}), Shape(DType::kS32, {})});
  EXPECT_EQ(t.to_string(), "(f32[2,3], s32[])");
  EXPECT_EQ(t.byte_size(), 28);
  auto parsed = parse_shape("(f32[2,3], s32[])");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, t);
  EXPECT_EQ(round_to_dtype(DType::kBF16, 1.0 + 1.0 / 256), 1.0);  // ties to even
  EXPECT_EQ(round_to_dtype(DType::kS32, -3.7), -3.0);
  EXPECT_EQ(round_to_dtype(DType::kS32, 1e12), 2147483647.0);
}

}  // namespace
}  // namespace kiln::ir
