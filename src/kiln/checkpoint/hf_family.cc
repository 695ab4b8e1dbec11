#include "kiln/checkpoint/hf_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "kiln/checkpoint/hf_deepseek.h"
#include "kiln/checkpoint/hf_llama.h"
#include "kiln/checkpoint/hf_qwen3_moe.h"

namespace kiln::checkpoint {

namespace {

Result<TensorMap> gpt_oss_to_hf_with_config(const TensorMap& kiln, const std::string&) { return gpt_oss_to_hf(kiln); }

Result<std::vector<KilnFromHf>> plan_gpt_oss(const HfShapes& hf, const nlohmann::json& config) {
  const auto heads = config.find("num_attention_heads");
  if (heads == config.end() || !heads->is_number_integer() || heads->get<int64_t>() <= 0) {
    return invalid_argument("num_attention_heads must be a positive integer");
  }
  return plan_gpt_oss_from_hf(hf, heads->get<int64_t>());
}

Result<std::string> gpt_oss_config_from_shapes(const std::map<std::string, ir::Shape>& kiln, const nlohmann::json& hf) {
  return gpt_oss_kiln_config(kiln, hf);
}

}  // namespace

const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> kFamilies = {
      {"gpt_oss", "gpt_oss", "GptOssForCausalLM", gpt_oss_to_hf_with_config, gpt_oss_hf_config, plan_gpt_oss,
       gpt_oss_config_from_shapes},
      {"llama2", "llama", "LlamaForCausalLM", llama_to_hf, llama_hf_config, plan_llama_from_hf, llama_kiln_config},
      {"qwen3_moe", "qwen3_moe", "Qwen3MoeForCausalLM", qwen3_moe_to_hf, qwen3_moe_hf_config, plan_qwen3_moe_from_hf,
       qwen3_moe_kiln_config},
      {"deepseek", "deepseek_v3", "DeepseekV3ForCausalLM", deepseek_to_hf, deepseek_hf_config, plan_deepseek_from_hf,
       deepseek_kiln_config},
  };
  return kFamilies;
}

Result<const HfFamily*> hf_family_for_block(const std::string& decoder_block) {
  std::vector<std::string> names;
  for (const HfFamily& f : hf_families()) {
    if (f.decoder_block == decoder_block) return &f;
    names.push_back(f.decoder_block);
  }
  return invalid_argument("decoder_block={}: Kiln has no Hugging Face mapping for this family (accepted: {})",
                          decoder_block, fmt::join(names, ", "));
}

Result<const HfFamily*> hf_family_for_config(const nlohmann::json& hf_config, const std::string& where) {
  std::vector<std::string> names;
  for (const HfFamily& f : hf_families()) names.push_back(f.model_type);
  const auto type = hf_config.find("model_type");
  if (type == hf_config.end() || !type->is_string()) {
    return invalid_argument("{}: no model_type string (accepted: {})", where, fmt::join(names, ", "));
  }
  for (const HfFamily& f : hf_families()) {
    if (f.model_type == type->get<std::string>()) return &f;
  }
  return invalid_argument("{}: model_type '{}' is not a family Kiln converts (accepted: {})", where,
                          type->get<std::string>(), fmt::join(names, ", "));
}

Result<std::string> decoder_block_of(const std::string& config_yaml) {
  try {
    YAML::Node node = YAML::Load(config_yaml);
    if (node["decoder_block"]) return node["decoder_block"].as<std::string>();
  } catch (const YAML::Exception& e) {
    return invalid_argument("the checkpoint's config is not YAML: {}", e.what());
  }
  return std::string("gpt_oss");
}

}  // namespace kiln::checkpoint
