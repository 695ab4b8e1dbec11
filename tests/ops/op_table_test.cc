// The op-table test: walks every opcode and checks that its registry entry is complete, that
// every example verifies, round-trips through the text form and evaluates, and that every
// gradient rule agrees with central finite differences in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>
#include <set>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"

namespace kiln {
namespace {

using ir::Opcode;

std::vector<Opcode> all_opcodes() {
  std::vector<Opcode> out;
  for (int i = 0; i < ir::kNumOpcodes; ++i) out.push_back(static_cast<Opcode>(i));
  return out;
}

std::string op_label(const ::testing::TestParamInfo<Opcode>& info) {
  return std::string(ir::opcode_name(info.param));
}

class OpTable : public ::testing::TestWithParam<Opcode> {};

TEST_P(OpTable, EntryIsComplete) {
  Opcode op = GetParam();
  ASSERT_TRUE(ops::registry().has(op)) << ir::opcode_name(op) << " has no registry entry";
  const ops::OpDef& def = ops::op_def(op);
  EXPECT_TRUE(def.infer) << "missing shape rule";
  EXPECT_TRUE(def.eval) << "missing reference evaluation";
  EXPECT_TRUE(def.dim_map) << "missing dimension map (sharding rule hook)";
  EXPECT_TRUE(def.cost) << "missing cost";
  EXPECT_FALSE(def.examples.empty()) << "missing examples";
  if (def.grad == ops::GradKind::kRule) EXPECT_TRUE(def.vjp) << "gradient kind is kRule but no vjp";
  if (def.elementwise) {
    EXPECT_TRUE(def.scalar) << "elementwise op without a scalar function";
    EXPECT_TRUE(def.snippet) << "elementwise op without a C++ snippet";
  }
}

std::vector<ir::Literal> random_args(const ir::Computation& c, const ops::OpExample& ex, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::Literal> args;
  for (int i = 0; i < c.num_params(); ++i) {
    const ir::Shape& s = c.param(i)->shape();
    auto [lo, hi] = i < static_cast<int>(ex.ranges.size()) ? ex.ranges[i]
                    : ir::is_floating(s.dtype())          ? std::pair<double, double>{-2.0, 2.0}
                                                          : std::pair<double, double>{0.0, 4.0};
    args.push_back(testing::random_literal(s, rng, lo, hi));
  }
  return args;
}

TEST_P(OpTable, ExamplesVerifyRoundTripAndEvaluate) {
  const ops::OpDef& def = ops::op_def(GetParam());
  for (const auto& ex : def.examples) {
    auto module = ir::parse_module(ex.ir);
    ASSERT_TRUE(module.ok()) << module.status().to_string() << "\n" << ex.ir;
    ASSERT_TRUE(ops::verify(**module).ok()) << ops::verify(**module).to_string();
    std::string printed = ir::print_module(**module);
    auto reparsed = ir::parse_module(printed);
    ASSERT_TRUE(reparsed.ok()) << reparsed.status().to_string();
    EXPECT_EQ(ir::print_module(**reparsed), printed);
    bool uses_op = false;
    for (const auto& instr : (*module)->entry()->instructions()) {
      if (instr->opcode() != GetParam()) continue;
      uses_op = true;
      auto map = def.dim_map(*instr);
      ASSERT_EQ(static_cast<int>(map.size()), instr->num_operands());
      for (int i = 0; i < instr->num_operands(); ++i) {
        int rank = instr->operand(i)->shape().is_tuple() ? 0 : instr->operand(i)->shape().rank();
        EXPECT_EQ(static_cast<int>(map[i].size()), rank) << "dim map of operand " << i;
      }
      ops::Cost cost = def.cost(*instr);
      EXPECT_GE(cost.flops, 0);
      EXPECT_GE(cost.bytes_written, 0);
    }
    EXPECT_TRUE(uses_op) << "example does not use " << def.name << ":\n" << ex.ir;
    auto args = random_args(*(*module)->entry(), ex, 7);
    auto result = interp::run(**module, args);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
  }
}

// The traits passes read instead of opcode switches hold on every example: a split map (what
// sharding may follow) names real dims, a layout op's result holds only operand 0's values,
// a mapped read computes nothing, and batch rows name tuple elements whose dimension 0 is
// operand 0's.
TEST_P(OpTable, SplitLayoutAndBatchTraitsHoldOnExamples) {
  const ops::OpDef& def = ops::op_def(GetParam());
  if (def.elementwise) EXPECT_TRUE(def.split_map) << "an elementwise op always runs per block";
  if (def.rearranges) EXPECT_TRUE(def.split_map) << "a layout op runs per block";
  // A mapped read is operand 0 read at another index: a layout op, or a pad (operand 0's
  // values and the pad's value).
  if (def.mapped_read != ops::MappedRead::kNone) {
    EXPECT_FALSE(def.elementwise);
    EXPECT_TRUE(def.rearranges || GetParam() == Opcode::kPad) << "a mapped read computes nothing";
  }
  int rearrangements_checked = 0;
  for (const auto& ex : def.examples) {
    auto module = ir::parse_module(ex.ir);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    for (const auto& instr : (*module)->entry()->instructions()) {
      if (instr->opcode() != GetParam()) continue;
      if (def.split_map) {
        EXPECT_FALSE(instr->shape().is_tuple()) << "split maps are for array results";
        auto map = def.split_map(*instr);
        ASSERT_EQ(static_cast<int>(map.size()), instr->num_operands());
        for (int i = 0; i < instr->num_operands(); ++i) {
          const ir::Shape& s = instr->operand(i)->shape();
          ASSERT_EQ(static_cast<int>(map[i].size()), s.is_tuple() ? 0 : s.rank()) << "split map of operand " << i;
          for (int r : map[i]) EXPECT_TRUE(r >= -1 && r < instr->shape().rank()) << "split map names dim " << r;
        }
      }
      if (def.batch_rows) {
        std::vector<bool> rows = def.batch_rows(*instr);
        if (rows.empty()) continue;
        ASSERT_TRUE(instr->shape().is_tuple());
        ASSERT_EQ(rows.size(), instr->shape().elements().size());
        for (size_t e = 0; e < rows.size(); ++e) {
          if (!rows[e]) continue;
          EXPECT_EQ(instr->shape().elements()[e].dim(0), instr->operand(0)->shape().dim(0)) << "element " << e;
        }
      }
      if (def.rearranges && instr.get() == (*module)->entry()->root() &&
          instr->operand(0)->opcode() == Opcode::kParameter) {
        // Distinct operand values: every result value must be one of them.
        auto args = random_args(*(*module)->entry(), ex, 13);
        auto result = interp::run(**module, args);
        ASSERT_TRUE(result.ok()) << result.status().to_string();
        const ir::Literal& in = args[instr->operand(0)->attrs().get_int("index")];
        std::set<double> values(in.values().begin(), in.values().end());
        ASSERT_EQ(static_cast<int64_t>(values.size()), in.shape().num_elements()) << "operand values not distinct";
        for (double v : (*result)[0].values()) EXPECT_TRUE(values.count(v)) << v << " is not an operand value";
        ++rearrangements_checked;
      }
    }
  }
  if (def.rearranges) EXPECT_GT(rearrangements_checked, 0) << "no example shows the layout op on a parameter";
}

// Rewrites every floating-point type in the text to f64, for finite differences.
std::string to_f64(const std::string& text) {
  return std::regex_replace(text, std::regex(R"(\b(f32|bf16)\[)"), "f64[");
}

// Builds loss = sum_i sum(out_i * w_i) over the floating outputs of the example, with fixed
// random weights w_i, and returns the module with root (loss, d loss/d param_j...).
struct GradModule {
  std::unique_ptr<ir::Module> module;
  std::vector<int> float_params;
};

GradModule build_grad_module(const std::string& text) {
  auto parsed = ir::parse_module(to_f64(text));
  KILN_CHECK_OK(parsed);
  GradModule gm{std::move(*parsed), {}};
  ir::Computation* c = gm.module->entry();
  ops::Builder b(c);
  std::mt19937_64 rng(11);
  std::vector<ir::Instr*> outputs;
  ir::Instr* root = c->root();
  if (root->shape().is_tuple()) {
    for (int i = 0; i < static_cast<int>(root->shape().elements().size()); ++i) outputs.push_back(b.get_tuple_element(root, i));
  } else {
    outputs.push_back(root);
  }
  ir::Instr* loss = nullptr;
  for (ir::Instr* out : outputs) {
    if (out->shape().is_tuple() || !ir::is_floating(out->shape().dtype())) continue;
    ir::Instr* w = b.constant(testing::random_literal(out->shape(), rng, 0.5, 1.5));
    std::vector<int64_t> all_dims;
    for (int d = 0; d < out->shape().rank(); ++d) all_dims.push_back(d);
    ir::Instr* term = b.mul(out, w);
    if (!all_dims.empty()) term = b.reduce_sum(term, all_dims);
    loss = loss ? b.add(loss, term) : term;
  }
  if (!loss) return gm;
  std::vector<ir::Instr*> wrt;
  for (int i = 0; i < c->num_params(); ++i) {
    if (ir::is_floating(c->param(i)->shape().dtype())) {
      wrt.push_back(c->param(i));
      gm.float_params.push_back(i);
    }
  }
  auto grads = autodiff::gradients(*c, loss, wrt);
  KILN_CHECK_OK(grads);
  std::vector<ir::Instr*> root_elems = {loss};
  root_elems.insert(root_elems.end(), grads->begin(), grads->end());
  c->set_root(b.tuple(root_elems));
  return gm;
}

TEST_P(OpTable, GradientMatchesFiniteDifferences) {
  const ops::OpDef& def = ops::op_def(GetParam());
  if (def.grad != ops::GradKind::kRule) GTEST_SKIP() << def.name << " has no gradient rule";
  for (const auto& ex : def.examples) {
    GradModule gm = build_grad_module(ex.ir);
    if (gm.float_params.empty() || gm.module->entry()->root()->opcode() != Opcode::kTuple) continue;
    ASSERT_TRUE(ops::verify(*gm.module).ok()) << ops::verify(*gm.module).to_string();
    auto args = random_args(*gm.module->entry(), ex, 7);
    auto base = interp::run(*gm.module, args);
    ASSERT_TRUE(base.ok()) << base.status().to_string();
    auto loss_at = [&](std::vector<ir::Literal>& a) { return (*interp::run(*gm.module, a))[0].scalar_value(); };
    for (size_t k = 0; k < gm.float_params.size(); ++k) {
      int p = gm.float_params[k];
      const ir::Literal& grad = (*base)[1 + k];
      for (int64_t j = 0; j < args[p].shape().num_elements(); ++j) {
        double x = args[p].at(j);
        double eps = 1e-6 * std::max(1.0, std::fabs(x));
        args[p].mutable_values()[j] = x + eps;
        double up = loss_at(args);
        args[p].mutable_values()[j] = x - eps;
        double down = loss_at(args);
        args[p].mutable_values()[j] = x;
        double fd = (up - down) / (2 * eps);
        // Central differences in float64: truncation error ~eps^2, rounding ~1e-16/eps.
        EXPECT_NEAR(grad.at(j), fd, 1e-6 * (1.0 + std::fabs(fd)))
            << def.name << ": d/d(param " << p << ")[" << j << "]\n" << ex.ir;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpTable, ::testing::ValuesIn(all_opcodes()), op_label);

}  // namespace
}  // namespace kiln
