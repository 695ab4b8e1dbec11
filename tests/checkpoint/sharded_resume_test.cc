// The trainer's checkpoints on a mesh of 4 virtual devices: every shard owner writes its
// own file with the shard layout in the manifest; a checkpoint saved on fsdp 2 × expert 2
// restores bit for bit on one device and on fsdp 4, and one saved on one device restores on
// fsdp 2 × expert 2; on the same mesh, 10 steps + 10 resumed (async saves) give the 20-step
// run's losses and parameters bitwise. The per-device programs run on the reference
// interpreter: the test is about layouts and bytes, not kernels.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/config/config.h"
#include "kiln/ir/parser.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_runner.h"
#include "kiln/train/trainer.h"
#include "tests/train/trainer_testing.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kFsdp2Expert2 = {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"};
const std::vector<std::string> kFsdp4 = {"ici_fsdp_parallelism=4"};
const std::vector<std::string> kOneDevice = {"ici_fsdp_parallelism=1"};

std::string temp_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_sharded_resume_" + name);
  fs::remove_all(p);
  return p.string();
}

// gpt-oss-tiny shrunk so that every mesh axis divides its dimensions (as in
// sharded_training_test.cc); a fresh synthetic batch every step, so the data iterator
// position is part of the resumed state. The global batch is 4 sequences on every mesh.
config::Config mesh_config(const std::string& out, const std::string& run, const std::vector<std::string>& mesh,
                           std::vector<std::string> extra = {}) {
  const int64_t devices = mesh == kOneDevice ? 1 : 4;
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32", "base_mlp_dim=32",
                  "base_moe_mlp_dim=16", "head_dim=8", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
                  "max_target_length=8", "per_device_batch_size=" + std::to_string(4 / devices),
                  "local_devices=" + std::to_string(devices), "steps=20", "learning_rate=1e-2",
                  "reuse_example_batch=0", "backend=interpreter", "log_period=100", "checkpoint_period=10",
                  "async_checkpointing=false", "run_name=" + run, "base_output_directory=" + out};
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

std::unique_ptr<Trainer> make_trainer(const config::Config& cfg) { return testing::quiet_trainer(cfg); }
std::vector<double> losses(const Trainer& t) { return testing::step_losses(t); }

void expect_same_params(const Trainer& a, const Trainer& b, const std::string& what) {
  std::vector<ir::Literal> pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i] == pb[i]) << what << ": parameter " << i << " differs";
}

// The state of every tensor of checkpoint `dir` as global tensors (every checksum checked).
std::vector<std::string> global_bytes(const std::string& dir) {
  auto state = checkpoint::load(dir);
  KILN_CHECK(state.ok()) << state.status().to_string();
  std::vector<std::string> out;
  for (const auto& t : state->tensors) out.push_back(t.name + ":" + t.shards.at(0));
  return out;
}

TEST(ShardedCheckpoint, EachOwnerWritesItsShardsAndTheyRestoreOnOtherMeshes) {
  const std::string out = temp_dir("reshard");
  auto src = make_trainer(mesh_config(out, "src", kFsdp2Expert2, {"steps=3"}));
  ASSERT_TRUE(src->run().ok());
  const std::string ckpt = checkpoint::step_dir(src->checkpoints_dir(), 3);

  // One file per device that owns a distinct shard, the saved mesh and layouts in the manifest.
  auto reader = checkpoint::CheckpointReader::open(ckpt);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->mesh().to_string(), "fsdp=2 expert=2");
  std::set<int64_t> writers;
  bool split_over_both = false;
  for (const checkpoint::SavedTensor& t : reader->tensors()) {
    for (const checkpoint::SavedPiece& p : t.pieces) writers.insert(p.device);
    int axes = 0;
    for (const auto& d : t.sharding.dims) axes += static_cast<int>(d.size());
    split_over_both |= axes == 2 && t.pieces.size() == 4;
  }
  EXPECT_EQ(writers, (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(split_over_both) << "no tensor is split over fsdp and expert";
  for (int64_t d = 0; d < 4; ++d) EXPECT_TRUE(fs::exists(ckpt + "/shard-" + std::to_string(d) + ".safetensors")) << d;

  // Restored on one device and on fsdp 4: the same parameters, bit for bit.
  for (const auto& [name, mesh] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"one", kOneDevice}, {"fsdp4", kFsdp4}}) {
    auto dst = make_trainer(mesh_config(out, name, mesh, {"load_full_state_path=" + ckpt, "enable_checkpointing=false"}));
    EXPECT_EQ(dst->step(), 3) << name;
    expect_same_params(*src, *dst, "fsdp2×expert2 -> " + name);
    // Saved again in the new layout, the global state (params, mu, nu) is unchanged.
    ASSERT_TRUE(dst->save_checkpoint().ok());
    auto tmp = dst->checkpoints_dir();
    EXPECT_EQ(global_bytes(ckpt), global_bytes(checkpoint::step_dir(tmp, 3))) << name;
  }
  // And back: a one-device checkpoint restores onto fsdp 2 × expert 2.
  const std::string one_ckpt = checkpoint::step_dir(out + "/one/checkpoints", 3);
  auto back = make_trainer(mesh_config(out, "back", kFsdp2Expert2, {"load_full_state_path=" + one_ckpt,
                                                                    "enable_checkpointing=false"}));
  expect_same_params(*src, *back, "one device -> fsdp2×expert2");
  ASSERT_TRUE(back->save_checkpoint().ok());
  EXPECT_EQ(global_bytes(ckpt), global_bytes(checkpoint::step_dir(back->checkpoints_dir(), 3)));
}

