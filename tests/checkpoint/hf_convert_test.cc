// GPT-OSS weights between Kiln and Hugging Face: exported names and shapes are the spec's
// (§1.1) for a small GPT-OSS, gate/up interleave as even/odd columns, and
// Kiln -> HF -> Kiln and HF -> Kiln -> HF are bit-exact; `kiln convert` round-trips files,
// split over several files with model.safetensors.index.json past --max_shard_size.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/hf_shards.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "tests/testing/cli.h"
#include "tests/testing/temp_path.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

// D=32, H=4, K=2, Dh=8, E=4, I=16, V=64, 2 layers.
config::Config small_config() {
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "vocab_size=64",
                  "base_num_decoder_layers=2", "base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "head_dim=8", "base_mlp_dim=16", "base_moe_mlp_dim=16", "num_experts=4"};
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

TensorMap random_kiln_params(uint64_t seed) {
  auto model = models::make_model(small_config());
  KILN_CHECK(model.ok());
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

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(t == b.at(name)) << name;
  }
}

TEST(HfGptOss, ExportHasTheSpecNamesAndShapes) {
  TensorMap kiln = random_kiln_params(1);
  auto hf = gpt_oss_to_hf(kiln);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const int64_t D = 32, H = 4, K = 2, Dh = 8, E = 4, I = 16, V = 64;
  std::map<std::string, std::vector<int64_t>> want = {{"model.embed_tokens.weight", {V, D}},
                                                      {"model.norm.weight", {D}},
                                                      {"lm_head.weight", {V, D}}};
  for (int l = 0; l < 2; ++l) {
    std::string m = "model.layers." + std::to_string(l) + ".";
    want[m + "input_layernorm.weight"] = {D};
    want[m + "post_attention_layernorm.weight"] = {D};
    want[m + "self_attn.q_proj.weight"] = {H * Dh, D};
    want[m + "self_attn.q_proj.bias"] = {H * Dh};
    want[m + "self_attn.k_proj.weight"] = {K * Dh, D};
    want[m + "self_attn.k_proj.bias"] = {K * Dh};
    want[m + "self_attn.v_proj.weight"] = {K * Dh, D};
    want[m + "self_attn.v_proj.bias"] = {K * Dh};
    want[m + "self_attn.o_proj.weight"] = {D, H * Dh};
    want[m + "self_attn.o_proj.bias"] = {D};
    want[m + "self_attn.sinks"] = {H};
    want[m + "mlp.router.weight"] = {E, D};
    want[m + "mlp.router.bias"] = {E};
    want[m + "mlp.experts.gate_up_proj"] = {E, D, 2 * I};
    want[m + "mlp.experts.gate_up_proj_bias"] = {E, 2 * I};
    want[m + "mlp.experts.down_proj"] = {E, I, D};
    want[m + "mlp.experts.down_proj_bias"] = {E, D};
  }
  ASSERT_EQ(hf->size(), want.size());
  for (const auto& [name, dims] : want) {
    ASSERT_TRUE(hf->count(name)) << name;
    EXPECT_EQ(hf->at(name).shape().dims(), dims) << name;
  }
  // Layouts: gate_up even columns are wi_0, odd are wi_1; q_proj is query.kernel transposed.
  const ir::Literal& gu = hf->at("model.layers.1.mlp.experts.gate_up_proj");
  const ir::Literal& w0 = kiln.at("layers.1.mlp.wi_0");
  const ir::Literal& w1 = kiln.at("layers.1.mlp.wi_1");
  int64_t e = 3, d = 5, i = 7;
  EXPECT_EQ(gu.at((e * D + d) * 2 * I + 2 * i), w0.at((e * D + d) * I + i));
  EXPECT_EQ(gu.at((e * D + d) * 2 * I + 2 * i + 1), w1.at((e * D + d) * I + i));
  const ir::Literal& q = hf->at("model.layers.0.self_attn.q_proj.weight");
  const ir::Literal& qk = kiln.at("layers.0.self_attention.query.kernel");
  int64_t h = 2, j = 3;
  EXPECT_EQ(q.at((h * Dh + j) * D + d), qk.at((d * H + h) * Dh + j));
}

