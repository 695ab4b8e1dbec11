// Llama weights between Kiln and Hugging Face (checkpoint/hf_llama.h): the exported names and
// shapes are LlamaForCausalLM's, Kiln -> HF -> Kiln and HF -> Kiln -> HF are bit-exact, tied
// or not; config.json in both directions (v4 rope_scaling and v5 rope_parameters), with what
// Kiln's Llama cannot express refused by key; and `kiln convert` both ways through the
// family table with the kiln binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_family.h"
#include "kiln/checkpoint/hf_llama.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "tests/testing/temp_path.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kV = 64, kD = 32, kH = 4, kK = 2, kDh = 8, kF = 48, kLayers = 2;

config::Config small_config(bool tied) {
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.overrides = {"model_name=llama3-tiny", "override_model_config=true", "vocab_size=64",
                  "base_num_decoder_layers=2", "base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "head_dim=8", "base_mlp_dim=48", std::string("logits_via_embedding=") + (tied ? "true" : "false")};
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

TensorMap random_kiln_params(uint64_t seed, bool tied = false) {
  auto model = models::make_model(small_config(tied));
  KILN_CHECK(model.ok()) << model.status().to_string();
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

nlohmann::json hf_config(bool tied) { return {{"num_attention_heads", kH}, {"tie_word_embeddings", tied}}; }

TEST(HfLlama, ExportHasLlamaForCausalLMNamesAndShapes) {
  TensorMap kiln = random_kiln_params(1);
  auto hf = llama_to_hf(kiln, "");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {kV, kD}}, {"model.norm.weight", {kD}}, {"lm_head.weight", {kV, kD}}};
  for (int l = 0; l < kLayers; ++l) {
    std::string m = "model.layers." + std::to_string(l) + ".";
    want[m + "input_layernorm.weight"] = {kD};
    want[m + "post_attention_layernorm.weight"] = {kD};
    want[m + "self_attn.q_proj.weight"] = {kH * kDh, kD};
    want[m + "self_attn.k_proj.weight"] = {kK * kDh, kD};
    want[m + "self_attn.v_proj.weight"] = {kK * kDh, kD};
    want[m + "self_attn.o_proj.weight"] = {kD, kH * kDh};
    want[m + "mlp.gate_proj.weight"] = {kF, kD};
    want[m + "mlp.up_proj.weight"] = {kF, kD};
    want[m + "mlp.down_proj.weight"] = {kD, kF};
  }
  ASSERT_EQ(hf->size(), want.size());
  for (const auto& [name, dims] : want) {
    ASSERT_TRUE(hf->count(name)) << name;
    EXPECT_EQ(hf->at(name).shape().dims(), dims) << name;
  }
  // q_proj row h*Dh + j, column d is query.kernel[d, h, j]: heads in order, no permutation
  // (both sides rotate the halves of a head).
  const ir::Literal& q = hf->at("model.layers.1.self_attn.q_proj.weight");
  const ir::Literal& qk = kiln.at("layers.1.self_attention.query.kernel");
  for (int64_t h : {0, 3})
    for (int64_t j : {0, 5})
      for (int64_t d : {1, 30}) EXPECT_EQ(q.at((h * kDh + j) * kD + d), qk.at((d * kH + h) * kDh + j));
  const ir::Literal& gate = hf->at("model.layers.0.mlp.gate_proj.weight");
  const ir::Literal& wi0 = kiln.at("layers.0.mlp.wi_0.kernel");
  EXPECT_EQ(gate.at(7 * kD + 3), wi0.at(3 * kF + 7));
  // Tied: no lm_head.
  auto tied = llama_to_hf(random_kiln_params(1, true), "");
  ASSERT_TRUE(tied.ok()) << tied.status().to_string();
  EXPECT_FALSE(tied->count("lm_head.weight"));
  EXPECT_EQ(tied->size(), want.size() - 1);
}

TEST(HfLlama, RoundTripsAreBitExactTiedOrNot) {
  for (bool tied : {false, true}) {
    TensorMap kiln = random_kiln_params(2, tied);
    auto hf = llama_to_hf(kiln, "");
    ASSERT_TRUE(hf.ok());
    auto back = llama_from_hf(*hf, hf_config(tied));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    expect_same(kiln, *back);
    auto hf2 = llama_to_hf(*back, "");
    ASSERT_TRUE(hf2.ok());
    expect_same(*hf, *hf2);
  }
  // A tied checkpoint that saved lm_head.weight anyway imports without it.
  auto hf = llama_to_hf(random_kiln_params(3, true), "");
  ASSERT_TRUE(hf.ok());
  (*hf)["lm_head.weight"] = hf->at("model.embed_tokens.weight");
  auto back = llama_from_hf(*hf, hf_config(true));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_FALSE(back->count("logits_dense.kernel"));
}

TEST(HfLlama, MissingMisshapenOrForeignTensorsAreNamed) {
  auto hf = llama_to_hf(random_kiln_params(4), "");
  ASSERT_TRUE(hf.ok());
  auto error = [](const TensorMap& m, const nlohmann::json& config) {
    auto r = llama_from_hf(m, config);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  TensorMap broken = *hf;
  broken.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_NE(error(broken, hf_config(false)).find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
  broken = *hf;
  broken["model.layers.0.self_attn.o_proj.weight"] = ir::Literal(ir::Shape(ir::DType::kF32, {kD, 31}));
  EXPECT_NE(error(broken, hf_config(false)).find("o_proj.weight"), std::string::npos);
  broken = *hf;
  broken["model.layers.0.self_attn.q_proj.bias"] = ir::Literal(ir::Shape(ir::DType::kF32, {kH * kDh}));
  EXPECT_NE(error(broken, hf_config(false)).find("q_proj.bias"), std::string::npos);
  broken = *hf;
  broken.erase("lm_head.weight");  // untied without its head
  EXPECT_NE(error(broken, hf_config(false)).find("lm_head.weight"), std::string::npos);
  EXPECT_NE(error(*hf, {{"num_attention_heads", 3}}).find("num_attention_heads"), std::string::npos);
}

std::map<std::string, ir::Shape> shapes_of(const TensorMap& k) {
  std::map<std::string, ir::Shape> out;
  for (const auto& [name, t] : k) out.emplace(name, t.shape());
  return out;
}

// config.json -> Kiln keys: shapes from the tensors, the rest from the file; Llama 3.1 RoPE
// as transformers 5 writes it (rope_parameters) and as transformers 4 did (rope_theta +
// rope_scaling); what Kiln's Llama cannot express refused, naming the key.
TEST(HfLlama, KilnConfigOfAnHfConfig) {
  const auto shapes = shapes_of(random_kiln_params(5));
  nlohmann::json v5 = {{"rms_norm_eps", 2e-5},
                       {"max_position_embeddings", 1024},
                       {"rope_parameters",
                        {{"rope_type", "llama3"},
                         {"rope_theta", 500000.0},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}}}};
  auto yaml = llama_kiln_config(shapes, v5);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  for (const char* line :
       {"decoder_block: \"llama2\"\n", "vocab_size: 64\n", "base_emb_dim: 32\n", "base_num_query_heads: 4\n",
        "base_num_kv_heads: 2\n", "head_dim: 8\n", "base_mlp_dim: 48\n", "base_num_decoder_layers: 2\n",
        "normalization_layer_epsilon: 2e-05\n", "rope_type: \"llama3.1\"\n", "rope_factor: 8\n",
        "original_max_position_embeddings: 64\n", "rope_max_timescale: 500000\n", "max_position_embeddings: 1024\n",
        "rope_interleave: false\n", "logits_via_embedding: false\n", "dtype: \"float32\"\n"}) {
    EXPECT_NE(yaml->find(line), std::string::npos) << line << " not in\n" << *yaml;
  }
  // The YAML is a config Kiln loads and builds.
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  fs::path file = ::kiln::testing::temp_path("kiln_hf_llama_config.yml");
  std::ofstream(file) << *yaml;
  lo.config_path = file.string();
  auto cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  fs::remove(file);

  // v4: rope_theta beside rope_scaling ("type" as older files spell it); plain RoPE when null.
  nlohmann::json v4 = {{"rope_theta", 250000.0},
                       {"tie_word_embeddings", true},
                       {"rope_scaling",
                        {{"type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}}}};
  yaml = llama_kiln_config(shapes_of(random_kiln_params(5, true)), v4);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  for (const char* line : {"rope_factor: 32\n", "rope_max_timescale: 250000\n", "logits_via_embedding: true\n",
                           "normalization_layer_epsilon: 1e-06\n"}) {
    EXPECT_NE(yaml->find(line), std::string::npos) << line << " not in\n" << *yaml;
  }
  yaml = llama_kiln_config(shapes, {{"rope_theta", 500000.0}, {"rope_scaling", nullptr}});
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  EXPECT_NE(yaml->find("rope_type: \"default\"\n"), std::string::npos) << *yaml;

  auto refused = [&](nlohmann::json bad, const char* key) {
    auto r = llama_kiln_config(shapes, bad);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  };
  nlohmann::json low = v5;
  low["rope_parameters"]["low_freq_factor"] = 2.0;
  refused(low, "low_freq_factor");
  nlohmann::json high = v4;
  high["rope_scaling"]["high_freq_factor"] = 8.0;
  refused(high, "high_freq_factor");
  refused({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "rope_type");
  refused({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}}, "rope_type");
  refused({{"attention_bias", true}}, "attention_bias");
  refused({{"mlp_bias", true}}, "mlp_bias");
  refused({{"hidden_act", "gelu"}}, "hidden_act");
}

// Kiln config -> config.json: LlamaForCausalLM's keys, Llama 3.1 RoPE as rope_type llama3.
TEST(HfLlama, HfConfigFollowsTheKilnConfigAndRefusesWhatTransformersCannotExpress) {
  const TensorMap kiln = random_kiln_params(6);
  auto hf = llama_hf_config(kiln,
                            "rope_type: llama3.1\nrope_factor: 8\noriginal_max_position_embeddings: 64\n"
                            "rope_max_timescale: 500000\nnormalization_layer_epsilon: 2.0e-5\n"
                            "max_position_embeddings: 512\n");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*hf)["model_type"], "llama");
  EXPECT_EQ((*hf)["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ((*hf)["num_key_value_heads"], kK);
  EXPECT_EQ((*hf)["intermediate_size"], kF);
  EXPECT_EQ((*hf)["head_dim"], kDh);
  EXPECT_EQ((*hf)["rope_theta"], 500000.0);
  EXPECT_EQ((*hf)["rms_norm_eps"], 2e-5);
  EXPECT_EQ((*hf)["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ((*hf)["rope_scaling"]["original_max_position_embeddings"], 64);
  EXPECT_EQ((*hf)["rope_scaling"]["factor"], 8.0);
  EXPECT_EQ((*hf)["tie_word_embeddings"], false);
  hf = llama_hf_config(random_kiln_params(6, true), "rope_type: default\n");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_TRUE((*hf)["rope_scaling"].is_null());
  EXPECT_EQ((*hf)["tie_word_embeddings"], true);
  // Back again: the same Kiln keys.
  for (const char* bad : {"rope_interleave: true", "rope_type: yarn", "rope_min_timescale: 2",
                          "mlp_activations: [gelu, linear]"}) {
    auto r = llama_hf_config(kiln, bad);
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key(bad, std::string(bad).find(':'));
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

// The family table finds the Llama row both ways, and the kiln binary converts an HF
// directory to a Kiln checkpoint and back, bit for bit, with a config.json that names the
// same model.
TEST(KilnConvertLlama, HfToKilnToHfFilesRoundTrip) {
  auto by_block = hf_family_for_block("llama2");
  ASSERT_TRUE(by_block.ok());
  EXPECT_EQ((*by_block)->architecture, "LlamaForCausalLM");
  auto by_type = hf_family_for_config({{"model_type", "llama"}}, "config.json");
  ASSERT_TRUE(by_type.ok());
  EXPECT_EQ((*by_type)->decoder_block, "llama2");

  fs::path dir = ::kiln::testing::temp_path("kiln_hf_llama_convert_test");
  fs::remove_all(dir);
  fs::create_directories(dir / "hf");
  auto hf = llama_to_hf(random_kiln_params(7), "");
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  ASSERT_TRUE(write_safetensors((dir / "hf" / "model.safetensors").string(), named).ok());
  const nlohmann::json config = {{"model_type", "llama"},
                                 {"architectures", {"LlamaForCausalLM"}},
                                 {"num_attention_heads", kH},
                                 {"num_key_value_heads", kK},
                                 {"rms_norm_eps", 1e-5},
                                 {"max_position_embeddings", 512},
                                 {"rope_theta", 500000.0},
                                 {"rope_scaling",
                                  {{"rope_type", "llama3"},
                                   {"factor", 8.0},
                                   {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0},
                                   {"original_max_position_embeddings", 64}}}};
  std::ofstream(dir / "hf" / "config.json") << config.dump();
  const std::string bin = KILN_BINARY;
  const std::string to_kiln =
      bin + " convert --from hf --to kiln " + (dir / "hf").string() + " " + (dir / "kiln").string() + " > /dev/null";
  const std::string to_hf =
      bin + " convert --from kiln --to hf " + (dir / "kiln").string() + " " + (dir / "hf2").string() + " > /dev/null";
  ASSERT_EQ(std::system(to_kiln.c_str()), 0) << to_kiln;
  ASSERT_EQ(std::system(to_hf.c_str()), 0) << to_hf;
  auto back = read_safetensors((dir / "hf2" / "model.safetensors").string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*hf, back->tensors);
  std::ifstream in(dir / "hf2" / "config.json");
  nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written["model_type"], "llama");
  EXPECT_EQ(written["rope_scaling"], config["rope_scaling"]);
  EXPECT_EQ(written["rope_theta"], 500000.0);
  EXPECT_EQ(written["max_position_embeddings"], 512);
  EXPECT_EQ(written["num_key_value_heads"], kK);
  EXPECT_EQ(written["tie_word_embeddings"], false);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::checkpoint