TEST(ShardedCheckpoint, TwentyStepsEqualTenPlusTenResumedBitwiseOnFourDevices) {
  const std::string out = temp_dir("exact");
  auto full = make_trainer(mesh_config(out, "full", kFsdp2Expert2, {"async_checkpointing=true"}));
  ASSERT_TRUE(full->run().ok());
  const std::vector<double> expected = losses(*full);
  ASSERT_EQ(expected.size(), 20u);
  {
    auto first = make_trainer(mesh_config(out, "split", kFsdp2Expert2, {"async_checkpointing=true"}));
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(first->run_step().ok());
    ASSERT_TRUE(first->save_checkpoint().ok());
    ASSERT_TRUE(first->wait_for_checkpoint().ok());
  }
  auto second = make_trainer(mesh_config(out, "split", kFsdp2Expert2, {"async_checkpointing=true"}));
  EXPECT_EQ(second->restored_step(), 10);
  ASSERT_TRUE(second->run().ok());
  EXPECT_EQ(losses(*second), std::vector<double>(expected.begin() + 10, expected.end()));
  expect_same_params(*full, *second, "20 steps vs 10 + 10");
  EXPECT_EQ(global_bytes(checkpoint::step_dir(full->checkpoints_dir(), 20)),
            global_bytes(checkpoint::step_dir(second->checkpoints_dir(), 20)));
}

// The runners hand the state over as bytes: the compiled runner's buffers byte for byte (a
// signalling NaN keeps its payload, -0 and subnormals stay), the interpreter's doubles
// converted exactly. A minimal program with the step's argument layout (one parameter).
TEST(ShardedCheckpoint, StateBytesRoundTripExactlyIncludingNanPayloads) {
  std::string text = R"(module @state
ENTRY computation @main {
  %p = f32[5] parameter(), index=0
  %mu = bf16[5] parameter(), index=1
  %nu = f32[5] parameter(), index=2
  %step = s32[] parameter(), index=3
  %b0 = s32[1,2] parameter(), index=4
  %b1 = s32[1,2] parameter(), index=5
  %b2 = s32[1,2] parameter(), index=6
  %b3 = s32[1,2] parameter(), index=7
  %z = f32[] constant(0)
  ROOT %r = (f32[5], bf16[5], f32[5], s32[], f32[], f32[], f32[], f32[], f32[], f32[], f32[], f32[], f32[]) tuple(%p, %mu, %nu, %step, %z, %z, %z, %z, %z, %z, %z, %z, %z)
}
)";
  auto module = ir::parse_module(text);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  StepProgram program;
  program.module = std::move(*module);
  program.num_params = 1;
  program.decay = {true};
  auto bytes_of = [](const std::vector<uint32_t>& words) {
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
  };
  // f32: a signalling NaN with a payload, -0, the smallest subnormal, the largest float, 1.
  const std::string f32_special = bytes_of({0x7fa00001u, 0x80000000u, 0x00000001u, 0x7f7fffffu, 0x3f800000u});
  const std::string f32_plain = bytes_of({0x80000000u, 0x00000001u, 0x7f7fffffu, 0x3f800000u, 0xc0490fdbu});
  const std::string bf16 = bytes_of({0x80003f80u, 0x00017f7fu, 0x0000c049u}).substr(0, 10);
  const std::string step = bytes_of({123456789u});
  backend::CompileOptions options;
  auto compiled = make_compiled_runner(program, backend::cpu_backend(), options, nullptr);
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  auto interpreter = make_interpreter_runner(program);
  for (StepRunner* r : {compiled->get(), interpreter.get()}) {
    const bool exact_nan = r == compiled->get();  // the interpreter holds doubles: no NaN payloads
    const std::string& p = exact_nan ? f32_special : f32_plain;
    ASSERT_TRUE(r->set_arg_bytes(program.param_arg(0), p).ok());
    ASSERT_TRUE(r->set_arg_bytes(program.mu_arg(0), bf16).ok());
    ASSERT_TRUE(r->set_arg_bytes(program.step_arg(), step).ok());
    EXPECT_EQ(r->arg_bytes(program.param_arg(0)), p) << r->name();
    EXPECT_EQ(r->arg_bytes(program.mu_arg(0)), bf16) << r->name();
    EXPECT_EQ(r->arg_bytes(program.step_arg()), step) << r->name();
    EXPECT_FALSE(r->set_arg_bytes(program.param_arg(0), "short").ok()) << r->name();
  }
}

}  // namespace
}  // namespace kiln::train
