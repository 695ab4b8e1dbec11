// The step program and the trainer on small models (tests/train/tiny_models.h), run on the
// reference interpreter: the loss falls on a reused batch, runs are bitwise reproducible,
// metrics.jsonl has its fields, and a NaN/Inf loss stops the run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/model.h"
#include "kiln/optim/schedule.h"
#include "kiln/train/memory_budget.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/synthetic_data.h"
#include "kiln/train/trainer.h"
#include "tests/train/trainer_testing.h"
#include "tests/train/tiny_models.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

constexpr int64_t kVocab = 32;
constexpr int64_t kDim = 8;

std::string temp_dir(const std::string& name) {
  std::filesystem::path p = ::kiln::testing::temp_path("kiln_train_test_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

// A tiny run: 2 sequences of 8 tokens over 32 tokens, lr 3e-2 with a short warmup.
config::Config tiny_config(const std::string& out_dir, std::vector<std::string> extra = {}) {
  config::LoadOptions lo;
  lo.overrides = {"vocab_size=32", "per_device_batch_size=2", "max_target_length=8", "steps=12",
                  "learning_rate=3e-2", "warmup_steps_fraction=0.1", "backend=interpreter",
                  "reuse_example_batch=1", "log_period=1", "run_name=tiny",
                  "base_output_directory=" + out_dir};
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

std::unique_ptr<Trainer> make_trainer(const config::Config& cfg, std::unique_ptr<models::Model> model) {
  TrainerOptions options;
  options.console = nullptr;
  auto t = Trainer::create(cfg, std::move(model), options);
  KILN_CHECK(t.ok()) << t.status().to_string();
  return std::move(*t);
}

std::vector<double> losses(const Trainer& t) { return testing::step_losses(t); }

TEST(StepProgram, LayoutAndOneStepAgainstTheSchedule) {
  config::Config cfg = tiny_config(temp_dir("layout"));
  testing::TinyLm model(kVocab, kDim);
  auto options = StepProgramOptions::from_config(cfg);
  ASSERT_TRUE(options.ok());
  auto program = build_step_program(model, *options);
  ASSERT_TRUE(program.ok()) << program.status().to_string();
  const ir::Computation& entry = *program->module->entry();
  EXPECT_EQ(program->num_params, 4);
  EXPECT_EQ(entry.num_params(), program->num_args());
  EXPECT_EQ(entry.param(program->step_arg())->shape(), ir::Shape(ir::DType::kS32, {}));
  EXPECT_EQ(entry.param(program->batch_arg(0))->shape(), ir::Shape(ir::DType::kS32, {2, 8}));
  EXPECT_EQ(entry.root()->shape().elements().size(),
            static_cast<size_t>(program->metric_output(StepMetric::kCount)));
  // State outputs mirror the state inputs, so a runtime can donate them.
  for (int64_t i = 0; i < program->num_state(); ++i) {
    EXPECT_EQ(entry.root()->shape().element(static_cast<int>(i)), entry.param(static_cast<int>(i))->shape()) << i;
  }
  // adamw_mask default is empty: everything decays.
  EXPECT_EQ(program->decay, (std::vector<bool>(4, true)));
}

TEST(StepProgram, AdamwMaskReachesTheProgram) {
  config::Config cfg = tiny_config(temp_dir("mask"), {"adamw_mask=[bias, norm]"});
  testing::TinyLm model(kVocab, kDim);
  auto program = build_step_program(model, *StepProgramOptions::from_config(cfg));
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->decay, (std::vector<bool>{true, false, true, false}));
}

TEST(Trainer, LossFallsOnAReusedBatchAndTheFirstStepHasLearningRateZero) {
  config::Config cfg = tiny_config(temp_dir("falls"), {"steps=30"});
  auto t = make_trainer(cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  ASSERT_TRUE(t->run().ok());
  std::vector<double> l = losses(*t);
  ASSERT_EQ(l.size(), 30u);
  // MaxText's warmup starts at lr 0, so step 0 leaves the parameters unchanged and step 1
  // sees the same loss (the reference run logs 10.871 at steps 0 and 1).
  EXPECT_EQ(t->history()[0].learning_rate, 0.0);
  EXPECT_EQ(l[0], l[1]);
  EXPECT_LT(l.back(), 0.5 * l[0]) << "first " << l[0] << " last " << l.back();
  // The logged learning rate is the host schedule's.
  auto sched = optim::ScheduleOptions::from_config(cfg);
  for (const StepRecord& r : t->history()) {
    EXPECT_NEAR(r.learning_rate, optim::learning_rate_at(*sched, r.step), 1e-6 * 3e-2) << r.step;
    EXPECT_EQ(r.total_weights, 16.0);
    EXPECT_EQ(r.lm_loss, r.loss);  // no auxiliary losses in TinyLm
    EXPECT_LE(r.grad_norm, 1.0 + 1e-6);  // clipped at gradient_clipping_threshold = 1
    EXPECT_GT(r.step_time_s, 0.0);
  }
  EXPECT_EQ(t->step(), 30);
}

TEST(Trainer, SameConfigAndSeedGiveBitwiseIdenticalRuns) {
  config::Config cfg = tiny_config(temp_dir("det"), {"reuse_example_batch=0"});
  auto a = make_trainer(cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  auto b = make_trainer(cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  ASSERT_TRUE(a->run().ok());
  ASSERT_TRUE(b->run().ok());
  EXPECT_EQ(losses(*a), losses(*b));
  EXPECT_EQ(a->params(), b->params());
  // A different init seed gives a different run (the seed is really used).
  config::Config other = tiny_config(temp_dir("det2"), {"reuse_example_batch=0", "init_weights_seed=1"});
  auto c = make_trainer(other, std::make_unique<testing::TinyLm>(kVocab, kDim));
  ASSERT_TRUE(c->run().ok());
  EXPECT_NE(losses(*a), losses(*c));
}

TEST(Trainer, CompiledExecutorMatchesTheInterpreterAndIsDeterministic) {
  config::Config interp_cfg = tiny_config(temp_dir("interp"), {"steps=6"});
  config::Config compiled_cfg = tiny_config(temp_dir("compiled"), {"steps=6", "backend=cpu"});
  auto i = make_trainer(interp_cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  auto c1 = make_trainer(compiled_cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  auto c2 = make_trainer(compiled_cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  EXPECT_STREQ(i->executor_name(), "reference interpreter");
  EXPECT_STREQ(c1->executor_name(), "compiled CPU executable");
  ASSERT_TRUE(i->run().ok());
  ASSERT_TRUE(c1->run().ok());
  ASSERT_TRUE(c2->run().ok());
  EXPECT_EQ(losses(*c1), losses(*c2));  // bitwise, run after run
  // float32 kernels (oneDNN GEMMs, fused loops) against the interpreter's one rounding per
  // op: a few float32 ulps per op, compounded over 6 optimizer steps.
  std::vector<double> a = losses(*i), b = losses(*c1);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(b[k], a[k], 1e-4 * std::abs(a[k])) << "step " << k;
}

TEST(Trainer, WritesOneJsonObjectPerStepWithTheDocumentedFields) {
  std::string dir = temp_dir("jsonl");
  std::string extra = (std::filesystem::path(dir) / "extra" / "m.jsonl").string();
  config::Config cfg = tiny_config(dir, {"steps=3", "metrics_file=" + extra});
  auto t = make_trainer(cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  ASSERT_TRUE(t->run().ok());
  std::string path = (std::filesystem::path(dir) / "tiny" / "metrics.jsonl").string();
  EXPECT_EQ(t->metrics_path(), path);
  for (const std::string& file : {path, extra}) {
    std::ifstream in(file);
    ASSERT_TRUE(in.good()) << file;
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      EXPECT_EQ(line.front(), '{');
      EXPECT_EQ(line.back(), '}');
      EXPECT_NE(line.find("\"step\": " + std::to_string(n) + ","), std::string::npos) << line;
      for (const char* key : {"loss", "step_time_s", "tokens_per_s_per_device", "tflops_per_s_per_device", "mfu",
                              "learning_rate", "grad_norm", "raw_grad_norm", "total_weights", "moe_lb_loss"}) {
        EXPECT_NE(line.find(std::string("\"") + key + "\": "), std::string::npos) << key << " in " << line;
      }
      ++n;
    }
    EXPECT_EQ(n, 3) << file;
  }
}

TEST(Trainer, EmptyRunNameGetsATimestampedDefault) {
  std::string dir = temp_dir("runname");
  config::Config cfg = tiny_config(dir, {"steps=1", "run_name="});
  auto t = make_trainer(cfg, std::make_unique<testing::TinyLm>(kVocab, kDim));
  EXPECT_EQ(t->run_name().rfind("kiln_", 0), 0u) << t->run_name();
  ASSERT_TRUE(t->run().ok());
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / t->run_name() / "metrics.jsonl"));
}

TEST(Trainer, NanLossStopsTheRunWithAClearMessage) {
  config::Config cfg = tiny_config(temp_dir("nan"), {"steps=5"});
  auto t = make_trainer(cfg, std::make_unique<testing::BadLoss>(/*nan=*/true));
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("loss is NaN at step 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("abort_on_nan_loss"), std::string::npos) << s.message();
  EXPECT_EQ(t->history().size(), 1u);
  // The failing step is in metrics.jsonl, its loss as null.
  std::ifstream in(t->metrics_path());
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("\"loss\": null"), std::string::npos) << line;

  // abort_on_nan_loss=false keeps going.
  config::Config keep = tiny_config(temp_dir("nan_keep"), {"steps=3", "abort_on_nan_loss=false"});
  auto k = make_trainer(keep, std::make_unique<testing::BadLoss>(true));
  EXPECT_TRUE(k->run().ok());
  EXPECT_EQ(k->history().size(), 3u);
}

TEST(Trainer, InfLossStopsTheRun) {
  config::Config cfg = tiny_config(temp_dir("inf"), {"steps=5"});
  auto t = make_trainer(cfg, std::make_unique<testing::BadLoss>(/*nan=*/false));
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("loss is +Inf at step 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("abort_on_inf_loss"), std::string::npos) << s.message();
}

TEST(StartupReport, ReferenceRunAndGptOss20bReportMaxTextsNumbers) {
  config::LoadOptions lo;
  lo.config_path = std::string(KILN_SOURCE_DIR) + "/configs/gpt-oss-3.5b-v6e4.yml";
  auto reference = config::load(lo);
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  auto model = models::make_model(*reference);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::vector<std::string> lines = startup_report(*reference, **model);
  ASSERT_GE(lines.size(), 3u);
  // The reference run's log: "number parameters: 3.525 billion" and the FLOP split.
  EXPECT_EQ(lines[0], "number parameters: 3.525 billion");
  EXPECT_EQ(lines[2], "Per train step: Total TFLOPs: 4.04, split as 97.13% learnable weight flops and 2.87% "
                      "attention flops");

  config::LoadOptions lo20;
  lo20.overrides = {"model_name=gpt-oss-20b"};
  auto c20 = config::load(lo20);
  ASSERT_TRUE(c20.ok());
  auto m20 = models::make_model(*c20);
  ASSERT_TRUE(m20.ok());
  lines = startup_report(*c20, **m20);
  EXPECT_EQ(lines[0], "number parameters: 20.915 billion");  // 20.91 B
  EXPECT_EQ(lines[1].rfind("active parameters per token: 3.608 billion", 0), 0u) << lines[1];  // 3.61 B
}

// The start-up memory check: the plan's need per device against the process's limit, with
// the smallest fsdp degree that fits (one device per process) or remat in the one line.
TEST(MemoryCheck, RefusesWithTheNeedTheLimitAndTheFsdpThatFits) {
  MemoryCheckInput in;
  in.per_device = {3LL << 30, 1LL << 29, 1LL << 23};  // state 3 GiB, other 0.5 GiB, stacks 8 MiB
  in.local_devices = 1;
  in.global_state_bytes = 3LL << 30;
  in.fsdp = 1;
  in.remat_policy = "none";
  const MemoryLimit two_gib{2LL << 30, "data-size limit (RLIMIT_DATA) 2.00 GiB, 0.00 GiB in use"};
  Status s = check_memory(in, two_gib);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("3.51 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("RLIMIT_DATA"), std::string::npos) << s.message();
  // 3 GiB / 2 + 0.51 GiB = 2.01 GiB > 2 GiB: fsdp 4 is the smallest that fits.
  EXPECT_NE(s.message().find("ici_fsdp_parallelism=4 "), std::string::npos) << s.message();
  EXPECT_TRUE(check_memory(in, MemoryLimit{4LL << 30, "x"}).ok());
  EXPECT_TRUE(check_memory(in, MemoryLimit{}).ok());  // no limit known
  // Two local devices need twice as much.
  in.local_devices = 2;
  EXPECT_FALSE(check_memory(in, MemoryLimit{4LL << 30, "x"}).ok());
  // Activations alone too big: remat, not fsdp.
  in.local_devices = 1;
  in.per_device.other_bytes = 3LL << 30;
  in.saved_activation_bytes = 2LL << 30;
  s = check_memory(in, two_gib);
  EXPECT_NE(s.message().find("remat_policy=full"), std::string::npos) << s.message();
}

TEST(MemoryCheck, ReadsTheDataSizeLimit) {
  MemoryLimit before = process_memory_limit();
  EXPECT_GT(before.bytes, 0);  // at least MemAvailable
}

TEST(SyntheticData, ShiftedSeededTokensWithPositionsAndOneSegment) {
  SyntheticData data(3, 5, 7, /*seed=*/0, /*reuse=*/false);
  HostBatch b0 = data.next();
  HostBatch b1 = data.next();
  EXPECT_EQ(b0.inputs.shape(), ir::Shape(ir::DType::kS32, {3, 5}));
  bool differs = false;
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t t = 0; t < 5; ++t) {
      int64_t i = r * 5 + t;
      EXPECT_GE(b0.inputs.at(i), 0);
      EXPECT_LT(b0.inputs.at(i), 7);
      if (t + 1 < 5) {
        EXPECT_EQ(b0.targets.at(i), b0.inputs.at(i + 1));  // next-token targets
      }
      EXPECT_EQ(b0.positions.at(i), t);
      EXPECT_EQ(b0.segmentation.at(i), 1);
      differs = differs || b0.inputs.at(i) != b1.inputs.at(i);
    }
  }
  EXPECT_TRUE(differs);  // fresh batches without reuse
  EXPECT_EQ(SyntheticData(3, 5, 7, 0, false).batch(1).inputs, b1.inputs);  // batch k is reproducible
  SyntheticData reused(3, 5, 7, 0, true);
  HostBatch r0 = reused.next();
  EXPECT_EQ(reused.next().inputs, r0.inputs);
  EXPECT_EQ(r0.inputs, b0.inputs);
  EXPECT_FALSE(SyntheticData(3, 5, 7, 1, true).next().inputs == r0.inputs);  // the seed matters
}

}  // namespace
}  // namespace kiln::train
