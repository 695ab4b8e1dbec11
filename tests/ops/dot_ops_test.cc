// dot_general: shape rule, reference evaluation against hand-computed values and a naive
// loop over random layouts, gradient rule against the naive loop's gradients, cost and
// dimension map.
#include <gtest/gtest.h>

#include "tests/testing/ir_eval.h"

#include <random>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln {
namespace ir {
// Failure messages show the literal's shape and values.
void PrintTo(const Literal& literal, std::ostream* os) { *os << literal.to_string(); }
}  // namespace ir
namespace {

using ir::DType;
using ir::Literal;
using ir::Shape;

Shape shape_of(const std::string& text) {
  auto s = ir::parse_shape(text);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

Literal lit(const std::string& shape, std::vector<double> values) { return Literal(shape_of(shape), std::move(values)); }

std::string dot_module(const std::string& lhs, const std::string& rhs, const std::string& out, const std::string& attrs) {
  return "module @t\n\nENTRY computation @main {\n  %a = " + lhs + " parameter(), index=0\n  %b = " + rhs +
         " parameter(), index=1\n  ROOT %d = " + out + " dot_general(%a, %b), " + attrs + "\n}\n";
}

Literal run(const std::string& text, std::vector<Literal> args) { return testing::run_module(text, args); }

using testing::verify_error;

const char* kMatmul = "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}";

TEST(DotGeneral, MatmulMatchesHandComputedProduct) {
  Literal a = lit("f32[2,3]", {1, 2, 3, 4, 5, 6});
  Literal b = lit("f32[3,4]", {1, 0, 2, 1, 0, 1, 1, 2, 1, 1, 0, 3});
  Literal out = run(dot_module("f32[2,3]", "f32[3,4]", "f32[2,4]", kMatmul), {a, b});
  EXPECT_EQ(out, lit("f32[2,4]", {4, 5, 4, 14, 10, 11, 13, 32}));
}

TEST(DotGeneral, BatchedMatmulKeepsBatchesApart) {
  // [2,1,2] x [2,2,1]: batch 0 is [1,2].[3,4] = 11, batch 1 is [5,6].[7,8] = 83.
  Literal out = run(dot_module("f32[2,1,2]", "f32[2,2,1]", "f32[2,1,1]",
                               "lhs_batch={0}, lhs_contract={2}, rhs_batch={0}, rhs_contract={1}"),
                    {lit("f32[2,1,2]", {1, 2, 5, 6}), lit("f32[2,2,1]", {3, 4, 7, 8})});
  EXPECT_EQ(out, lit("f32[2,1,1]", {11, 83}));
}

TEST(DotGeneral, ContractingTwoDimsPairsThemInListOrder) {
  Literal a = lit("f32[2,2]", {1, 2, 3, 4});
  Literal b = lit("f32[2,2]", {5, 6, 7, 8});
  // {1,0} with {0,1}: sum_ij a[i,j] b[j,i] = trace(a b) = 5 + 14 + 18 + 32.
  EXPECT_EQ(run(dot_module("f32[2,2]", "f32[2,2]", "f32[]", "lhs_batch={}, lhs_contract={1,0}, rhs_batch={}, rhs_contract={0,1}"),
                {a, b}),
            lit("f32[]", {69}));
  // {0,1} with {0,1}: sum_ij a[i,j] b[i,j] = 5 + 12 + 21 + 32.
  EXPECT_EQ(run(dot_module("f32[2,2]", "f32[2,2]", "f32[]", "lhs_batch={}, lhs_contract={0,1}, rhs_batch={}, rhs_contract={0,1}"),
                {a, b}),
            lit("f32[]", {70}));
}

TEST(DotGeneral, AttentionScoresLayout) {
  // q [b=1,t=2,h=2,d=2] x k [b=1,s=2,h=2,d=2], batch {0,2}, contract {3} -> [b,h,t,s].
  Literal q = lit("f32[1,2,2,2]", {1, 0, 0, 1, 1, 1, 2, 0});
  Literal k = lit("f32[1,2,2,2]", {1, 2, 3, 4, 0, 1, 1, 0});
  Literal out = run(dot_module("f32[1,2,2,2]", "f32[1,2,2,2]", "f32[1,2,2,2]",
                               "lhs_batch={0,2}, lhs_contract={3}, rhs_batch={0,2}, rhs_contract={3}"),
                    {q, k});
  EXPECT_EQ(out, lit("f32[1,2,2,2]", {1, 0, 3, 1, 4, 0, 6, 2}));
}

TEST(DotGeneral, DeclaredF32ResultOfBf16OperandsAccumulatesWithoutBf16Rounding) {
  // 1 + 2^-8 is exact in f32 but rounds to 1 in bf16 (a tie, to even).
  Literal a = lit("bf16[2]", {1.0, 1.0 / 256});
  Literal b = lit("bf16[2]", {1.0, 1.0});
  const char* attrs = "lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}";
  EXPECT_EQ(run(dot_module("bf16[2]", "bf16[2]", "f32[]", attrs), {a, b}), lit("f32[]", {1.0 + 1.0 / 256}));
  EXPECT_EQ(run(dot_module("bf16[2]", "bf16[2]", "bf16[]", attrs), {a, b}), lit("bf16[]", {1.0}));
}

TEST(DotGeneral, IntegerOperandsGiveExactIntegerProducts) {
  Literal out = run(dot_module("s32[1,2]", "s32[2,1]", "s32[1,1]", kMatmul), {lit("s32[1,2]", {-3, 100000}), lit("s32[2,1]", {7, 20000})});
  EXPECT_EQ(out, lit("s32[1,1]", {-21 + 2000000000.0}));
}

TEST(DotGeneral, OuterProductWithoutContraction) {
  Literal out = run(dot_module("f32[2]", "f32[3]", "f32[2,3]", "lhs_batch={}, lhs_contract={}, rhs_batch={}, rhs_contract={}"),
                    {lit("f32[2]", {1, -2}), lit("f32[3]", {3, 4, 5})});
  EXPECT_EQ(out, lit("f32[2,3]", {3, 4, 5, -6, -8, -10}));
}

// ---- a naive reference over arbitrary layouts, with the gradients of sum(g * dot) ----

struct Layout {
  std::string lhs, rhs;
  std::vector<int64_t> lb, rb, lc, rc;
};

std::vector<int64_t> rest(int rank, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(a.begin(), a.end(), d) == a.end() && std::find(b.begin(), b.end(), d) == b.end()) out.push_back(d);
  }
  return out;
}