TEST(HfGptOss, RoundTripsAreBitExact) {
  TensorMap kiln = random_kiln_params(2);
  auto hf = gpt_oss_to_hf(kiln);
  ASSERT_TRUE(hf.ok());
  auto back = gpt_oss_from_hf(*hf, 4);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(kiln, *back);
  auto hf2 = gpt_oss_to_hf(*back);
  ASSERT_TRUE(hf2.ok());
  expect_same(*hf, *hf2);
}

TEST(HfGptOss, MissingOrMisshapenTensorsAreNamed) {
  TensorMap kiln = random_kiln_params(3);
  auto hf = gpt_oss_to_hf(kiln);
  ASSERT_TRUE(hf.ok());
  TensorMap broken = *hf;
  broken.erase("model.layers.1.mlp.experts.down_proj");
  auto r = gpt_oss_from_hf(broken, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.1.mlp.experts.down_proj"), std::string::npos);
  broken = *hf;
  broken["model.layers.0.self_attn.o_proj.weight"] = ir::Literal(ir::Shape(ir::DType::kF32, {32, 31}));
  r = gpt_oss_from_hf(broken, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("o_proj.weight"), std::string::npos) << r.status().message();
}

// config.json -> Kiln keys: shapes from the tensors, the rest from the file (v5
// rope_parameters or v4 rope_theta + rope_scaling); what Kiln cannot express is refused.
TEST(HfGptOss, KilnConfigOfAnHfConfig) {
  const TensorMap kiln = random_kiln_params(5);
  nlohmann::json hf = {{"num_experts_per_tok", 2}, {"sliding_window", 8}, {"swiglu_limit", 2.5},
                       {"rms_norm_eps", 2e-5}, {"max_position_embeddings", 256},
                       {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 8.0},
                                            {"beta_fast", 16.0}, {"beta_slow", 2.0}, {"truncate", true},
                                            {"original_max_position_embeddings", 32}}}};
  auto yaml = gpt_oss_kiln_config(kiln, hf);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  for (const char* line : {"vocab_size: 64\n", "base_emb_dim: 32\n", "base_num_kv_heads: 2\n", "head_dim: 8\n",
                           "num_experts: 4\n", "base_moe_mlp_dim: 16\n", "base_num_decoder_layers: 2\n",
                           "num_experts_per_tok: 2\n", "sliding_window_size: 8\n", "mlp_activations_limit: 2.5\n",
                           "normalization_layer_epsilon: 2e-05\n", "rope_max_timescale: 10000\n", "rope_factor: 8\n",
                           "beta_fast: 16\n", "rope_truncate: true\n", "original_max_position_embeddings: 32\n",
                           "rope_attention_scaling: true\n", "attention_sink: true\n"}) {
    EXPECT_NE(yaml->find(line), std::string::npos) << line << " not in\n" << *yaml;
  }
  // v4 form, only full layers, default rope.
  hf.erase("rope_parameters");
  hf["rope_theta"] = 500.0;
  hf["rope_scaling"] = {{"rope_type", "default"}};
  hf["layer_types"] = {"full_attention", "full_attention"};
  yaml = gpt_oss_kiln_config(kiln, hf);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  for (const char* line : {"rope_type: \"default\"\n", "rope_max_timescale: 500\n", "sliding_window_size: 0\n"}) {
    EXPECT_NE(yaml->find(line), std::string::npos) << line << " not in\n" << *yaml;
  }
  auto refused = [&](nlohmann::json bad, const char* key) {
    auto r = gpt_oss_kiln_config(kiln, bad);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  };
  refused({{"layer_types", {"full_attention", "sliding_attention"}}}, "layer_types");
  refused({{"rope_scaling", {{"rope_type", "llama3"}}}}, "rope_type");
  refused({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.0},
                             {"original_max_position_embeddings", 32}}}},
          "attention_factor");
  refused({{"swiglu_alpha", 1.5}}, "swiglu_alpha");
  refused({{"tie_word_embeddings", true}}, "tie_word_embeddings");
}

