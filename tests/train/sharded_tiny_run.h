// The shrunk gpt-oss-tiny that the sharded training tests train on 1 and 4 virtual devices
// (every mesh axis of the issue divides its dimensions; a global batch of 4 sequences of 8
// tokens), and a run of it that returns the per-step losses.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "tests/train/trainer_testing.h"

namespace kiln::train::testing {

inline std::vector<std::string> sharded_tiny_overrides(int64_t devices) {
  return {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
          "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
          "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
          "max_target_length=8", "per_device_batch_size=" + std::to_string(4 / devices),
          "local_devices=" + std::to_string(devices)};
}

// The five meshes of 4 virtual devices every equivalence test runs (fsdp, expert, fsdp x expert,
// data x fsdp, tensor x fsdp), and a run name for one ("fsdp2expert2").
inline std::vector<std::vector<std::string>> equivalence_meshes() {
  return {{"ici_fsdp_parallelism=4"},
          {"ici_fsdp_parallelism=1", "ici_expert_parallelism=4"},
          {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"},
          {"ici_data_parallelism=2", "ici_fsdp_parallelism=2"},
          {"ici_tensor_parallelism=2", "ici_fsdp_parallelism=2"}};
}
inline std::string mesh_name(const std::vector<std::string>& mesh) {
  std::string name;
  for (const std::string& key : mesh) name += key.substr(4, key.find('_', 4) - 4) + key.substr(key.find('=') + 1);
  return name;
}

// A trainer for the config `lo` loads, printing nothing (checks every step of the way).
inline std::unique_ptr<Trainer> make_quiet_trainer(const config::LoadOptions& lo, bool write_metrics_file = true) {
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  KILN_CHECK(model.ok()) << model.status().to_string();
  TrainerOptions options;
  options.console = nullptr;
  options.write_metrics_file = write_metrics_file;
  auto trainer = Trainer::create(*cfg, std::move(*model), options);
  KILN_CHECK(trainer.ok()) << trainer.status().to_string();
  return std::move(*trainer);
}

// `steps` steps on one batch (learning rate 1e-2, no checkpoints) with `extra` settings (the
// mesh), outputs under the test temp dir in `run_name`; the losses, step by step.
inline std::vector<double> sharded_tiny_losses(const std::vector<std::string>& extra, int64_t devices,
                                               const std::string& run_name, const std::string& backend, int steps) {
  // The process id in the name: ctest runs each parameter of a test in a process of its own,
  // at the same time, and several of them train the same one-device reference run.
  std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / ("kiln_" + run_name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = sharded_tiny_overrides(devices);
  for (const std::string& s : {"steps=" + std::to_string(steps), std::string("learning_rate=1e-2"),
                               std::string("reuse_example_batch=1"), "backend=" + backend,
                               std::string("enable_checkpointing=false"), std::string("log_period=100"),
                               "run_name=" + run_name, "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  std::unique_ptr<Trainer> trainer = make_quiet_trainer(lo);
  Status s = trainer->run();
  KILN_CHECK(s.ok()) << s.to_string();
  std::vector<double> losses = step_losses(*trainer);
  trainer.reset();  // closes its files before they go
  std::filesystem::remove_all(out);
  return losses;
}

}  // namespace kiln::train::testing
