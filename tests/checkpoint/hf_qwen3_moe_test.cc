// Qwen3-MoE weights between Kiln and Hugging Face (checkpoint/hf_qwen3_moe.h): the export is
// the per-expert layout Qwen3MoeForCausalLM's checkpoints use, Kiln -> HF -> Kiln and
// HF -> Kiln -> HF are bit-exact, the streaming import (stacked per-expert sources,
// KilnFromHf::stack) gives the literal route's bytes for whole tensors and for blocks, what
// the mapping cannot place is refused by name, and `kiln convert` round-trips files through
// the family table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_family.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/hf_qwen3_moe.h"
#include "kiln/checkpoint/hf_shards.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_layout.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "tests/testing/cli.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kD = 32, kH = 4, kK = 2, kDh = 16, kE = 8, kI = 16, kV = 64;

// D=32, H=4, K=2, Dh=16 (not D/H), E=8, I=16, V=64, 2 layers.
TensorMap random_kiln_params(uint64_t seed, std::vector<std::string> extra = {}) {
  config::LoadOptions lo;
  lo.overrides = {"model_name=qwen3-moe-tiny", "override_model_config=true", "vocab_size=64",
                  "base_num_decoder_layers=2", "base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "head_dim=16", "base_moe_mlp_dim=16", "num_experts=8", "num_experts_per_tok=2"};
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  KILN_CHECK(model.ok()) << model.status().to_string();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  TensorMap out;
  for (const models::ParamSpec& p : (*model)->params()) {
    std::vector<double> v(static_cast<size_t>(p.shape.num_elements()));
    for (double& x : v) x = u(rng);
    out[p.name] = ir::Literal(p.shape, v);
  }
  return out;
}

const nlohmann::json kConfig = {{"model_type", "qwen3_moe"}, {"num_attention_heads", kH}};

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(t == b.at(name)) << name;
  }
}

TEST(HfQwen3Moe, ExportIsThePerExpertLayout) {
  const TensorMap kiln = random_kiln_params(1);
  auto hf = qwen3_moe_to_hf(kiln, "");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {kV, kD}}, {"model.norm.weight", {kD}}, {"lm_head.weight", {kV, kD}}};
  for (int l = 0; l < 2; ++l) {
    const std::string m = "model.layers." + std::to_string(l) + ".";
    want[m + "input_layernorm.weight"] = {kD};
    want[m + "post_attention_layernorm.weight"] = {kD};
    want[m + "self_attn.q_proj.weight"] = {kH * kDh, kD};
    want[m + "self_attn.k_proj.weight"] = {kK * kDh, kD};
    want[m + "self_attn.v_proj.weight"] = {kK * kDh, kD};
    want[m + "self_attn.o_proj.weight"] = {kD, kH * kDh};
    want[m + "self_attn.q_norm.weight"] = {kDh};
    want[m + "self_attn.k_norm.weight"] = {kDh};
    want[m + "mlp.gate.weight"] = {kE, kD};
    for (int e = 0; e < kE; ++e) {
      const std::string x = m + "mlp.experts." + std::to_string(e) + ".";
      want[x + "gate_proj.weight"] = {kI, kD};
      want[x + "up_proj.weight"] = {kI, kD};
      want[x + "down_proj.weight"] = {kD, kI};
    }
  }
  ASSERT_EQ(hf->size(), want.size());
  for (const auto& [name, dims] : want) {
    ASSERT_TRUE(hf->count(name)) << name;
    EXPECT_EQ(hf->at(name).shape().dims(), dims) << name;
  }
  // Expert e's gate_proj[i, d] is wi_0[e, d, i]; down_proj[d, i] is wo[e, i, d].
  const int64_t e = 5, d = 7, i = 11;
  EXPECT_EQ(hf->at("model.layers.1.mlp.experts.5.gate_proj.weight").at(i * kD + d),
            kiln.at("layers.1.mlp.wi_0").at((e * kD + d) * kI + i));
  EXPECT_EQ(hf->at("model.layers.1.mlp.experts.5.up_proj.weight").at(i * kD + d),
            kiln.at("layers.1.mlp.wi_1").at((e * kD + d) * kI + i));
  EXPECT_EQ(hf->at("model.layers.1.mlp.experts.5.down_proj.weight").at(d * kI + i),
            kiln.at("layers.1.mlp.wo").at((e * kI + i) * kD + d));
  EXPECT_EQ(hf->at("model.layers.0.self_attn.q_norm.weight"), kiln.at("layers.0.self_attention.query_norm.scale"));
  // Tied embeddings: no lm_head.
  auto tied = qwen3_moe_to_hf(random_kiln_params(1, {"logits_via_embedding=true"}), "");
  ASSERT_TRUE(tied.ok()) << tied.status().to_string();
  EXPECT_FALSE(tied->count("lm_head.weight"));
}

