// Rematerialization on the whole GPT-OSS training step: for every remat_policy, the step's
// outputs (new parameters, Adam moments, loss and every metric) are bit-identical to
// remat_policy=none, on the interpreter (RematPass applied to the traced step) and on the
// compiled CPU backend (the policy given to compile_cpu). Recomputation runs the same ops on
// the same saved inputs, so nothing may differ, not even in the last bit. The compiled
// report shows the activations kept for the backward pass falling with `full`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/model.h"
#include "kiln/passes/remat.h"
#include "kiln/train/step/step_program.h"

namespace kiln::passes {
namespace {

struct Step {
  std::unique_ptr<models::Model> model;
  train::StepProgram program;
  std::vector<ir::Literal> args;
};

// gpt-oss-tiny shrunk to 2 layers (one sliding, one global), 4 experts top-2, dropless
// grouped-matmul dispatch, 2 × 12 tokens: every kind of layer op, in seconds.
Step build_step() {
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32",
                       "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_num_decoder_layers=2",
                       "base_mlp_dim=24", "base_moe_mlp_dim=24", "num_experts=4", "num_experts_per_tok=2",
                       "vocab_size=64", "sliding_window_size=4", "max_target_length=12", "per_device_batch_size=2"};
  Result<config::Config> cfg = config::load(options);
  KILN_CHECK_OK(cfg);
  Step s;
  auto model = models::make_model(*cfg);
  KILN_CHECK_OK(model);
  s.model = std::move(*model);
  auto step_options = train::StepProgramOptions::from_config(*cfg);
  KILN_CHECK_OK(step_options);
  auto program = train::build_step_program(*s.model, *step_options);
  KILN_CHECK_OK(program);
  s.program = std::move(*program);
  auto params = interp::run(*train::build_init_program(s.model->params(), 3), {});
  KILN_CHECK_OK(params);
  s.args = *params;
  const ir::Computation& entry = *s.program.module->entry();
  std::mt19937_64 rng(11);
  for (int64_t i = s.program.num_params; i < s.program.num_args(); ++i) {
    ir::Literal l(entry.param(static_cast<int>(i))->shape());
    // Non-zero moments, so the AdamW update reads every input; step 3; a random batch.
    std::vector<double>& v = l.mutable_values();
    for (double& x : v) {
      if (i < s.program.step_arg()) x = 1e-3 * static_cast<double>(rng() % 1000 + 1);
    }
    if (i == s.program.step_arg()) v[0] = 3;
    l.round_all();
    s.args.push_back(std::move(l));
  }
  for (int field = 0; field < 4; ++field) {
    ir::Literal& l = s.args[s.program.batch_arg(field)];
    std::vector<double>& v = l.mutable_values();
    for (size_t k = 0; k < v.size(); ++k) {
      v[k] = field == 2 ? static_cast<double>(k % 12) : field == 3 ? 1.0 : static_cast<double>(rng() % 64);
    }
  }
  return s;
}

void expect_identical(const std::vector<ir::Literal>& want, const std::vector<ir::Literal>& got,
                      const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    double worst = 0;
    for (size_t k = 0; k < want[i].values().size(); ++k) {
      double a = want[i].values()[k], b = got[i].values()[k];
      worst = std::max(worst, std::abs(a - b) / std::max(1e-30, std::max(std::abs(a), std::abs(b))));
    }
    EXPECT_TRUE(want[i] == got[i]) << what << ": output " << i << " differs, worst relative " << worst;
  }
}

