// bf16 weight copies as step state (bf16_weight_copy, train/step/weight_copies.h): the step with
// the copies computes bit for bit what the step with the casts inside computes (convert is
// deterministic), on one device and sharded over fsdp; eval is unchanged; a restore remakes the copies (they
// are not checkpointed) and continues with the uninterrupted run's losses; f32 runs and
// bf16_weight_copy=false have none.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

config::Config tiny_config(const std::string& run_name, int64_t devices, std::vector<std::string> extra) {
  fs::path out = ::kiln::testing::temp_path("kiln_weight_copies_" + run_name);
  fs::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = testing::sharded_tiny_overrides(devices);
  for (const std::string& s :
       {std::string("dtype=bfloat16"), std::string("weight_dtype=float32"), std::string("learning_rate=1e-2"),
        std::string("reuse_example_batch=0"), std::string("backend=cpu"), std::string("log_period=100"),
        std::string("enable_checkpointing=false"), "run_name=" + run_name, "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

std::unique_ptr<Trainer> make_trainer(const config::Config& cfg) { return testing::quiet_trainer(cfg); }
std::vector<double> losses(const Trainer& t) { return testing::step_losses(t); }

// Runs `steps` steps with the copies on and off; both must agree bit for bit.
void expect_identical_with_and_without_copies(int64_t devices, const std::vector<std::string>& mesh, int steps) {
  std::vector<std::string> extra = mesh;
  extra.push_back("steps=" + std::to_string(steps));
  std::vector<std::string> on = extra, off = extra;
  on.push_back("bf16_weight_copy=true");
  off.push_back("bf16_weight_copy=false");
  // Output directories are per test: ctest runs the tests of this file side by side.
  const std::string tag =
      std::to_string(devices) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::unique_ptr<Trainer> with = make_trainer(tiny_config("on" + tag, devices, on));
  std::unique_ptr<Trainer> without = make_trainer(tiny_config("off" + tag, devices, off));
  EXPECT_EQ(without->program().num_copies(), 0);
  const bool interpreter = std::find(mesh.begin(), mesh.end(), "backend=interpreter") != mesh.end();
  EXPECT_NE(std::string(with->executor_name()).find(interpreter ? "reference interpreter" : "compiled CPU executable"),
            std::string::npos)
      << with->executor_name();
  // Every matmul weight of the 2-layer MoE model (attention projections, sinks, router,
  // expert weights and biases, the unembedding; not the embedding, gathered in f32).
  EXPECT_GT(with->program().num_copies(), 10);
  // No weight is cast inside the step any more.
  const ir::Computation& entry = *with->program().module->entry();
  for (int64_t i = 0; i < with->program().num_params; ++i) {
    for (const ir::Instr* user : entry.param(static_cast<int>(i))->users()) {
      EXPECT_FALSE(user->opcode() == ir::Opcode::kConvert && user->shape().dtype() == ir::DType::kBF16)
          << user->to_string();
    }
  }
  ASSERT_TRUE(with->run().ok());
  ASSERT_TRUE(without->run().ok());
  ASSERT_EQ(losses(*with).size(), static_cast<size_t>(steps));
  EXPECT_EQ(losses(*with), losses(*without));
  std::vector<ir::Literal> a = with->params(), b = without->params();
  ASSERT_EQ(a.size(), b.size());
  // (A copy AdamW wrote wrong would change the next step's loss: the losses above cover it.)
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
}

TEST(WeightCopies, Bf16StepsAreBitIdenticalWithAndWithoutCopies) {
  expect_identical_with_and_without_copies(1, {}, 4);
}

TEST(WeightCopies, Bf16StepsAreBitIdenticalOnTheInterpreterToo) {
  // The host cast that makes the first copies rounds as the interpreter's convert does.
  expect_identical_with_and_without_copies(1, {"backend=interpreter"}, 3);
}

TEST(WeightCopies, ShardedOverFsdpTheCopiesAreGatheredAndStepsStayBitIdentical) {
  expect_identical_with_and_without_copies(2, {"ici_fsdp_parallelism=2"}, 3);
}

TEST(WeightCopies, EvalOnTextDataIsTheSameWithAndWithoutCopies) {
  // The eval program takes the f32 parameters and casts them itself.
  const std::string cache = ::kiln::testing::temp_path("kiln_weight_copies_corpus").string();
  std::vector<double> eval;
  for (const char* copies : {"true", "false"}) {
    config::Config cfg = tiny_config(std::string("eval_") + copies, 1,
                                     {"steps=2", "dataset_type=text", "dataset_path=/usr/share/games/fortunes",
                                      "tokenizer_type=bytes", "vocab_size=258", "dataset_cache_dir=" + cache,
                                      "eval_interval=2", "eval_steps=1", std::string("bf16_weight_copy=") + copies});
    std::unique_ptr<Trainer> t = make_trainer(cfg);
    EXPECT_EQ(t->program().num_copies() > 0, std::string(copies) == "true");
    ASSERT_TRUE(t->run().ok());
    auto loss = t->evaluate();
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    eval.push_back(*loss);
  }
  EXPECT_EQ(eval[0], eval[1]);
}

// On unless turned off: about 4% faster with remat_policy=full for 2 bytes per parameter.
TEST(WeightCopies, Bf16RunsKeepCopiesByDefault) {
  auto options = StepProgramOptions::from_config(tiny_config("default", 1, {}));
  ASSERT_TRUE(options.ok());
  EXPECT_TRUE(options->weight_copies);
  auto off = StepProgramOptions::from_config(tiny_config("off_by_key", 1, {"bf16_weight_copy=false"}));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->weight_copies);
}

TEST(WeightCopies, F32RunsHaveNone) {
  config::Config cfg = tiny_config("f32", 1, {"dtype=float32"});
  auto model = models::make_model(cfg);
  ASSERT_TRUE(model.ok());
  auto options = StepProgramOptions::from_config(cfg);
  ASSERT_TRUE(options.ok());
  EXPECT_FALSE(options->weight_copies);
  auto program = build_step_program(**model, *options);
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->num_copies(), 0);
  EXPECT_EQ(program->num_args(), 3 * program->num_params + 5);
}

TEST(WeightCopies, RestoreRemakesTheCopiesAndContinuesTheUninterruptedRun) {
  const std::vector<std::string> ckpt = {"steps=6", "enable_checkpointing=true", "checkpoint_period=3",
                                         "async_checkpointing=false"};
  std::unique_ptr<Trainer> full = make_trainer(tiny_config("full", 1, ckpt));
  ASSERT_GT(full->program().num_copies(), 0);
  ASSERT_TRUE(full->run().ok());
  std::vector<double> full_losses = losses(*full);
  ASSERT_EQ(full_losses.size(), 6u);
  // The checkpoint holds parameters, moments and the step: no copies.
  auto saved = checkpoint::load(checkpoint::step_dir(full->checkpoints_dir(), 3));
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(static_cast<int64_t>(saved->tensors.size()), 3 * full->program().num_params);
  for (const auto& t : saved->tensors) EXPECT_EQ(t.name.find("bf16_copy"), std::string::npos) << t.name;

  config::Config split = tiny_config("split", 1, ckpt);
  {
    std::unique_ptr<Trainer> first = make_trainer(split);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->run_step().ok());
    ASSERT_TRUE(first->save_checkpoint().ok());
  }
  // A new trainer of the same run resumes from its checkpoint of step 3.
  std::unique_ptr<Trainer> second = make_trainer(split);
  ASSERT_EQ(second->restored_step(), 3);
  ASSERT_TRUE(second->run().ok());
  EXPECT_EQ(losses(*second), std::vector<double>(full_losses.begin() + 3, full_losses.end()));
  std::vector<ir::Literal> a = full->params(), b = second->params();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
}

}  // namespace
}  // namespace kiln::train
