// A tiny pre-norm transformer block (causal attention + SwiGLU MLP) written with the
// frontend: its IR text round-trips, its gradients match finite differences in float64, and
// its interpreter results match an independent PyTorch computation
// (tests/reference/transformer_block_ref.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"
#include "tests/testing/temp_path.h"

namespace kiln::frontend {
namespace {

constexpr int64_t kB = 2, kT = 6, kD = 8, kHeads = 2, kHidden = 12;
constexpr double kEps = 1e-5;

struct ParamInfo {
  const char* name;
  std::vector<int64_t> dims;
};
const std::vector<ParamInfo> kParams = {
    {"g1", {kD}}, {"wq", {kD, kD}}, {"wk", {kD, kD}}, {"wv", {kD, kD}}, {"wo", {kD, kD}},
    {"g2", {kD}}, {"w_gate", {kD, kHidden}}, {"w_up", {kD, kHidden}}, {"w_down", {kHidden, kD}},
};

// Traces block(x) and loss = sum(out * r); outputs (out, loss, d loss/d param...).
std::unique_ptr<ir::Module> trace_block(DType dtype) {
  Graph g("transformer_block");
  auto shape = [&](std::vector<int64_t> d) { return Shape(dtype, std::move(d)); };
  Tensor x = g.parameter("x", shape({kB, kT, kD}), {"activation_batch", "activation_length", "activation_embed"});
  Tensor r = g.parameter("r", shape({kB, kT, kD}));
  std::vector<Tensor> p;
  for (const auto& info : kParams) p.push_back(g.parameter(info.name, shape(info.dims)));
  const int64_t dh = kD / kHeads;
  Tensor out;
  {
    auto layer = g.scope("layers.0");
    Tensor a_in = nn::rms_norm(x, p[0], kEps).named("attention_norm");        // [B, T, D]
    auto heads = [&](const Tensor& w) { return matmul(a_in, w).reshape({kB, kT, kHeads, dh}); };
    Tensor q = heads(p[1]), k = heads(p[2]), v = heads(p[3]);                 // [B, T, H, Dh]
    Tensor scores = (einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / std::sqrt(double(dh)))).named("scores");
    Tensor row = g.iota({kT, kT}, 0), col = g.iota({kT, kT}, 1);
    Tensor causal = col <= row;                                               // [T, T]
    Tensor probs = nn::softmax(where(causal, scores, -1e30), -1);             // [B, H, T, T]
    Tensor context = einsum("bhqk,bkhd->bqhd", probs, v).reshape({kB, kT, kD});
    Tensor h = (x + matmul(context, p[4])).named("attention_out");
    Tensor m_in = nn::rms_norm(h, p[5], kEps);
    Tensor mlp = matmul(nn::swiglu(matmul(m_in, p[6]), matmul(m_in, p[7])), p[8]);
    out = (h + mlp).named("out");
  }
  Tensor loss = (out * r).sum().named("loss");
  std::vector<ir::Instr*> wrt;
  for (const Tensor& t : p) wrt.push_back(t.instr());
  auto grads = autodiff::gradients(g.computation(), loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {out, loss};
  for (ir::Instr* gi : *grads) outputs.emplace_back(&g, gi);
  g.set_outputs(outputs);
  return g.release();
}

std::vector<ir::Literal> random_inputs(DType dtype) {
  std::mt19937_64 rng(2024);
  std::vector<ir::Literal> args;
  args.push_back(testing::random_literal(Shape(dtype, {kB, kT, kD}), rng, -1.5, 1.5));  // x
  args.push_back(testing::random_literal(Shape(dtype, {kB, kT, kD}), rng, -1.0, 1.0));  // r
  for (const auto& info : kParams) {
    bool is_scale = info.dims.size() == 1;
    args.push_back(testing::random_literal(Shape(dtype, info.dims), rng, is_scale ? 0.5 : -0.6, is_scale ? 1.5 : 0.6));
  }
  return args;
}

TEST(TransformerBlock, TextRoundTripsExactly) {
  auto m = trace_block(DType::kF32);
  ASSERT_TRUE(ops::verify(*m).ok()) << ops::verify(*m).to_string();
  std::string text = ir::print_module(*m);
  auto parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(ir::print_module(**parsed), text);
  EXPECT_NE(text.find("name=\"layers.0.scores\""), std::string::npos);
  // The parsed module computes the same values as the traced one.
  auto args = random_inputs(DType::kF32);
  EXPECT_EQ((*interp::run(*m, args))[1], (*interp::run(**parsed, args))[1]);
}

TEST(TransformerBlock, GradientsMatchFiniteDifferencesInFloat64) {
  auto m = trace_block(DType::kF64);
  auto args = random_inputs(DType::kF64);
  auto base = interp::run(*m, args);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  // Check a spread of entries of every parameter (all of them would take minutes here).
  for (size_t p = 0; p < kParams.size(); ++p) {
    ir::Literal& param = args[2 + p];
    const ir::Literal& grad = (*base)[2 + p];
    for (int64_t j = 0; j < param.shape().num_elements(); j += 5) {
      double x = param.at(j);
      double eps = 1e-6;
      param.mutable_values()[j] = x + eps;
      double up = (*interp::run(*m, args))[1].scalar_value();
      param.mutable_values()[j] = x - eps;
      double down = (*interp::run(*m, args))[1].scalar_value();
      param.mutable_values()[j] = x;
      double fd = (up - down) / (2 * eps);
      // Central differences in float64: error ~eps^2 * f''' + 1e-16 / eps, far below 1e-6.
      EXPECT_NEAR(grad.at(j), fd, 1e-6 * (1 + std::fabs(fd))) << kParams[p].name << "[" << j << "]";
    }
  }
}

TEST(TransformerBlock, MatchesPyTorchReference) {
  const char* python = "/usr/bin/python3";
  if (std::system((std::string(python) + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "PyTorch (Debian python3-torch) is not installed";
  }
  auto m = trace_block(DType::kF32);
  auto args = random_inputs(DType::kF32);
  auto kiln_out = interp::run(*m, args);
  ASSERT_TRUE(kiln_out.ok());

  nlohmann::json in;
  in["dims"] = {{"heads", kHeads}, {"eps", kEps}};
  auto put = [&](const std::string& name, const ir::Literal& lit) {
    in["tensors"][name] = {{"shape", lit.shape().dims()}, {"data", lit.values()}};
  };
  put("x", args[0]);
  put("r", args[1]);
  for (size_t p = 0; p < kParams.size(); ++p) put(kParams[p].name, args[2 + p]);
  std::string dir = ::kiln::testing::temp_path("kiln_block").string();
  std::string in_path = dir + "_in.json", out_path = dir + "_out.json";
  std::ofstream(in_path) << in.dump();
  std::string script = std::string(KILN_SOURCE_DIR) + "/tests/reference/transformer_block_ref.py";
  ASSERT_EQ(std::system((std::string(python) + " " + script + " " + in_path + " " + out_path).c_str()), 0);
  nlohmann::json ref = nlohmann::json::parse(std::ifstream(out_path));

  // Both sides compute in float32 with different summation orders (the interpreter rounds
  // each op's exact result once; PyTorch accumulates in float32): values of order 1 agree
  // to a few float32 ulps per op over ~30 ops, so 1e-4 relative is a safe, tight bound.
  auto expect_close = [](const ir::Literal& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(static_cast<size_t>(got.shape().num_elements()), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got.at(static_cast<int64_t>(i)), want[i], 1e-4 * (1 + std::fabs(want[i]))) << what << "[" << i << "]";
    }
  };
  expect_close((*kiln_out)[0], ref["out"].get<std::vector<double>>(), "out");
  EXPECT_NEAR((*kiln_out)[1].scalar_value(), ref["loss"].get<double>(), 1e-3);
  for (size_t p = 0; p < kParams.size(); ++p) {
    expect_close((*kiln_out)[2 + p], ref["grad." + std::string(kParams[p].name)].get<std::vector<double>>(),
                 std::string("grad.") + kParams[p].name);
  }
}

}  // namespace
}  // namespace kiln::frontend