// Kiln config -> config.json: the rope and window settings as configured, and what
// GptOssForCausalLM cannot express refused, naming the key.
TEST(HfGptOss, HfConfigFollowsTheKilnConfigAndRefusesWhatTransformersCannotExpress) {
  const TensorMap kiln = random_kiln_params(6);
  auto hf = gpt_oss_hf_config(kiln, "rope_truncate: true\nrope_max_timescale: 500\nsliding_window_size: 8\n");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*hf)["rope_scaling"]["truncate"], true);
  EXPECT_EQ((*hf)["rope_theta"], 500.0);
  EXPECT_EQ((*hf)["layer_types"], nlohmann::json({"sliding_attention", "full_attention"}));
  hf = gpt_oss_hf_config(kiln, "rope_type: default\nrope_interleave: true\nsliding_window_size: 0\n");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*hf)["rope_scaling"]["rope_type"], "default");
  EXPECT_EQ((*hf)["layer_types"], nlohmann::json({"full_attention", "full_attention"}));
  for (const char* bad : {"attention_sink: false", "mlp_bias: false", "mlp_activations: [silu, linear]",
                          "mlp_activations_limit: -1", "rope_interleave: true", "rope_attention_scaling: false",
                          "norm_topk_prob: true", "capacity_factor: 1.25"}) {
    auto r = gpt_oss_hf_config(kiln, bad);
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key(bad, std::string(bad).find(':'));
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

TEST(KilnConvert, HfToKilnToHfFilesRoundTrip) {
  fs::path dir = ::kiln::testing::temp_path("kiln_hf_convert_test");
  fs::remove_all(dir);
  fs::create_directories(dir / "hf");
  auto hf = gpt_oss_to_hf(random_kiln_params(4));
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  ASSERT_TRUE(write_safetensors((dir / "hf" / "model.safetensors").string(), named).ok());
  std::ofstream(dir / "hf" / "config.json") << R"({"model_type": "gpt_oss", "num_attention_heads": 4})";
  std::string bin = KILN_BINARY;
  std::string cmd1 = bin + " convert --from hf --to kiln " + (dir / "hf").string() + " " + (dir / "kiln").string() + " > /dev/null";
  std::string cmd2 = bin + " convert --from kiln --to hf " + (dir / "kiln").string() + " " + (dir / "hf2").string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd1.c_str()), 0) << cmd1;
  EXPECT_TRUE(fs::exists(dir / "kiln" / "0" / "manifest.json"));
  ASSERT_EQ(std::system(cmd2.c_str()), 0) << cmd2;
  auto back = read_safetensors((dir / "hf2" / "model.safetensors").string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*hf, back->tensors);
  EXPECT_TRUE(fs::exists(dir / "hf2" / "config.json"));
}

