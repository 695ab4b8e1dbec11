// The default pipeline on a real program: a pre-norm transformer block (causal attention and
// a SwiGLU MLP) traced with the frontend, with reverse-mode gradients of a loss. The
// optimized module must verify after every pass, reach its fixed point, shrink, round-trip
// through text and compute bit-identical outputs with the interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/passes/registry.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using frontend::Tensor;

std::unique_ptr<ir::Module> trace_block() {
  constexpr int64_t kB = 2, kT = 4, kD = 8, kHeads = 2, kHidden = 12;
  frontend::Graph g("block");
  Tensor x = g.parameter("x", frontend::f32({kB, kT, kD}));
  Tensor r = g.parameter("r", frontend::f32({kB, kT, kD}));
  std::vector<Tensor> p = {
      g.parameter("g1", frontend::f32({kD})),           g.parameter("wq", frontend::f32({kD, kD})),
      g.parameter("wk", frontend::f32({kD, kD})),       g.parameter("wv", frontend::f32({kD, kD})),
      g.parameter("wo", frontend::f32({kD, kD})),       g.parameter("g2", frontend::f32({kD})),
      g.parameter("w_gate", frontend::f32({kD, kHidden})), g.parameter("w_up", frontend::f32({kD, kHidden})),
      g.parameter("w_down", frontend::f32({kHidden, kD})),
  };
  const int64_t dh = kD / kHeads;
  Tensor a_in = frontend::nn::rms_norm(x, p[0], 1e-5);
  auto heads = [&](const Tensor& w) { return frontend::matmul(a_in, w).reshape({kB, kT, kHeads, dh}); };
  Tensor q = heads(p[1]), k = heads(p[2]), v = heads(p[3]);
  Tensor scores = frontend::einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / std::sqrt(double(dh)));
  Tensor causal = g.iota({kT, kT}, 1) <= g.iota({kT, kT}, 0);
  Tensor probs = frontend::nn::softmax(frontend::where(causal, scores, -1e30), -1);
  Tensor context = frontend::einsum("bhqk,bkhd->bqhd", probs, v).reshape({kB, kT, kD});
  Tensor h = x + frontend::matmul(context, p[4]);
  Tensor m_in = frontend::nn::rms_norm(h, p[5], 1e-5);
  Tensor out = h + frontend::matmul(frontend::nn::swiglu(frontend::matmul(m_in, p[6]), frontend::matmul(m_in, p[7])), p[8]);
  Tensor loss = (out * r).sum();
  std::vector<ir::Instr*> wrt;
  for (const Tensor& t : p) wrt.push_back(t.instr());
  auto grads = autodiff::gradients(g.computation(), loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {out, loss};
  for (ir::Instr* gi : *grads) outputs.emplace_back(&g, gi);
  g.set_outputs(outputs);
  return g.release();
}

TEST(PipelineOnAModel, TransformerBlockWithGradientsKeepsItsValues) {
  std::unique_ptr<ir::Module> module = trace_block();
  ASSERT_TRUE(ops::verify(*module).ok()) << ops::verify(*module).to_string();
  std::unique_ptr<ir::Module> original = module->clone();
  PipelineOptions options;
  options.verify_each = true;
  options.fixed_point_cap_is_error = true;
  Pipeline pipeline = default_pipeline(options);
  auto changed = pipeline.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed);
  EXPECT_LT(module->instruction_count(), original->instruction_count());
  std::printf("default pipeline: %lld -> %lld instructions\n", static_cast<long long>(original->instruction_count()),
              static_cast<long long>(module->instruction_count()));

  std::string text = ir::print_module(*module);
  auto reparsed = ir::parse_module(text);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().to_string();
  EXPECT_EQ(ir::print_module(**reparsed), text);
  testing::expect_same_outputs(*original, *module);

  auto again = pipeline.run(*module);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(*again);
}

TEST(PipelineOnAModel, CleanupPassesRunOnFusedModules) {
  // Simplify, CSE and DCE also walk fusion bodies (called computations): after fusion they
  // must keep the module valid and its values unchanged, and DCE drops bodies of fusions
  // that become unused.
  std::unique_ptr<ir::Module> module = trace_block();
  std::unique_ptr<ir::Module> original = module->clone();
  PipelineOptions options;
  options.verify_each = true;
  options.fixed_point_cap_is_error = true;
  auto pipeline = pipeline_from_spec("dce,fix(simplify,cse,dce),fusion,fix(simplify,cse,dce)", options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().to_string();
  auto changed = pipeline->run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_GT(module->computations().size(), 1u);
  testing::expect_same_outputs(*original, *module);
  std::string text = ir::print_module(*module);
  auto reparsed = ir::parse_module(text);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().to_string();
  EXPECT_EQ(ir::print_module(**reparsed), text);
}

}  // namespace
}  // namespace kiln::passes
