// The trainer with checkpoints: a 20-step run and a 10-step run resumed for 10 more give
// bitwise-identical losses and parameters (fresh synthetic batches each step, so the data
// iterator state is part of it); load_parameters_path loads parameters only; a checkpoint
// of another model is refused naming the tensor; async saving writes the same checkpoint.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "tests/train/trainer_testing.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_resume_test_" + name);
  fs::remove_all(p);
  return p.string();
}

// gpt-oss-tiny cut to 2 layers of width 32 (4 heads of 8, 4 experts of 32), vocabulary 64
// and 16 tokens, with a fresh batch every step.
config::Config small_config(const std::string& out_dir, const std::string& run_name, std::vector<std::string> extra = {}) {
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "per_device_batch_size=1",
                  "max_target_length=16", "vocab_size=64", "base_num_decoder_layers=2", "base_emb_dim=32",
                  "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=8", "base_mlp_dim=32",
                  "base_moe_mlp_dim=32", "num_experts=4", "backend=interpreter",
                  "reuse_example_batch=0", "steps=20", "learning_rate=3e-3", "warmup_steps_fraction=0.2",
                  "checkpoint_period=10", "async_checkpointing=false", "run_name=" + run_name,
                  "base_output_directory=" + out_dir};
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

Result<std::unique_ptr<Trainer>> make_trainer(const config::Config& cfg,
                                              std::function<void(const std::string&)> after_file = nullptr) {
  KILN_ASSIGN_OR_RETURN(auto model, models::make_model(cfg));
  TrainerOptions options;
  options.console = nullptr;
  options.checkpoint_after_file = std::move(after_file);
  options.write_metrics_file = false;
  return Trainer::create(cfg, std::move(model), options);
}

std::vector<double> losses(const Trainer& t) { return testing::step_losses(t); }

TEST(Resume, TwentyStepsEqualTenPlusTenResumedBitwise) {
  std::string dir = temp_dir("exact");
  // Reference: 20 steps in one go.
  auto full = make_trainer(small_config(dir, "full"));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE((*full)->run().ok());
  std::vector<double> full_losses = losses(**full);
  ASSERT_EQ(full_losses.size(), 20u);
  EXPECT_EQ(checkpoint::list_steps((*full)->checkpoints_dir()), (std::vector<int64_t>{10, 20}));

  // 10 steps (steps=20 keeps the same schedule; the run is cut after the checkpoint of step 10).
  {
    auto first = make_trainer(small_config(dir, "split"));
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*first)->run_step().ok());
    ASSERT_TRUE((*first)->save_checkpoint().ok());
    EXPECT_EQ(losses(**first), std::vector<double>(full_losses.begin(), full_losses.begin() + 10));
  }
  // A new process would see the run directory's checkpoint and resume from it.
  auto second = make_trainer(small_config(dir, "split"));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ((*second)->restored_step(), 10);
  EXPECT_EQ((*second)->step(), 10);
  ASSERT_TRUE((*second)->run().ok());
  EXPECT_EQ(losses(**second), std::vector<double>(full_losses.begin() + 10, full_losses.end()));
  std::vector<ir::Literal> a = (*full)->params(), b = (*second)->params();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
  // The completed run's final checkpoints are identical too, optimizer state included.
  auto ca = checkpoint::load(checkpoint::step_dir((*full)->checkpoints_dir(), 20));
  auto cb = checkpoint::load(checkpoint::step_dir((*second)->checkpoints_dir(), 20));
  ASSERT_TRUE(ca.ok() && cb.ok());
  ASSERT_EQ(ca->tensors.size(), cb->tensors.size());
  for (size_t i = 0; i < ca->tensors.size(); ++i) {
    EXPECT_EQ(ca->tensors[i].name, cb->tensors[i].name);
    EXPECT_TRUE(ca->tensors[i].shards == cb->tensors[i].shards) << ca->tensors[i].name;
  }
}

TEST(Resume, LoadParametersPathLoadsParametersOnly) {
  std::string dir = temp_dir("params_only");
  auto src = make_trainer(small_config(dir, "src", {"steps=3", "save_checkpoint_on_completion=true"}));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  ASSERT_TRUE((*src)->run().ok());
  std::string ckpt = checkpoint::step_dir((*src)->checkpoints_dir(), 3);
  ASSERT_TRUE(fs::exists(ckpt + "/manifest.json"));

  auto dst = make_trainer(small_config(dir, "dst", {"load_parameters_path=" + ckpt}));
  ASSERT_TRUE(dst.ok()) << dst.status().to_string();
  EXPECT_EQ((*dst)->step(), 0);
  EXPECT_EQ((*dst)->restored_step(), -1);
  std::vector<ir::Literal> a = (*src)->params(), b = (*dst)->params();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i;

  // load_full_state_path takes the step too (and accepts the checkpoints directory: its latest).
  auto full = make_trainer(small_config(dir, "full", {"load_full_state_path=" + (*src)->checkpoints_dir()}));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ((*full)->step(), 3);
}

TEST(Resume, CheckpointOfAnotherModelIsRefusedNamingTheTensor) {
  std::string dir = temp_dir("incompatible");
  auto src = make_trainer(small_config(dir, "src", {"steps=1"}));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  ASSERT_TRUE((*src)->run().ok());
  std::string ckpt = checkpoint::step_dir((*src)->checkpoints_dir(), 1);
  auto other = make_trainer(small_config(dir, "other", {"load_parameters_path=" + ckpt, "vocab_size=96"}));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("token_embedder"), std::string::npos) << other.status().message();
  auto more_layers = make_trainer(small_config(dir, "deeper", {"load_full_state_path=" + ckpt, "base_num_decoder_layers=4"}));
  ASSERT_FALSE(more_layers.ok());
  EXPECT_NE(more_layers.status().message().find("is missing"), std::string::npos) << more_layers.status().message();
}

