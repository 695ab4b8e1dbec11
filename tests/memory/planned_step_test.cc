// The compiled training step running from its memory plan: donated state updated in place,
// the arena reused run after run, results equal to the interpreter; and the planned peak
// against the resident memory a run actually adds (VmHWM from /proc/self/status).
#include <gtest/gtest.h>
#include <malloc.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"

// Under AddressSanitizer (make asan) freed blocks wait in a quarantine before reuse, so the
// resident growth would count memory the step already released. This binary alone turns the
// quarantine off; the comparison below is the same in every build.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=0"; }
#endif

namespace kiln::memory {
namespace {

config::Config load_config(std::vector<std::string> overrides) {
  std::vector<std::string> all = {"model_name=gpt-oss-tiny", "override_model_config=true", "dtype=float32",
                                  "weight_dtype=float32"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = all;
  Result<config::Config> c = config::load(options);
  KILN_CHECK_OK(c);
  return *c;
}

struct Step {
  std::unique_ptr<models::Model> model;
  train::StepProgram program;
  std::vector<ir::Literal> args;
};

Step build_step(const config::Config& cfg, int64_t batch, int64_t seq, int64_t vocab) {
  Step s;
  auto model = models::make_model(cfg);
  KILN_CHECK_OK(model);
  s.model = std::move(*model);
  auto options = train::StepProgramOptions::from_config(cfg);
  KILN_CHECK_OK(options);
  auto program = train::build_step_program(*s.model, *options);
  KILN_CHECK_OK(program);
  s.program = std::move(*program);
  auto init = train::build_init_program(s.model->params(), 3);
  auto params = interp::run(*init, {});
  KILN_CHECK_OK(params);
  const ir::Computation& entry = *s.program.module->entry();
  s.args = *params;
  for (int64_t i = s.program.num_params; i < s.program.num_args(); ++i) {
    s.args.emplace_back(entry.param(static_cast<int>(i))->shape());  // zero moments, step 0
  }
  std::mt19937_64 rng(7);
  for (int field = 0; field < 4; ++field) {
    ir::Literal& l = s.args[s.program.batch_arg(field)];
    for (int64_t i = 0; i < batch * seq; ++i) {
      double v = field == 2 ? static_cast<double>(i % seq) : field == 3 ? 1.0 : static_cast<double>(rng() % vocab);
      l.mutable_values()[i] = v;
    }
  }
  return s;
}

backend::CompileOptions donating(const train::StepProgram& program) {
  backend::CompileOptions options;
  for (int64_t i = 0; i < program.num_state(); ++i) options.donated.push_back({i, i});
  return options;
}

TEST(PlannedStep, CompiledGptOssStepEqualsTheInterpreterWithStateUpdatedInPlace) {
  config::Config cfg = load_config({"base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
                                    "base_num_decoder_layers=2", "base_mlp_dim=24", "base_moe_mlp_dim=24",
                                    "num_experts=4", "num_experts_per_tok=2", "vocab_size=64",
                                    "sliding_window_size=4", "max_target_length=12", "per_device_batch_size=2"});
  Step s = build_step(cfg, 2, 12, 64);
  auto exe = backend::compile_cpu(*s.program.module, donating(s.program));
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  const backend::CompileReport& r = (*exe)->report();
  // Every parameter and both moments are written into their own argument.
  EXPECT_GE(r.donated_in_place, 3 * s.program.num_params);
  EXPECT_GT(r.in_place_reuses, 0);
  EXPECT_GT(r.arena_bytes, 0);
  EXPECT_GE(r.arena_bytes, r.peak_value_bytes - r.output_bytes);

  std::vector<ir::Literal> want_args = s.args;
  std::vector<backend::Buffer> got_args;
  for (const ir::Literal& a : s.args) got_args.push_back(backend::Buffer::from_literal(a));
  for (int step = 0; step < 3; ++step) {
    auto want = interp::run(*s.program.module, want_args);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    std::vector<const void*> storage;
    for (const auto& b : got_args) storage.push_back(b.data());
    auto got = (*exe)->run(got_args);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    int in_place = 0;
    for (size_t i = 0; i < want->size(); ++i) {
      const ir::Literal& w = (*want)[i];
      double scale = 0;
      for (double v : w.values()) scale = std::max(scale, std::fabs(v));
      for (int64_t j = 0; j < w.shape().num_elements(); ++j) {
        // f32 with different summation orders (sgemm blocking, fused reductions): 1e-4 of the
        // output's scale; three steps of AdamW keep the error at that level.
        ASSERT_NEAR((*got)[i].get(j), w.at(j), 1e-4 * (1.0 + scale)) << "step " << step << " output " << i << " [" << j << "]";
      }
      if (static_cast<int64_t>(i) < s.program.num_state() && (*got)[i].data() == storage[i]) ++in_place;
    }
    EXPECT_EQ(in_place, r.donated_in_place) << "donated outputs not in their argument's storage";
    for (int64_t i = 0; i < s.program.num_state(); ++i) {
      want_args[i] = (*want)[i];
      got_args[i] = (*got)[i];
    }
  }
}

int64_t status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  }
  return -1;
}

// Compiles the step with `remat_policy`, runs it once and compares the planned peak with
// the growth of resident memory.
void expect_planned_peak_matches_measured(const std::string& remat_policy) {
  config::Config cfg = load_config({"base_emb_dim=128", "base_num_query_heads=4", "base_num_kv_heads=2",
                                    "head_dim=32", "base_num_decoder_layers=2", "base_mlp_dim=128",
                                    "base_moe_mlp_dim=128", "vocab_size=2048", "max_target_length=256",
                                    "per_device_batch_size=4"});
  Step s = build_step(cfg, 4, 256, 2048);
  std::vector<backend::Buffer> args;
  for (const ir::Literal& a : s.args) args.push_back(backend::Buffer::from_literal(a));
  // Large blocks always come from fresh mmap (not recycled heap pages the baseline already
  // counts), so every page a run touches shows up in its resident growth.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  {
    // Warm-up with a twin executable: loads kernel code, oneDNN's JIT kernels and OpenMP's
    // threads, which are not the program's memory.
    backend::CompileOptions warm_options;
    warm_options.remat_policy = remat_policy;
    auto warm = backend::compile_cpu(*s.program.module, warm_options);
    ASSERT_TRUE(warm.ok()) << warm.status().to_string();
    ASSERT_TRUE((*warm)->run(args).ok());
  }
  backend::CompileOptions options = donating(s.program);
  options.remat_policy = remat_policy;
  auto exe = backend::compile_cpu(*s.program.module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  const backend::CompileReport& r = (*exe)->report();
  malloc_trim(0);
  if (!std::ofstream("/proc/self/clear_refs").write("5", 1)) GTEST_SKIP() << "cannot reset VmHWM";
  int64_t base = status_kib("VmRSS:");
  // The reset took: the high-water mark is back at (about) the current size.
  ASSERT_LE(status_kib("VmHWM:"), base + 1024) << "VmRSS " << base << " kB";
  auto out = (*exe)->run(args);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  double measured = 1024.0 * static_cast<double>(status_kib("VmHWM:") - base);
  double planned = static_cast<double>(r.arena_bytes + r.output_bytes + r.kernel_scratch_bytes);
  std::printf("remat_policy=%s: planned %.1f MiB (arena %.1f, outputs %.3f, kernel scratch %.1f); measured growth "
              "%.1f MiB\n",
              remat_policy.c_str(), planned / (1 << 20), r.arena_bytes / double(1 << 20), r.output_bytes / double(1 << 20),
              r.kernel_scratch_bytes / double(1 << 20), measured / (1 << 20));
  EXPECT_GT(r.arena_bytes, 16 << 20);  // big enough that page granularity and stacks do not matter
  EXPECT_NEAR(measured, planned, 0.10 * planned);
}

TEST(PlannedStep, PlannedPeakMatchesMeasuredResidentGrowth) { expect_planned_peak_matches_measured("none"); }

// With remat the schedule runs the recomputation lazily, inside the backward pass: the plan
// must still describe what the run touches.
TEST(PlannedStep, PlannedPeakMatchesMeasuredResidentGrowthWithFullRemat) { expect_planned_peak_matches_measured("full"); }

}  // namespace
}  // namespace kiln::memory
