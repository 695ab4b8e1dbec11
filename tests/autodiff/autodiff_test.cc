#include <gtest/gtest.h>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln::autodiff {
namespace {

std::unique_ptr<ir::Module> parse(const char* text) {
  auto m = ir::parse_module(text);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// Evaluates the module's root replaced by (loss, grads...).
std::vector<ir::Literal> grads_of(ir::Module& m, const std::vector<int>& params, const std::vector<ir::Literal>& args) {
  ir::Computation* c = m.entry();
  std::vector<ir::Instr*> wrt;
  for (int p : params) wrt.push_back(c->param(p));
  auto g = gradients(*c, c->root(), wrt);
  KILN_CHECK_OK(g);
  ops::Builder b(c);
  std::vector<ir::Instr*> outs = {c->root()};
  outs.insert(outs.end(), g->begin(), g->end());
  c->set_root(b.tuple(outs));
  KILN_CHECK_OK(ops::verify(m));
  auto r = interp::run(m, args);
  KILN_CHECK_OK(r);
  return *r;
}

TEST(Autodiff, FanOutAccumulatesGradients) {
  // loss = x*x + 3x  -> d/dx = 2x + 3
  auto m = parse(R"(module @m
ENTRY computation @main {
  %x = f64[] parameter(), index=0
  %three = f64[] constant(3)
  %sq = f64[] mul(%x, %x)
  %lin = f64[] mul(%three, %x)
  ROOT %loss = f64[] add(%sq, %lin)
}
)");
  auto out = grads_of(*m, {0}, {ir::Literal::scalar(ir::DType::kF64, 1.5)});
  EXPECT_DOUBLE_EQ(out[0].scalar_value(), 1.5 * 1.5 + 4.5);
  EXPECT_DOUBLE_EQ(out[1].scalar_value(), 6.0);
}

TEST(Autodiff, TupleElementsRouteToTheirSources) {
  // t = (a*2, b*5); loss = t.1 -> d/da = 0, d/db = 5.
  auto m = parse(R"(module @m
ENTRY computation @main {
  %a = f64[] parameter(), index=0
  %b = f64[] parameter(), index=1
  %two = f64[] constant(2)
  %five = f64[] constant(5)
  %a2 = f64[] mul(%a, %two)
  %b5 = f64[] mul(%b, %five)
  %t = (f64[], f64[]) tuple(%a2, %b5)
  ROOT %loss = f64[] get_tuple_element(%t), index=1
}
)");
  auto out = grads_of(*m, {0, 1}, {ir::Literal::scalar(ir::DType::kF64, 1), ir::Literal::scalar(ir::DType::kF64, 2)});
  EXPECT_DOUBLE_EQ(out[1].scalar_value(), 0.0);
  EXPECT_DOUBLE_EQ(out[2].scalar_value(), 5.0);
}

TEST(Autodiff, StopGradientAndIntegerPathsCarryNoGradient) {
  // loss = x * stop_gradient(x) -> d/dx = stop_gradient(x) = x
  auto m = parse(R"(module @m
ENTRY computation @main {
  %x = f64[] parameter(), index=0
  %s = f64[] stop_gradient(%x)
  %i = s32[] convert(%x)
  %f = f64[] convert(%i)
  %p = f64[] mul(%x, %s)
  ROOT %loss = f64[] add(%p, %f)
}
)");
  auto out = grads_of(*m, {0}, {ir::Literal::scalar(ir::DType::kF64, 2.5)});
  EXPECT_DOUBLE_EQ(out[1].scalar_value(), 2.5);
}

TEST(Autodiff, UnusedParameterGetsZeros) {
  auto m = parse(R"(module @m
ENTRY computation @main {
  %x = f64[2] parameter(), index=0
  %unused = f64[3] parameter(), index=1
  ROOT %loss = f64[] reduce_sum(%x), dims={0}
}
)");
  auto out = grads_of(*m, {0, 1}, {ir::Literal(ir::Shape(ir::DType::kF64, {2}), {1, 2}),
                                   ir::Literal(ir::Shape(ir::DType::kF64, {3}), {1, 2, 3})});
  EXPECT_EQ(out[1].values(), (std::vector<double>{1, 1}));
  EXPECT_EQ(out[2].values(), (std::vector<double>{0, 0, 0}));
}

TEST(Autodiff, RejectsNonScalarLoss) {
  auto m = parse(R"(module @m
ENTRY computation @main {
  ROOT %x = f32[2] parameter(), index=0
}
)");
  ir::Computation* c = m->entry();
  std::vector<ir::Instr*> wrt = {c->param(0)};
  auto g = gradients(*c, c->root(), wrt);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("floating-point scalar"), std::string::npos);
}

}  // namespace
}  // namespace kiln::autodiff