TEST(HfShards, PlanSplitsInOrderAndGivesAnOversizedTensorItsOwnFile) {
  ShardPlan one = plan_hf_shards({10, 20, 30}, 100);
  EXPECT_EQ(one.files, (std::vector<std::string>{"model.safetensors"}));
  ShardPlan plan = plan_hf_shards({40, 40, 40, 150, 10}, 100);
  EXPECT_EQ(plan.files, (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                                  "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}));
  EXPECT_EQ(plan.members, (std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(*parse_shard_size("k", "5GB"), 5000000000);
  EXPECT_EQ(*parse_shard_size("k", "2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*parse_shard_size("k", "4096"), 4096);
  Result<int64_t> bad = parse_shard_size("--max_shard_size", "5 GB");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--max_shard_size=5 GB"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(parse_shard_size("k", "0MB").ok());
  EXPECT_FALSE(parse_shard_size("k", "GB").ok());
}

// A tiny --max_shard_size splits the export over several files with the index Hugging Face
// reads (every tensor in exactly one named file, total_size the sum), and importing that
// directory gives back the same parameters, bit for bit.
TEST(KilnConvert, ExportLargerThanMaxShardSizeWritesAnIndexAndImportsBack) {
  fs::path dir = ::kiln::testing::temp_path("kiln_hf_convert_sharded");
  fs::remove_all(dir);
  fs::create_directories(dir / "hf");
  auto hf = gpt_oss_to_hf(random_kiln_params(7));
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  int64_t total = 0;
  for (const auto& [name, t] : *hf) {
    named.emplace_back(name, &t);
    total += t.shape().byte_size();
  }
  ASSERT_TRUE(write_safetensors((dir / "hf" / "model.safetensors").string(), named).ok());
  std::ofstream(dir / "hf" / "config.json") << R"({"model_type": "gpt_oss", "num_attention_heads": 4})";
  const std::string bin = KILN_BINARY;
  auto sh = [&](const std::string& args) {
    const std::string cmd = "KILN_PROGRESS=off " + bin + " convert " + args + " > /dev/null";
    return std::system(cmd.c_str());
  };
  ASSERT_EQ(sh("--from hf --to kiln " + (dir / "hf").string() + " " + (dir / "kiln").string()), 0);
  ASSERT_EQ(sh("--from kiln --to hf --max_shard_size=20KB " + (dir / "kiln").string() + " " + (dir / "hf2").string()), 0);
  EXPECT_FALSE(fs::exists(dir / "hf2" / "model.safetensors"));
  std::ifstream in(dir / "hf2" / "model.safetensors.index.json");
  ASSERT_TRUE(in.good());
  nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  std::set<std::string> files;
  TensorMap back;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GE(files.size(), 3u) << "the small model is " << total << " bytes";
  for (const std::string& f : files) {
    auto part = read_safetensors((dir / "hf2" / f).string());
    ASSERT_TRUE(part.ok()) << part.status().to_string();
    EXPECT_LE(fs::file_size(dir / "hf2" / f), 20000u + 4096u) << f;  // + header; no tensor here is over 20 KB
    for (auto& [name, t] : part->tensors) {
      EXPECT_EQ(index["weight_map"][name], f) << name;
      back[name] = t;
    }
  }
  expect_same(*hf, back);
  // The sharded directory imports (through the index) to the same Kiln parameters.
  ASSERT_EQ(sh("--from hf --to kiln " + (dir / "hf2").string() + " " + (dir / "kiln2").string()), 0);
  auto a = load((dir / "kiln" / "0").string()), b = load((dir / "kiln2" / "0").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) EXPECT_TRUE(a->tensors[i].shards == b->tensors[i].shards) << a->tensors[i].name;
  EXPECT_NE(sh("--from kiln --to hf --max_shard_size=lots " + (dir / "kiln").string() + " " + (dir / "hf3").string() +
               " 2>/dev/null"),
            0);
  // Progress on stderr, as plain lines when it is not a terminal: the streaming import (one
  // line over the bytes converted); then reading the checkpoint and writing the export.
  kiln::testing::CliRun imp = kiln::testing::run_command(
      "KILN_PROGRESS=plain " + bin, "convert --from hf --to kiln " + (dir / "hf2").string() + " " + (dir / "kiln3").string());
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_NE(imp.err.find("convert " + (dir / "hf2").string() + ": done"), std::string::npos) << imp.err;
  kiln::testing::CliRun ex = kiln::testing::run_command(
      "KILN_PROGRESS=plain " + bin, "convert --from kiln --to hf " + (dir / "kiln3").string() + " " + (dir / "hf3").string());
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_NE(ex.err.find("write " + (dir / "hf3").string() + ": done"), std::string::npos) << ex.err;
}

}  // namespace
}  // namespace kiln::checkpoint
