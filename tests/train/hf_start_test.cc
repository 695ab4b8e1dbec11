// A run starts straight from a Hugging Face directory (load_parameters_path=DIR): every
// mesh's devices hold the parameters the in-memory converter makes (read_hf_tensors +
// gpt_oss_from_hf), cast to the run's f32; a directory of another model is one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/mxfp4.h"
#include "tests/testing/cli.h"
#include "tests/testing/hf_fixture.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

// The fixture's model (tests/testing/hf_fixture.h), trained on a synthetic batch.
std::vector<std::string> fixture_model(int64_t devices) {
  return {"model_name=gpt-oss-tiny", "override_model_config=true", "vocab_size=40", "base_num_decoder_layers=2",
          "base_emb_dim=32", "base_num_query_heads=2", "base_num_kv_heads=1", "head_dim=16", "base_mlp_dim=32",
          "base_moe_mlp_dim=32", "num_experts=2", "num_experts_per_tok=1", "max_target_length=8",
          "per_device_batch_size=1", "dtype=float32", "local_devices=" + std::to_string(devices)};
}

const fs::path& hf_dir() {
  static const fs::path dir = [] {
    fs::path d = kiln::testing::fresh_temp_dir("kiln_hf_start") / "hf";
    kiln::testing::write_hf_fixture(d);
    return d;
  }();
  return dir;
}

// What the in-memory converter makes of the fixture (the reference).
const checkpoint::TensorMap& converted() {
  static const checkpoint::TensorMap kiln = [] {
    checkpoint::TensorMap hf;
    for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      auto part = checkpoint::read_hf_tensors({(hf_dir() / f).string()});
      KILN_CHECK(part.ok()) << part.status().to_string();
      for (auto& [name, t] : *part) hf.emplace(name, std::move(t));
    }
    auto k = checkpoint::gpt_oss_from_hf(hf, 2);
    KILN_CHECK(k.ok()) << k.status().to_string();
    return *k;
  }();
  return kiln;
}

Result<std::unique_ptr<Trainer>> start_from_hf(const std::vector<std::string>& mesh, int64_t devices,
                                               const std::string& name, const std::string& path) {
  config::LoadOptions lo;
  lo.overrides = fixture_model(devices);
  const fs::path out = fs::path(::testing::TempDir()) / ("kiln_hf_start_" + name + "_" + std::to_string(getpid()));
  for (const std::string& s : {std::string("steps=0"), std::string("enable_checkpointing=false"),
                               "load_parameters_path=" + path, "run_name=" + name,
                               "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  KILN_CHECK(model.ok());
  TrainerOptions options;
  options.console = nullptr;
  options.write_metrics_file = false;
  return Trainer::create(*cfg, std::move(*model), options);
}

class HfStart : public ::testing::TestWithParam<std::pair<int64_t, std::vector<std::string>>> {};

TEST_P(HfStart, EveryDeviceHoldsItsBlockOfTheConvertedParameters) {
  const auto& [devices, mesh] = GetParam();
  auto t = start_from_hf(mesh, devices, "mesh" + std::to_string(devices) + std::to_string(mesh.size()),
                         hf_dir().string());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<ir::Literal> params = (*t)->params();  // assembled from the devices' blocks
  ASSERT_EQ(params.size(), converted().size());
  int64_t bf16_sources = 0;
  // Parameters in model order; the reference by name.
  auto model = models::make_model(*config::load(config::LoadOptions{.overrides = fixture_model(1)}));
  ASSERT_TRUE(model.ok());
  const std::vector<models::ParamSpec>& names = (*model)->params();
  ASSERT_EQ(names.size(), params.size());
  for (size_t k = 0; k < names.size(); ++k) {
    const ir::Literal& want = converted().at(names[k].name);
    EXPECT_EQ(params[k].shape().dims(), want.shape().dims()) << names[k].name;
    EXPECT_EQ(params[k].shape().dtype(), ir::DType::kF32) << names[k].name;
    EXPECT_EQ(params[k].values(), want.values()) << names[k].name;  // bf16 and MXFP4 values are exact in f32
    if (want.shape().dtype() == ir::DType::kBF16) ++bf16_sources;
  }
  EXPECT_GE(bf16_sources, 4);  // the MXFP4 and bf16 experts were cast, not skipped
}

INSTANTIATE_TEST_SUITE_P(Meshes, HfStart,
                         ::testing::Values(std::make_pair(int64_t{1}, std::vector<std::string>{}),
                                           std::make_pair(int64_t{2}, std::vector<std::string>{"ici_fsdp_parallelism=2"}),
                                           std::make_pair(int64_t{4}, std::vector<std::string>{
                                                                          "ici_fsdp_parallelism=2",
                                                                          "ici_expert_parallelism=2"})));

TEST(HfStart, ADirectoryOfAnotherModelIsOneLine) {
  auto t = start_from_hf({"base_emb_dim=64"}, 1, "wider", hf_dir().string());
  ASSERT_FALSE(t.ok());
  const std::string msg = t.status().to_string();
  EXPECT_NE(msg.find("Hugging Face directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("this run needs"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::train
