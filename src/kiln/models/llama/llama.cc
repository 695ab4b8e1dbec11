// The Llama family: GptOss with the switches of a dense Llama, and every key it does not
// implement refused by name (llama.h).
#include "kiln/models/llama/llama.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::models::llama {

namespace {

Status refuse(const char* key, const std::string& value, const char* accepted) {
  return invalid_argument("{}: {} is not implemented by decoder_block llama2 (accepted: {})", key, value, accepted);
}

// Switches of the shared decoder that a Llama has off; each at any other value is refused.
Status check_off(const config::Config& config) {
  // Attention: no sinks, biases, window, QK norm or MLA.
  for (const char* key : {"attention_sink", "attention_bias", "use_qk_norm"}) {
    if (config.get_bool(key)) return refuse(key, "true", "false");
  }
  if (config.get_int("sliding_window_size") != 0) {
    return refuse("sliding_window_size", std::to_string(config.get_int("sliding_window_size")),
                  "0: every Llama layer attends to the whole causal context");
  }
  if (config.get_bool("fused_qkv")) return refuse("fused_qkv", "true", "false: separate q, k and v projections");
  if (config.get_float("attn_logits_soft_cap") > 0) {
    return refuse("attn_logits_soft_cap", fmt::format("{}", config.get_float("attn_logits_soft_cap")),
                  "0: no soft cap");
  }
  if (config.get_bool("enable_dropout") && config.get_float("dropout_rate") > 0) {
    return refuse("dropout_rate", fmt::format("{}", config.get_float("dropout_rate")),
                  "0, or enable_dropout=false");
  }
  if (config.get_string("attention_type") != "global") {
    return refuse("attention_type", "'" + config.get_string("attention_type") + "'", "global");
  }
  // RoPE: plain or Llama 3.1's scaling, halves rotated as transformers' Llama does (YaRN's
  // own keys, beta_fast and the rest, are read only under rope_type yarn).
  const std::string& rope = config.get_string("rope_type");
  if (rope != "default" && rope != "llama3.1") return refuse("rope_type", "'" + rope + "'", "default, llama3.1");
  if (config.get_bool("rope_interleave")) {
    return refuse("rope_interleave", "true", "false: the two halves of a head are rotated, as in transformers' Llama");
  }
  // MLP: one dense SwiGLU without biases or clamp.
  if (config.get_int("num_experts") != 1) {
    return refuse("num_experts", std::to_string(config.get_int("num_experts")), "1: a dense MLP");
  }
  const std::vector<std::string> acts = config.get_string_list("mlp_activations");
  if (acts != std::vector<std::string>{"silu", "linear"}) {
    return refuse("mlp_activations", fmt::format("[{}]", fmt::join(acts, ", ")), "[silu, linear]: SwiGLU");
  }
  if (config.get_float("mlp_activations_limit") > 0) {
    return refuse("mlp_activations_limit", fmt::format("{}", config.get_float("mlp_activations_limit")),
                  "-1: no clamp");
  }
  if (config.get_bool("mlp_bias")) return refuse("mlp_bias", "true", "false");
  // Keys of experts and routing, which a dense MLP has none of, and multi-token prediction.
  for (const char* key : {"routed_bias", "norm_topk_prob", "use_random_routing"}) {
    if (config.get_bool(key)) return refuse(key, "true", "false: a Llama has no router");
  }
  for (const char* key : {"shared_experts", "first_num_dense_layers", "mtp_num_layers"}) {
    if (config.get_int(key) != 0) return refuse(key, std::to_string(config.get_int(key)), "0");
  }
  for (const char* key : {"n_routing_groups", "topk_routing_group"}) {
    if (config.get_int(key) != -1) return refuse(key, std::to_string(config.get_int(key)), "-1: a Llama has no router");
  }
  if (!config.get_string("routed_score_func").empty()) {
    return refuse("routed_score_func", "'" + config.get_string("routed_score_func") + "'",
                  "\"\": a Llama has no router");
  }
  if (config.get_float("load_balance_loss_weight") != 0.0) {
    return refuse("load_balance_loss_weight", fmt::format("{}", config.get_float("load_balance_loss_weight")),
                  "0: a Llama has no router");
  }
  return ok_status();
}

}  // namespace

Result<gpt_oss::GptOssConfig> llama_config(const config::Config& config) {
  // The refusals first: they name the key a user set, where GptOssConfig::from would name
  // a consequence of it.
  KILN_RETURN_IF_ERROR(check_off(config));
  return gpt_oss::GptOssConfig::from(config);
}

Result<std::unique_ptr<Model>> make_llama(const config::Config& config) {
  KILN_ASSIGN_OR_RETURN(gpt_oss::GptOssConfig c, llama_config(config));
  return std::unique_ptr<Model>(std::make_unique<gpt_oss::GptOss>(std::move(c)));
}

}  // namespace kiln::models::llama