int64_t flat(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t f = 0;
  for (size_t i = 0; i < dims.size(); ++i) f = f * dims[i] + index[i];
  return f;
}

// Calls fn(index) for every multi-index of dims.
template <typename Fn>
void each(const std::vector<int64_t>& dims, Fn fn) {
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  for (int64_t n = 0; n < total; ++n) {
    fn(idx);
    for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
}

struct Naive {
  std::vector<double> out, dlhs, drhs;
};

Naive naive_dot(const Layout& l, const Literal& a, const Literal& b, const std::vector<double>& g) {
  const auto& ad = a.shape().dims();
  const auto& bd = b.shape().dims();
  std::vector<int64_t> lf = rest(a.shape().rank(), l.lb, l.lc), rf = rest(b.shape().rank(), l.rb, l.rc);
  std::vector<int64_t> out_dims, cdims;
  for (int64_t d : l.lb) out_dims.push_back(ad[d]);
  for (int64_t d : lf) out_dims.push_back(ad[d]);
  for (int64_t d : rf) out_dims.push_back(bd[d]);
  for (int64_t d : l.lc) cdims.push_back(ad[d]);
  Naive n;
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  n.out.assign(total, 0.0);
  n.dlhs.assign(a.values().size(), 0.0);
  n.drhs.assign(b.values().size(), 0.0);
  each(out_dims, [&](const std::vector<int64_t>& r) {
    each(cdims, [&](const std::vector<int64_t>& c) {
      std::vector<int64_t> ai(ad.size()), bi(bd.size());
      size_t p = 0;
      for (size_t i = 0; i < l.lb.size(); ++i, ++p) ai[l.lb[i]] = bi[l.rb[i]] = r[p];
      for (int64_t d : lf) ai[d] = r[p++];
      for (int64_t d : rf) bi[d] = r[p++];
      for (size_t i = 0; i < l.lc.size(); ++i) ai[l.lc[i]] = bi[l.rc[i]] = c[i];
      int64_t fo = flat(r, out_dims), fa = flat(ai, ad), fb = flat(bi, bd);
      n.out[fo] += a.at(fa) * b.at(fb);
      n.dlhs[fa] += g[fo] * b.at(fb);
      n.drhs[fb] += g[fo] * a.at(fa);
    });
  });
  return n;
}

std::vector<Layout> layouts() {
  return {
      {"f64[3,4]", "f64[4,5]", {}, {}, {1}, {0}},                    // matmul
      {"f64[3,4]", "f64[5,4]", {}, {}, {1}, {1}},                    // x @ W^T
      {"f64[2,3,4]", "f64[2,4,5]", {0}, {0}, {2}, {1}},              // batched
      {"f64[3,2,4]", "f64[4,3,5]", {}, {}, {2, 0}, {0, 1}},          // two dims, out of order
      {"f64[2,3,2,4]", "f64[2,5,2,4]", {0, 2}, {0, 2}, {3}, {3}},    // attention scores
      {"f64[2,2,3,5]", "f64[2,5,2,4]", {0, 1}, {0, 2}, {3}, {1}},    // attention output
      {"f64[2,3]", "f64[4,3,2]", {0}, {2}, {1}, {1}},                // batch dim last in rhs
      {"f64[3,2,4]", "f64[2,3]", {1}, {0}, {}, {}},                  // batch, no contraction
      {"f64[5]", "f64[5]", {}, {}, {0}, {0}},                        // vector dot
  };
}

std::string ints(const std::vector<int64_t>& v) { return ir::dims_to_string(v); }

Literal random_lit(const Shape& s, std::mt19937_64& rng) {
  std::vector<double> v(s.num_elements());
  for (double& x : v) x = std::uniform_real_distribution<double>(-2, 2)(rng);
  return Literal(s, std::move(v));
}

TEST(DotGeneral, EvaluationMatchesNaiveLoopsOnEveryLayout) {
  std::mt19937_64 rng(3);
  for (const Layout& l : layouts()) {
    Shape a = shape_of(l.lhs), b = shape_of(l.rhs);
    ir::Attrs attrs{{"lhs_batch", l.lb}, {"rhs_batch", l.rb}, {"lhs_contract", l.lc}, {"rhs_contract", l.rc}};
    std::vector<Shape> shapes = {a, b};
    auto out = ops::infer_shape(ir::Opcode::kDotGeneral, shapes, attrs, nullptr);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::string text = dot_module(l.lhs, l.rhs, out->to_string(),
                                  "lhs_batch=" + ints(l.lb) + ", lhs_contract=" + ints(l.lc) + ", rhs_batch=" + ints(l.rb) +
                                      ", rhs_contract=" + ints(l.rc));
    Literal x = random_lit(a, rng), y = random_lit(b, rng);
    Naive n = naive_dot(l, x, y, std::vector<double>(out->num_elements(), 0.0));
    Literal got = run(text, {x, y});
    ASSERT_EQ(got.shape(), *out);
    for (size_t i = 0; i < n.out.size(); ++i) EXPECT_NEAR(got.at(i), n.out[i], 1e-12) << text << " at " << i;
  }
}

// Builds lhs, rhs and g parameters, applies the gradient rule to the dot_general and
// returns (dlhs, drhs) evaluated by the interpreter.
std::vector<Literal> vjp_of(const Layout& l, DType result_dtype, const Literal& x, const Literal& y, const Literal& g) {
  ir::Module m("vjp");
  ir::Computation* c = m.add_computation("main");
  m.set_entry(c);
  ops::Builder b(c);
  ir::Instr* lhs = b.parameter(0, x.shape());
  ir::Instr* rhs = b.parameter(1, y.shape());
  ir::Instr* dot = b.dot_general(lhs, rhs, l.lb, l.rb, l.lc, l.rc, result_dtype);
  ir::Instr* gp = b.parameter(2, g.shape());
  EXPECT_EQ(gp->shape(), dot->shape());
  ops::VjpContext ctx{b, dot, {gp}};
  std::vector<ir::Instr*> grads = ops::op_def(ir::Opcode::kDotGeneral).vjp(ctx);
  EXPECT_EQ(grads.size(), 2u);
  c->set_root(b.tuple(grads));
  Status v = ops::verify(m);
  EXPECT_TRUE(v.ok()) << v.to_string();
  std::vector<Literal> args = {x, y, g};
  auto r = interp::run(m, args);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<Literal>{};
}

TEST(DotGeneral, GradientRuleMatchesNaiveGradientsOnEveryLayout) {
  std::mt19937_64 rng(5);
  for (const Layout& l : layouts()) {
    Shape a = shape_of(l.lhs), b = shape_of(l.rhs);
    ir::Attrs attrs{{"lhs_batch", l.lb}, {"rhs_batch", l.rb}, {"lhs_contract", l.lc}, {"rhs_contract", l.rc}};
    std::vector<Shape> shapes = {a, b};
    Shape out = *ops::infer_shape(ir::Opcode::kDotGeneral, shapes, attrs, nullptr);
    Literal x = random_lit(a, rng), y = random_lit(b, rng), g = random_lit(out, rng);
    Naive n = naive_dot(l, x, y, g.values());
    std::vector<Literal> grads = vjp_of(l, DType::kF64, x, y, g);
    ASSERT_EQ(grads.size(), 2u);
    ASSERT_EQ(grads[0].shape(), a);
    ASSERT_EQ(grads[1].shape(), b);
    for (size_t i = 0; i < n.dlhs.size(); ++i) EXPECT_NEAR(grads[0].at(i), n.dlhs[i], 1e-12) << l.lhs << " x " << l.rhs;
    for (size_t i = 0; i < n.drhs.size(); ++i) EXPECT_NEAR(grads[1].at(i), n.drhs[i], 1e-12) << l.lhs << " x " << l.rhs;
  }
}

TEST(DotGeneral, MixedPrecisionGradientsComeBackInOperandDtype) {
  // bf16 x bf16 -> f32: the f32 gradient flows back as bf16 for each operand.
  Layout l{"bf16[2,3]", "bf16[3,2]", {}, {}, {1}, {0}};
  Literal x = lit("bf16[2,3]", {1, 2, 3, 4, 5, 6});
  Literal y = lit("bf16[3,2]", {1, 0, 0, 1, 1, 1});
  Literal g = lit("f32[2,2]", {1, 2, 3, 4});
  std::vector<Literal> grads = vjp_of(l, DType::kF32, x, y, g);
  ASSERT_EQ(grads.size(), 2u);
  // dlhs = g y^T, drhs = x^T g.
  EXPECT_EQ(grads[0], lit("bf16[2,3]", {1, 2, 3, 3, 4, 7}));
  EXPECT_EQ(grads[1], lit("bf16[3,2]", {13, 18, 17, 24, 21, 30}));
}

// ---- shape rule errors ----

TEST(DotGeneral, RejectsMismatchedDtypes) {
  std::string e = verify_error(dot_module("f32[2,3]", "bf16[3,4]", "f32[2,4]", kMatmul));
  EXPECT_NE(e.find("must share a dtype"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16[3,4]"), std::string::npos) << e;
}

TEST(DotGeneral, RejectsContractedSizeMismatch) {
  std::string e = verify_error(dot_module("f32[2,3]", "f32[4,5]", "f32[2,5]", kMatmul));
  EXPECT_NE(e.find("contracted sizes differ: lhs dim 1 is 3 but rhs dim 0 is 4"), std::string::npos) << e;
}

TEST(DotGeneral, RejectsBatchSizeMismatchAndUnequalListLengths) {
  std::string e = verify_error(dot_module("f32[2,3,4]", "f32[5,4,6]", "f32[2,3,6]",
                                          "lhs_batch={0}, lhs_contract={2}, rhs_batch={0}, rhs_contract={1}"));
  EXPECT_NE(e.find("batch sizes differ: lhs dim 0 is 2 but rhs dim 0 is 5"), std::string::npos) << e;
  e = verify_error(dot_module("f32[2,3,4]", "f32[2,4,6]", "f32[2,3,6]",
                              "lhs_batch={0}, lhs_contract={2}, rhs_batch={}, rhs_contract={1}"));
  EXPECT_NE(e.find("lhs_batch {0} and rhs_batch {} must have the same length"), std::string::npos) << e;
}

TEST(DotGeneral, RejectsRepeatedAndOutOfRangeDims) {
  std::string e = verify_error(dot_module("f32[3,3]", "f32[3,3]", "f32[3]",
                                          "lhs_batch={0}, lhs_contract={0}, rhs_batch={0}, rhs_contract={1}"));
  EXPECT_NE(e.find("lhs_batch + lhs_contract repeats dimension 0"), std::string::npos) << e;
  e = verify_error(dot_module("f32[2,3]", "f32[3,4]", "f32[2,4]", "lhs_batch={}, lhs_contract={2}, rhs_batch={}, rhs_contract={0}"));
  EXPECT_NE(e.find("lhs_batch + lhs_contract has dimension 2 outside [0, 2)"), std::string::npos) << e;
}

TEST(DotGeneral, DeclaredResultMayOnlyChangeFloatingDtype) {
  std::string e = verify_error(dot_module("f32[2,3]", "f32[3,4]", "s32[2,4]", kMatmul));
  EXPECT_NE(e.find("only a floating result dtype may differ"), std::string::npos) << e;
  e = verify_error(dot_module("f32[2,3]", "f32[3,4]", "f32[4,2]", kMatmul));
  EXPECT_NE(e.find("result is f32[2,4] but f32[4,2] was declared"), std::string::npos) << e;
  e = verify_error(dot_module("f32[2,3]", "f32[3,4]", "f32[2,4]", "lhs_batch={}, lhs_contract={1}, rhs_contract={0}"));
  EXPECT_NE(e.find("needs attribute 'rhs_batch'"), std::string::npos) << e;
}

// ---- cost and sharding rule ----

TEST(DotGeneral, CostCountsTwoFlopsPerMultiplyAdd) {
  auto m = ir::parse_module(dot_module("f32[2,3,2,4]", "f32[2,5,2,4]", "f32[2,2,3,5]",
                                       "lhs_batch={0,2}, lhs_contract={3}, rhs_batch={0,2}, rhs_contract={3}"));
  ASSERT_TRUE(m.ok());
  const ir::Instr* d = (*m)->entry()->root();
  ops::Cost c = ops::cost_of(*d);
  EXPECT_EQ(c.flops, 2.0 * (2 * 2) * 3 * 5 * 4);
  EXPECT_EQ(c.bytes_written, 4.0 * 2 * 2 * 3 * 5);
  auto map = ops::op_def(ir::Opcode::kDotGeneral).dim_map(*d);
  // lhs [b,t,h,d] -> b:0, t:2, h:1, d contracted; rhs [b,s,h,d] -> b:0, s:3, h:1.
  EXPECT_EQ(map, (std::vector<std::vector<int>>{{0, 2, 1, -1}, {0, 3, 1, -1}}));
}

}  // namespace
}  // namespace kiln
