// Qwen3-MoE: the shared decoder (models/gpt_oss) with QK-norm and softmax routing; what the
// family does not have is refused here, one line per key.
#include "kiln/models/qwen3_moe/qwen3_moe.h"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/moe_layout.h"

namespace kiln::models::qwen3_moe {

namespace {

Status refuse(const std::string& key, const std::string& value, const std::string& accepted) {
  return invalid_argument("{}: {} is not supported by decoder_block qwen3_moe (accepted: {})", key, value, accepted);
}

// The keys of the shared decoder that Qwen3-MoE does not have, each at the one value it
// accepts.
Status check_keys(const config::Config& config, gpt_oss::GptOssConfig& c) {
  if (!c.is_moe()) return refuse("num_experts", std::to_string(c.num_experts), "more than 1: every layer is MoE");
  if (c.attention_sink) return refuse("attention_sink", "true", "false");
  if (c.attention_bias) return refuse("attention_bias", "true", "false");
  if (c.mlp_bias) return refuse("mlp_bias", "true", "false");
  if (c.routed_bias) return refuse("routed_bias", "true", "false");
  if (c.sliding_window != 0) return refuse("sliding_window_size", std::to_string(c.sliding_window), "0: every layer full");
  if (c.mlp_activations != std::vector<std::string>{"silu", "linear"}) {
    return refuse("mlp_activations", fmt::format("[{}]", fmt::join(c.mlp_activations, ", ")), "[silu, linear]");
  }
  if (c.activations_limit > 0) return refuse("mlp_activations_limit", fmt::format("{}", c.activations_limit), "-1 (no clamp)");
  if (c.rope.type != "default") return refuse("rope_type", "'" + c.rope.type + "'", "default");
  if (const std::string& a = config.get_string("attention_type"); a != "global") {
    return refuse("attention_type", "'" + a + "'", "global");
  }
  if (c.routed_score_func.empty()) c.routed_score_func = "softmax";  // Qwen3's router
  if (c.routed_score_func != "softmax") return refuse("routed_score_func", "'" + c.routed_score_func + "'", "\"\" or softmax");
  if (const int64_t g = config.get_int("n_routing_groups"); g != -1) {
    return refuse("n_routing_groups", std::to_string(g), "-1: no expert groups");
  }
  if (const int64_t g = config.get_int("topk_routing_group"); g != -1) {
    return refuse("topk_routing_group", std::to_string(g), "-1: no expert groups");
  }
  if (const int64_t n = config.get_int("first_num_dense_layers"); n != 0) {
    return refuse("first_num_dense_layers", std::to_string(n), "0: every layer is MoE");
  }
  // The released Qwen3-MoE has none; the shared decoder runs them (transformers'
  // Qwen3MoeForCausalLM cannot hold them: the HF export refuses them).
  c.shared_experts = config.get_int("shared_experts");
  if (c.shared_experts < 0) return refuse("shared_experts", std::to_string(c.shared_experts), ">= 0");
  if (const int64_t n = config.get_int("mtp_num_layers"); n != 0) {
    return refuse("mtp_num_layers", std::to_string(n), "0: no multi-token prediction");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Model>> make_qwen3_moe(const config::Config& config) {
  KILN_ASSIGN_OR_RETURN(gpt_oss::GptOssConfig c, gpt_oss::GptOssConfig::from(config));
  KILN_RETURN_IF_ERROR(check_keys(config, c));
  KILN_RETURN_IF_ERROR(resolve_moe_layout(config, c));
  return std::unique_ptr<Model>(std::make_unique<gpt_oss::GptOss>(std::move(c)));
}

}  // namespace kiln::models::qwen3_moe
