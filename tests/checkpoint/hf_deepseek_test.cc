// DeepSeek-V3 weights between Kiln and Hugging Face (checkpoint/hf_deepseek.h): the export is
// DeepseekV3ForCausalLM's per-expert layout (as the saved reference's save_pretrained files
// in tests/models/data/deepseek), Kiln -> HF -> Kiln and HF -> Kiln -> HF are bit-exact with
// the MTP module, the streaming import (stacked experts) equals the literal route, FP8 and
// foreign tensors are refused by name, and `kiln convert` round-trips files both ways.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_deepseek.h"
#include "kiln/checkpoint/hf_family.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/mxfp4.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "tests/testing/cli.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

const std::string kReference = std::string(KILN_SOURCE_DIR) + "/tests/models/data/deepseek";

config::Config tiny_config() {
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.overrides = {"model_name=deepseek3-tiny", "override_model_config=true", "base_emb_dim=32",
                  "base_num_query_heads=2", "base_num_kv_heads=2", "q_lora_rank=16", "kv_lora_rank=8",
                  "qk_nope_head_dim=8", "qk_rope_head_dim=4", "v_head_dim=6", "base_mlp_dim=24",
                  "base_moe_mlp_dim=8", "base_num_decoder_layers=3", "vocab_size=64"};
  auto cfg = config::load(lo);
  KILN_CHECK_OK(cfg);
  return *cfg;
}

TensorMap random_kiln_params(uint64_t seed) {
  auto model = models::make_model(tiny_config());
  KILN_CHECK_OK(model);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  TensorMap out;
  for (const models::ParamSpec& p : (*model)->params()) {
    std::vector<double> v(static_cast<size_t>(p.shape.num_elements()));
    for (double& x : v) x = static_cast<float>(u(rng));
    out[p.name] = ir::Literal(p.shape, v);
  }
  return out;
}

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(t == b.at(name)) << name;
  }
}

nlohmann::json reference_config() {
  std::ifstream in(kReference + "/config.json");
  return nlohmann::json::parse(in);
}

// The export has exactly save_pretrained's names and shapes (the saved reference's file).
TEST(HfDeepseek, ExportIsSavePretrainedsLayout) {
  auto hf = read_hf_tensors({kReference + "/model.safetensors"});
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto kiln = deepseek_from_hf(*hf, reference_config());
  ASSERT_TRUE(kiln.ok()) << kiln.status().to_string();
  EXPECT_EQ(kiln->at("layers.1.mlp.wi_0").shape().dims(), (std::vector<int64_t>{8, 32, 8}));
  EXPECT_EQ(kiln->at("layers.0.self_attention.wkv_b.kernel").shape().dims(), (std::vector<int64_t>{8, 2, 14}));
  auto back = deepseek_to_hf(*kiln, "");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*hf, *back);  // HF -> Kiln -> HF, bit for bit, every name and shape
}

TEST(HfDeepseek, KilnToHfToKilnIsBitExactWithTheMtpModule) {
  TensorMap kiln = random_kiln_params(3);
  ASSERT_TRUE(kiln.count("mtp.1.projection.kernel"));
  auto hf = deepseek_to_hf(kiln, "");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_TRUE(hf->count("model.layers.3.eh_proj.weight"));
  EXPECT_TRUE(hf->count("model.layers.3.mlp.experts.7.down_proj.weight"));
  auto config = deepseek_hf_config(kiln, "");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ((*config)["num_nextn_predict_layers"], 1);
  EXPECT_EQ((*config)["first_k_dense_replace"], 1);
  auto again = deepseek_from_hf(*hf, *config);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  expect_same(kiln, *again);
}

TEST(HfDeepseek, Fp8AndForeignTensorsAreNamed) {
  auto hf = read_hf_tensors({kReference + "/model.safetensors"});
  ASSERT_TRUE(hf.ok());
  TensorMap fp8 = *hf;
  fp8["model.layers.0.self_attn.q_a_proj.weight_scale_inv"] = ir::Literal(ir::Shape(ir::DType::kF32, {1, 1}));
  auto r = deepseek_from_hf(fp8, reference_config());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("FP8"), std::string::npos) << r.status().message();
  TensorMap foreign = *hf;
  foreign["model.layers.0.self_attn.q_a_proj.bias"] = ir::Literal(ir::Shape(ir::DType::kF32, {16}));
  r = deepseek_from_hf(foreign, reference_config());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("q_a_proj.bias"), std::string::npos) << r.status().message();
  TensorMap missing = *hf;
  missing.erase("model.layers.2.mlp.experts.5.up_proj.weight");
  r = deepseek_from_hf(missing, reference_config());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("experts.5.up_proj"), std::string::npos) << r.status().message();
}