TEST(RematStep, EveryPolicyGivesTheInterpreterBitIdenticalOutputs) {
  Step s = build_step();
  auto want = interp::run(*s.program.module, s.args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  for (const std::string& policy : RematPolicy::supported_names()) {
    if (policy == "none") continue;
    std::unique_ptr<ir::Module> module = s.program.module->clone();
    RematPass remat(RematPolicy::from_name(policy).value());
    auto changed = remat.run(*module);
    ASSERT_TRUE(changed.ok()) << changed.status().to_string();
    EXPECT_TRUE(*changed) << policy << " recomputed nothing";
    ASSERT_TRUE(ops::verify(*module).ok()) << policy << ": " << ops::verify(*module).to_string();
    std::printf("remat_policy=%s: %lld -> %lld instructions\n", policy.c_str(),
                static_cast<long long>(s.program.module->instruction_count()),
                static_cast<long long>(module->instruction_count()));
    auto got = interp::run(*module, s.args);
    ASSERT_TRUE(got.ok()) << policy << ": " << got.status().to_string();
    expect_identical(*want, *got, "interpreter, remat_policy=" + policy);
  }
}

std::unique_ptr<backend::Executable> compile(const ir::Module& module, const std::string& policy, bool fuse) {
  backend::CompileOptions options;
  options.remat_policy = policy;
  options.fuse = fuse;
  auto exe = backend::compile_cpu(module, options);
  KILN_CHECK_OK(exe);
  return std::move(*exe);
}

std::vector<ir::Literal> run(backend::Executable& exe, const std::vector<ir::Literal>& args) {
  std::vector<backend::Buffer> buffers;
  for (const ir::Literal& l : args) buffers.push_back(backend::Buffer::from_literal(l));
  auto out = exe.run(buffers);
  KILN_CHECK_OK(out);
  std::vector<ir::Literal> literals;
  for (const backend::Buffer& b : *out) literals.push_back(b.to_literal());
  return literals;
}

// One generated kernel per op (fuse=false): the recomputed ops run exactly the kernels the
// saved ones ran, so every policy must give bit-identical outputs, and every policy keeps
// fewer activations for the backward pass than none.
TEST(RematStep, EveryPolicyGivesTheCompiledStepBitIdenticalOutputsAndSavesActivations) {
  Step s = build_step();
  std::unique_ptr<backend::Executable> none = compile(*s.program.module, "none", false);
  std::vector<ir::Literal> want = run(*none, s.args);
  const int64_t none_saved = none->report().saved_activation_bytes;
  for (const std::string& policy : RematPolicy::supported_names()) {
    if (policy == "none") continue;
    std::unique_ptr<backend::Executable> exe = compile(*s.program.module, policy, false);
    expect_identical(want, run(*exe, s.args), "compiled, remat_policy=" + policy);
    const backend::CompileReport& r = exe->report();
    std::printf("remat_policy=%s: %lld instructions run (none: %lld), saved activations %lld bytes (none: %lld)\n",
                policy.c_str(), static_cast<long long>(r.instructions_after),
                static_cast<long long>(none->report().instructions_after),
                static_cast<long long>(r.saved_activation_bytes), static_cast<long long>(none_saved));
    EXPECT_GT(r.instructions_after, none->report().instructions_after) << policy << ": nothing recomputed";
    EXPECT_LT(r.saved_activation_bytes, none_saved) << policy;
  }
}

// With fusion (the default) a recomputed elementwise chain lands in a different fused kernel
// than the saved one did, and the outputs move by rounding only: measured at most 1e-6
// relative (a few float32 ulps) after one step; the bound is 1e-5.
TEST(RematStep, FusedStepWithFullRematAgreesToRoundingAndPeaksLower) {
  Step s = build_step();
  std::unique_ptr<backend::Executable> none = compile(*s.program.module, "none", true);
  std::unique_ptr<backend::Executable> full = compile(*s.program.module, "full", true);
  std::vector<ir::Literal> want = run(*none, s.args), got = run(*full, s.args);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].values().size(), got[i].values().size());
    for (size_t k = 0; k < want[i].values().size(); ++k) {
      double a = want[i].values()[k], b = got[i].values()[k];
      ASSERT_LE(std::abs(a - b), 1e-5 * std::max(std::abs(a), 1e-3)) << "output " << i << " element " << k;
    }
  }
  std::printf("fused: peak of intermediate values %lld bytes with full, %lld with none\n",
              static_cast<long long>(full->report().peak_value_bytes),
              static_cast<long long>(none->report().peak_value_bytes));
  // On this 24-token step the saved activations are a small part of the peak: once loop
  // fusions read broadcasts and transposes in place, both policies reach the same peak
  // (727,992 bytes, set by values that remat does not touch), so only "never higher" holds here. That full remat lowers the peak
  // where activations dominate is checked on the GPT-OSS step in remat_schedule_test.
  EXPECT_LE(full->report().peak_value_bytes, none->report().peak_value_bytes);
}

}  // namespace
}  // namespace kiln::passes