TEST(HfQwen3Moe, RoundTripsAreBitExact) {
  const TensorMap kiln = random_kiln_params(2);
  auto hf = qwen3_moe_to_hf(kiln, "");
  ASSERT_TRUE(hf.ok());
  auto back = qwen3_moe_from_hf(*hf, kConfig);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(kiln, *back);
  auto hf2 = qwen3_moe_to_hf(*back, "");
  ASSERT_TRUE(hf2.ok());
  expect_same(*hf, *hf2);
  // Tied.
  const TensorMap tied = random_kiln_params(2, {"logits_via_embedding=true"});
  auto tied_hf = qwen3_moe_to_hf(tied, "");
  ASSERT_TRUE(tied_hf.ok());
  nlohmann::json tied_config = kConfig;
  tied_config["tie_word_embeddings"] = true;
  auto tied_back = qwen3_moe_from_hf(*tied_hf, tied_config);
  ASSERT_TRUE(tied_back.ok()) << tied_back.status().to_string();
  expect_same(tied, *tied_back);
}

TEST(HfQwen3Moe, WhatTheMappingCannotPlaceIsNamed) {
  auto hf = qwen3_moe_to_hf(random_kiln_params(3), "");
  ASSERT_TRUE(hf.ok());
  auto refused = [&](const TensorMap& bad, const std::string& name) {
    auto r = qwen3_moe_from_hf(bad, kConfig);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  };
  TensorMap broken = *hf;
  broken.erase("model.layers.1.mlp.experts.6.down_proj.weight");
  refused(broken, "model.layers.1.mlp.experts.6.down_proj.weight");
  broken = *hf;
  broken["model.layers.0.mlp.experts.3.up_proj.weight"] = ir::Literal(ir::Shape(ir::DType::kF32, {kI, kD + 1}));
  refused(broken, "model.layers.0.mlp.experts.3.up_proj.weight");
  broken = *hf;
  broken["model.layers.0.self_attn.q_proj.bias"] = ir::Literal(ir::Shape(ir::DType::kF32, {kH * kDh}));
  refused(broken, "model.layers.0.self_attn.q_proj.bias");
  broken = *hf;
  broken["model.layers.1.mlp.shared_expert.gate_proj.weight"] = ir::Literal(ir::Shape(ir::DType::kF32, {kI, kD}));
  refused(broken, "shared_expert");
  broken = *hf;
  broken["model.layers.0.mlp.experts.gate_up_proj"] = ir::Literal(ir::Shape(ir::DType::kF32, {kE, 2 * kI, kD}));
  refused(broken, "fused expert layout");
  // And the other way: a shared expert, or a tensor Qwen3MoeForCausalLM has no place for.
  auto shared = qwen3_moe_to_hf(random_kiln_params(3, {"shared_experts=1"}), "");
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().message().find("shared_experts:"), 0u) << shared.status().message();
  TensorMap kiln = random_kiln_params(3);
  kiln["layers.0.self_attention.sinks"] = ir::Literal(ir::Shape(ir::DType::kF32, {kH}));
  auto out = qwen3_moe_to_hf(kiln, "");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("layers.0.self_attention.sinks"), std::string::npos) << out.status().message();
}