// The streaming import (plan_hf_import + produce, what kiln convert and load_parameters_path
// run) on the saved reference directory equals the literal route, stacked experts included.
TEST(HfDeepseek, StreamingImportEqualsTheLiteralRoute) {
  auto import = plan_hf_import(kReference);
  ASSERT_TRUE(import.ok()) << import.status().to_string();
  auto hf = read_hf_tensors({kReference + "/model.safetensors"});
  ASSERT_TRUE(hf.ok());
  auto literal = deepseek_from_hf(*hf, reference_config());
  ASSERT_TRUE(literal.ok());
  ASSERT_EQ(import->tensors.size(), literal->size());
  int stacked = 0;
  for (const KilnFromHf& t : import->tensors) {
    auto bytes = import->checkpoint.produce(t);
    ASSERT_TRUE(bytes.ok()) << t.name << ": " << bytes.status().to_string();
    EXPECT_TRUE(*bytes == literal_bytes(literal->at(t.name))) << t.name;
    stacked += t.stack.empty() ? 0 : 1;
  }
  EXPECT_EQ(stacked, 6);  // wi_0, wi_1, wo of 2 MoE layers
  EXPECT_NE(import->config_yaml.find("decoder_block: \"deepseek\""), std::string::npos) << import->config_yaml;
  EXPECT_NE(import->config_yaml.find("n_routing_groups: 4"), std::string::npos) << import->config_yaml;
}

// config.json's YaRN is DeepSeek's only when mscale == mscale_all_dim (cos and sin unscaled).
TEST(HfDeepseek, KilnConfigRefusesAnotherYarnScaling) {
  nlohmann::json config = reference_config();
  config["rope_parameters"]["mscale_all_dim"] = 0.707;
  auto hf = read_hf_tensors({kReference + "/model.safetensors"});
  ASSERT_TRUE(hf.ok());
  auto kiln = deepseek_from_hf(*hf, config);
  ASSERT_TRUE(kiln.ok());
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : *kiln) shapes.emplace(name, t.shape());
  auto yaml = deepseek_kiln_config(shapes, config);
  ASSERT_FALSE(yaml.ok());
  EXPECT_NE(yaml.status().message().find("mscale"), std::string::npos) << yaml.status().message();
}

// `kiln convert` both ways through the family table: the saved reference's files -> Kiln
// checkpoint -> HF files, bit for bit, with DeepseekV3ForCausalLM's config.json.
TEST(KilnConvertDeepseek, HfToKilnToHfFilesRoundTrip) {
  const fs::path dir = kiln::testing::fresh_temp_dir("kiln_hf_deepseek_convert");
  const std::string bin = std::string("KILN_PROGRESS=off ") + KILN_BINARY;
  auto to_kiln = kiln::testing::run_command(bin, "convert --from hf --to kiln " + kReference + " " + (dir / "kiln").string());
  ASSERT_EQ(to_kiln.exit_code, 0) << to_kiln.err;
  auto to_hf = kiln::testing::run_command(bin, "convert --from kiln --to hf " + (dir / "kiln").string() + " " + (dir / "hf").string());
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.err;
  auto back = read_hf_tensors({(dir / "hf" / "model.safetensors").string()});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  auto hf = read_hf_tensors({kReference + "/model.safetensors"});
  ASSERT_TRUE(hf.ok());
  expect_same(*hf, *back);
  std::ifstream in(dir / "hf" / "config.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  const nlohmann::json original = reference_config();
  EXPECT_EQ(written["architectures"][0], "DeepseekV3ForCausalLM");
  for (const char* key : {"model_type", "num_hidden_layers", "first_k_dense_replace", "n_group", "topk_group",
                          "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                          "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "routed_scaling_factor",
                          "rope_interleave", "norm_topk_prob"}) {
    EXPECT_EQ(written[key], original[key]) << key;
  }
  for (const char* key : {"rope_type", "factor", "mscale", "mscale_all_dim", "original_max_position_embeddings"}) {
    EXPECT_EQ(written["rope_parameters"][key], original["rope_parameters"][key]) << key;
  }
}

}  // namespace
}  // namespace kiln::checkpoint
