// A small GPT-OSS in the Hugging Face layout, written by Kiln's own exporter with OpenAI's
// MXFP4 expert blocks for one layer: the fixture of the streaming-import tests and the seed
// of the hf_dir fuzz target.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"

namespace kiln::testing {

// The Kiln parameters of a small GPT-OSS (D=32, H=2, K=1, Dh=16, E=2, I=32, V=40, 2 layers),
// every element uniform in [-1, 1) drawn in parameter order from `seed`.
inline checkpoint::TensorMap small_gpt_oss_params(uint64_t seed) {
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "vocab_size=40",
                  "base_num_decoder_layers=2", "base_emb_dim=32", "base_num_query_heads=2", "base_num_kv_heads=1",
                  "head_dim=16", "base_mlp_dim=32", "base_moe_mlp_dim=32", "num_experts=2", "num_experts_per_tok=1"};
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  KILN_CHECK(model.ok());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  checkpoint::TensorMap kiln;
  for (const models::ParamSpec& p : (*model)->params()) {
    std::vector<double> v(static_cast<size_t>(p.shape.num_elements()));
    for (double& x : v) x = u(rng);
    kiln[p.name] = ir::Literal(p.shape, v);
  }
  return kiln;
}

// small_gpt_oss_params(11) in the HF layout: layer 0's experts as MXFP4 blocks + scales,
// layer 1's gate_up_proj in bf16, the rest f32; split over two files with
// model.safetensors.index.json.
inline void write_hf_fixture(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const checkpoint::TensorMap kiln = small_gpt_oss_params(11);
  auto hf = checkpoint::gpt_oss_to_hf(kiln);
  KILN_CHECK(hf.ok()) << hf.status().to_string();
  const std::string e = "model.layers.0.mlp.experts.";
  hf->erase(e + "gate_up_proj");
  hf->erase(e + "down_proj");
  ir::Literal& gu1 = hf->at("model.layers.1.mlp.experts.gate_up_proj");
  gu1 = ir::Literal(ir::Shape(ir::DType::kBF16, gu1.shape().dims()), gu1.values());
  // OpenAI layout: gate_up [E, 2I, D/32, 16], down [E, D, I/32, 16]; scales near the bias.
  std::mt19937 bytes(5);
  auto random_bytes = [&](int64_t n, int base, int spread) {
    std::string s(static_cast<size_t>(n), '\0');
    for (char& c : s) c = static_cast<char>(base + static_cast<int>(bytes() % spread));
    return s;
  };
  const std::string gu_b = random_bytes(2 * 64 * 16, 0, 256), gu_s = random_bytes(2 * 64, 119, 17);
  const std::string dn_b = random_bytes(2 * 32 * 16, 0, 256), dn_s = random_bytes(2 * 32, 119, 17);
  std::vector<std::string> payloads;
  payloads.reserve(hf->size());
  std::vector<checkpoint::RawTensor> first = {{e + "gate_up_proj_blocks", "U8", {2, 64, 1, 16}, &gu_b},
                                  {e + "gate_up_proj_scales", "U8", {2, 64, 1}, &gu_s},
                                  {e + "down_proj_blocks", "U8", {2, 32, 1, 16}, &dn_b},
                                  {e + "down_proj_scales", "U8", {2, 32, 1}, &dn_s}};
  std::vector<checkpoint::RawTensor> second;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (const checkpoint::RawTensor& t : first) weight_map[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, t] : *hf) {
    payloads.push_back(checkpoint::literal_bytes(t));
    const bool in_first = name.find("layers.1.") == std::string::npos;
    (in_first ? first : second).push_back({name, checkpoint::safetensors_dtype(t.shape().dtype()), t.shape().dims(), &payloads.back()});
    weight_map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  KILN_CHECK(checkpoint::write_safetensors_raw((dir / "model-00001-of-00002.safetensors").string(), first).ok());
  KILN_CHECK(checkpoint::write_safetensors_raw((dir / "model-00002-of-00002.safetensors").string(), second).ok());
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::ordered_json{{"weight_map", weight_map}}.dump(2);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt_oss", "num_attention_heads": 2, "num_experts_per_tok": 1})";
}

}  // namespace kiln::testing