// The streaming import (HfCheckpoint::produce / produce_block, used by kiln convert and
// load_parameters_path) against the literal route, on an export split over several files.
TEST(HfQwen3Moe, StreamingImportOfStackedExpertsEqualsTheLiteralRoute) {
  const fs::path dir = kiln::testing::fresh_temp_dir("kiln_hf_qwen3_moe_stream");
  auto hf = qwen3_moe_to_hf(random_kiln_params(4), "");
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  auto plan_files = write_hf_safetensors(dir.string(), named, 20000);
  ASSERT_TRUE(plan_files.ok()) << plan_files.status().to_string();
  ASSERT_GE(plan_files->files.size(), 3u);
  std::ofstream(dir / "config.json") << kConfig.dump();
  auto import = plan_hf_import(dir.string());
  ASSERT_TRUE(import.ok()) << import.status().to_string();
  auto literal = qwen3_moe_from_hf(*hf, kConfig);
  ASSERT_TRUE(literal.ok());
  ASSERT_EQ(import->tensors.size(), literal->size());
  int stacked = 0;
  for (const KilnFromHf& t : import->tensors) {
    auto bytes = import->checkpoint.produce(t);
    ASSERT_TRUE(bytes.ok()) << t.name << ": " << bytes.status().to_string();
    const std::string want = literal_bytes(literal->at(t.name));
    EXPECT_TRUE(*bytes == want) << t.name;
    if (t.stack.empty()) continue;
    ++stacked;
    // A block over experts [2, 7), rows [3, 13) and the last dimension's columns [1, 9).
    const std::vector<int64_t>& dims = t.shape.dims();
    const Region block{{2, 3, 1}, {5, 10, 8}};
    auto part = import->checkpoint.produce_block(t, block);
    ASSERT_TRUE(part.ok()) << part.status().to_string();
    std::string cut(static_cast<size_t>(block.num_elements() * 4), '\0');
    copy_overlap(want, Region{{0, 0, 0}, dims}, cut, block, 4);
    EXPECT_TRUE(*part == cut) << t.name;
  }
  EXPECT_EQ(stacked, 6);  // wi_0, wi_1, wo of 2 layers
  // The imported config builds the same parameter list.
  EXPECT_NE(import->config_yaml.find("decoder_block: \"qwen3_moe\""), std::string::npos) << import->config_yaml;
}

