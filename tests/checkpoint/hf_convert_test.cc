// GPT-OSS weights between Kiln and Hugging Face: exported names and shapes are the spec's
// (§1.1) for a small GPT-OSS, gate/up interleave as even/odd columns, and
// Kiln -> HF -> Kiln and HF -> Kiln -> HF are bit-exact; `kiln convert` round-trips files.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"

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

TEST(KilnConvert, HfToKilnToHfFilesRoundTrip) {
  fs::path dir = fs::path(::testing::TempDir()) / "kiln_hf_convert_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "hf");
  auto hf = gpt_oss_to_hf(random_kiln_params(4));
  ASSERT_TRUE(hf.ok());
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  ASSERT_TRUE(write_safetensors((dir / "hf" / "model.safetensors").string(), named).ok());
  std::ofstream(dir / "hf" / "config.json") << R"({"num_attention_heads": 4})";
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

}  // namespace
}  // namespace kiln::checkpoint
