// The model families `kiln convert`, `load_parameters_path` on a Hugging Face directory and
// `kiln forward grads_out=` know, one row each: how a family's weights and config move
// between Kiln's layout (models/<family>/) and the one its `transformers` class reads.
//
// A family is found by its Kiln name (the config's decoder_block) when exporting and by
// config.json's model_type when importing. Adding a family adds one row to the table in
// hf_family.cc and the file that implements it (hf_<family>.cc); nothing else changes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/hf_gpt_oss.h"

namespace kiln::checkpoint {

struct HfFamily {
  std::string decoder_block;  // Kiln's family name: "gpt_oss", "llama2", "qwen3_moe", "deepseek"
  std::string model_type;     // config.json's model_type: "gpt_oss", "llama", ...
  std::string architecture;   // config.json's architectures[0]: "GptOssForCausalLM", ...

  // Kiln tensors -> HF tensors (`config_yaml` is the resolved Kiln config the tensors came
  // with). Fails naming the tensor that is missing or misshapen.
  Result<TensorMap> (*to_hf)(const TensorMap& kiln, const std::string& config_yaml) = nullptr;
  // The config.json of those tensors; a Kiln config the HF class cannot express is an error
  // naming the key.
  Result<nlohmann::json> (*hf_config)(const TensorMap& kiln, const std::string& config_yaml) = nullptr;
  // From HF shapes and config.json: which HF tensor makes each Kiln tensor, and how
  // (hf_gpt_oss.h: KilnFromHf), from names and shapes alone.
  Result<std::vector<KilnFromHf>> (*plan_from_hf)(const HfShapes& hf, const nlohmann::json& hf_config) = nullptr;
  // The Kiln config (YAML over base.yml) of the planned tensors and config.json.
  Result<std::string> (*kiln_config)(const std::map<std::string, ir::Shape>& kiln,
                                     const nlohmann::json& hf_config) = nullptr;
};

// Every family, in the order they were added.
const std::vector<HfFamily>& hf_families();
// The family of a Kiln config's decoder_block, or an error listing the ones Kiln converts.
Result<const HfFamily*> hf_family_for_block(const std::string& decoder_block);
// The family of a config.json (its model_type), or an error naming the file's model_type
// and listing the accepted ones. `where` names the file in the error.
Result<const HfFamily*> hf_family_for_config(const nlohmann::json& hf_config, const std::string& where);
// The decoder_block of a resolved Kiln config (YAML text); "gpt_oss" when absent.
Result<std::string> decoder_block_of(const std::string& config_yaml);

}  // namespace kiln::checkpoint