// config.json -> Kiln keys, v5 and v4 forms, and what Kiln's qwen3_moe cannot express.
TEST(HfQwen3Moe, KilnConfigOfAnHfConfig) {
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : random_kiln_params(5)) shapes.emplace(name, t.shape());
  nlohmann::json hf = {{"num_experts_per_tok", 2}, {"rms_norm_eps", 2e-6}, {"norm_topk_prob", true},
                       {"num_experts", kE}, {"intermediate_size", 96}, {"max_position_embeddings", 4096},
                       {"router_aux_loss_coef", 0.01},
                       {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  auto yaml = qwen3_moe_kiln_config(shapes, hf);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  for (const char* line : {"decoder_block: \"qwen3_moe\"\n", "vocab_size: 64\n", "base_emb_dim: 32\n",
                           "base_num_query_heads: 4\n", "base_num_kv_heads: 2\n", "head_dim: 16\n",
                           "num_experts: 8\n", "base_moe_mlp_dim: 16\n", "base_mlp_dim: 96\n",
                           "base_num_decoder_layers: 2\n", "num_experts_per_tok: 2\n", "use_qk_norm: true\n",
                           "norm_topk_prob: true\n", "normalization_layer_epsilon: 2e-06\n",
                           "rope_max_timescale: 5000\n", "load_balance_loss_weight: 0.01\n",
                           "logits_via_embedding: false\n", "routed_score_func: \"softmax\"\n"}) {
    EXPECT_NE(yaml->find(line), std::string::npos) << line << " not in\n" << *yaml;
  }
  // The released checkpoints' v4 form.
  hf.erase("rope_parameters");
  hf["rope_theta"] = 1000000.0;
  hf["rope_scaling"] = nullptr;
  yaml = qwen3_moe_kiln_config(shapes, hf);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  EXPECT_NE(yaml->find("rope_max_timescale: 1000000\n"), std::string::npos) << *yaml;
  auto refused = [&](nlohmann::json bad, const char* key) {
    auto r = qwen3_moe_kiln_config(shapes, bad);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  };
  refused({{"decoder_sparse_step", 2}}, "decoder_sparse_step");
  refused({{"mlp_only_layers", {0}}}, "mlp_only_layers");
  refused({{"use_sliding_window", true}}, "use_sliding_window");
  refused({{"attention_bias", true}}, "attention_bias");
  refused({{"hidden_act", "gelu"}}, "hidden_act");
  refused({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "rope_type");
  refused({{"num_experts", 7}}, "num_experts");
}

// Kiln config -> config.json, and what Qwen3MoeForCausalLM cannot express refused by key.
TEST(HfQwen3Moe, HfConfigRefusesWhatTransformersCannotExpress) {
  const TensorMap kiln = random_kiln_params(6);
  auto hf = qwen3_moe_hf_config(kiln, "num_experts_per_tok: 2\nrope_max_timescale: 5000\nnorm_topk_prob: false\n");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*hf)["architectures"], nlohmann::json({"Qwen3MoeForCausalLM"}));
  EXPECT_EQ((*hf)["num_experts"], kE);
  EXPECT_EQ((*hf)["head_dim"], kDh);
  EXPECT_EQ((*hf)["norm_topk_prob"], false);
  EXPECT_EQ((*hf)["rope_parameters"]["rope_theta"], 5000.0);
  EXPECT_EQ((*hf)["tie_word_embeddings"], false);
  for (const char* bad : {"routed_score_func: sigmoid", "routed_scaling_factor: 2.5", "capacity_factor: 1.25",
                          "shared_experts: 1", "use_qk_norm: false", "rope_type: yarn", "mlp_activations: [gelu, linear]",
                          "sliding_window_size: 8"}) {
    auto r = qwen3_moe_hf_config(kiln, bad);
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key(bad, std::string(bad).find(':'));
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

// `kiln convert` both ways through the family table: HF files (the per-expert layout) ->
// Kiln checkpoint -> HF files, bit for bit, with Qwen3MoeForCausalLM's config.json.
TEST(KilnConvertQwen3Moe, HfToKilnToHfFilesRoundTrip) {
  const fs::path dir = kiln::testing::fresh_temp_dir("kiln_hf_qwen3_moe_convert");
  fs::create_directories(dir / "hf");
  auto hf = qwen3_moe_to_hf(random_kiln_params(7), "");
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  ASSERT_TRUE(write_safetensors((dir / "hf" / "model.safetensors").string(), named).ok());
  nlohmann::json config = kConfig;
  config["num_experts_per_tok"] = 2;
  config["norm_topk_prob"] = true;
  std::ofstream(dir / "hf" / "config.json") << config.dump();
  const std::string bin = std::string("KILN_PROGRESS=off ") + KILN_BINARY;
  auto to_kiln = kiln::testing::run_command(bin, "convert --from hf --to kiln " + (dir / "hf").string() + " " + (dir / "kiln").string());
  ASSERT_EQ(to_kiln.exit_code, 0) << to_kiln.err;
  auto to_hf = kiln::testing::run_command(bin, "convert --from kiln --to hf " + (dir / "kiln").string() + " " + (dir / "hf2").string());
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.err;
  auto back = read_safetensors((dir / "hf2" / "model.safetensors").string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*hf, back->tensors);
  std::ifstream in(dir / "hf2" / "config.json");
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written["model_type"], "qwen3_moe");
  EXPECT_EQ(written["num_experts_per_tok"], 2);
  EXPECT_EQ(written["norm_topk_prob"], true);
  EXPECT_EQ(written["num_hidden_layers"], 2);
}

}  // namespace
}  // namespace kiln::checkpoint