TEST(Resume, AsyncCheckpointingWritesTheSameCheckpoint) {
  std::string dir = temp_dir("async");
  auto sync = make_trainer(small_config(dir, "sync", {"steps=4", "checkpoint_period=2"}));
  auto async = make_trainer(small_config(dir, "async", {"steps=4", "checkpoint_period=2", "async_checkpointing=true",
                                                        "max_num_checkpoints_to_keep=1"}));
  ASSERT_TRUE(sync.ok() && async.ok());
  ASSERT_TRUE((*sync)->run().ok());
  ASSERT_TRUE((*async)->run().ok());
  EXPECT_EQ(checkpoint::list_steps((*sync)->checkpoints_dir()), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(checkpoint::list_steps((*async)->checkpoints_dir()), (std::vector<int64_t>{4}));
  EXPECT_GE((*async)->last_checkpoint_blocked_s(), 0.0);
  auto a = checkpoint::load(checkpoint::step_dir((*sync)->checkpoints_dir(), 4));
  auto b = checkpoint::load(checkpoint::step_dir((*async)->checkpoints_dir(), 4));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) EXPECT_TRUE(a->tensors[i].shards == b->tensors[i].shards) << a->tensors[i].name;
}

TEST(Resume, KilledDuringTheSecondSaveResumesFromTheFirst) {
  std::string dir = temp_dir("killed");
  auto full = make_trainer(small_config(dir, "full"));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE((*full)->run().ok());

  // The child trains and is killed (SIGKILL) while writing checkpoint 20, after its state
  // file and before its manifest.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int saves = 0;
    auto hook = [&](const std::string& file) {
      if (file == "shard-0.safetensors" && ++saves == 2) {
        char c = 1;
        (void)!write(ready[1], &c, 1);
        for (;;) pause();
      }
    };
    auto t = make_trainer(small_config(dir, "killed"), hook);
    if (t.ok()) (void)(*t)->run();
    _exit(3);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  std::string ckpts = dir + "/killed/checkpoints";
  EXPECT_EQ(checkpoint::list_steps(ckpts), (std::vector<int64_t>{10}));

  // A restart resumes from checkpoint 10 and ends where the uninterrupted run did.
  auto resumed = make_trainer(small_config(dir, "killed"));
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ((*resumed)->restored_step(), 10);
  ASSERT_TRUE((*resumed)->run().ok());
  std::vector<ir::Literal> a = (*full)->params(), b = (*resumed)->params();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
  EXPECT_EQ(checkpoint::list_steps(ckpts), (std::vector<int64_t>{10, 20}));
}

// Real data: text tokenized into shards, packed and shuffled, with an eval split. The
// checkpoint holds the iterator state (global sample index, seed, corpus fingerprint), so the
// resumed run reads exactly the batches the uninterrupted run read next: the losses, eval
// losses and parameters match bitwise.
TEST(Resume, TextDataResumesWithExactlyTheNextBatch) {
  std::string dir = temp_dir("text");
  fs::create_directories(dir);
  const std::string corpus = dir + "/corpus.txt";
  {
    std::ofstream out(corpus);
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "sun", "sea", "read"};
    for (int d = 0; d < 60; ++d) {
      for (int w = 0; w < 2 + d % 5; ++w) out << words[(d * 7 + w * 5) % 12] << ' ';
      out << "\n\n";
    }
  }
  const std::vector<std::string> data = {"vocab_size=258", "dataset_type=text", "tokenizer_type=bytes",
                                         "dataset_path=" + corpus, "dataset_cache_dir=" + dir + "/cache",
                                         "per_device_batch_size=2", "eval_interval=5", "eval_steps=1"};
  auto full = make_trainer(small_config(dir, "full", data));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE((*full)->run().ok());
  std::vector<double> full_losses = losses(**full);
  ASSERT_EQ(full_losses.size(), 20u);
  {
    auto first = make_trainer(small_config(dir, "split", data));
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*first)->run_step().ok());
    ASSERT_TRUE((*first)->save_checkpoint().ok());
  }
  auto second = make_trainer(small_config(dir, "split", data));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  ASSERT_NE((*second)->batch_source(), nullptr);
  EXPECT_EQ((*second)->restored_step(), 10);
  EXPECT_EQ((*second)->batch_source()->state()["sample"], 10 * 2);  // global samples consumed
  Result<double> eval_full = (*full)->evaluate();
  ASSERT_TRUE((*second)->run().ok());
  EXPECT_EQ(losses(**second), std::vector<double>(full_losses.begin() + 10, full_losses.end()));
  Result<double> eval_second = (*second)->evaluate();
  ASSERT_TRUE(eval_full.ok() && eval_second.ok());
  EXPECT_EQ(*eval_full, *eval_second);
  std::vector<ir::Literal> a = (*full)->params(), b = (*second)->params();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
  // A checkpoint from another data order is refused, naming the seed.
  auto reseeded = make_trainer(small_config(dir, "split", [&] {
    auto v = data;
    v.push_back("data_shuffle_seed=9");
    return v;
  }()));
  ASSERT_FALSE(reseeded.ok());
  EXPECT_NE(reseeded.status().message().find("data_shuffle_seed"), std::string::npos) << reseeded.status().message();
}

}  // namespace
}  // namespace kiln::train
