// DeepseekConfig from the resolved config: the shared decoder's keys (GptOssConfig::from),
// DeepSeek-V3's own (MLA widths, dense-first layers, shared experts, sigmoid group routing,
// multi-token prediction, the bias update) and a one-line refusal of every key the family
// does not implement at another value.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/models/deepseek/deepseek.h"

namespace kiln::models::deepseek {

namespace {

Status refuse(const std::string& key, const std::string& value, const std::string& accepted) {
  return invalid_argument("{}: {} is not supported by decoder_block deepseek (accepted: {})", key, value, accepted);
}

double number(const config::Config& config, const char* key) { return config.get(key).as_float(); }

}  // namespace

Result<DeepseekConfig> DeepseekConfig::from(const config::Config& config) {
  KILN_ASSIGN_OR_RETURN(gpt_oss::GptOssConfig c, gpt_oss::GptOssConfig::from(config));
  DeepseekConfig d;
  d.q_lora_rank = config.get_int("q_lora_rank");
  d.kv_lora_rank = config.get_int("kv_lora_rank");
  d.qk_nope = config.get_int("qk_nope_head_dim");
  d.qk_rope = config.get_int("qk_rope_head_dim");
  d.v_head_dim = config.get_int("v_head_dim");
  d.first_dense_layers = config.get_int("first_num_dense_layers");
  d.mtp_layers = config.get_int("mtp_num_layers");
  d.mtp_scale = number(config, "mtp_loss_scaling_factor");
  d.bias_update_rate = number(config, "routed_bias_update_rate");
  c.n_routing_groups = config.get_int("n_routing_groups");
  c.topk_routing_group = config.get_int("topk_routing_group");
  c.shared_experts = config.get_int("shared_experts");

  // What DeepSeek-V3 is: MLA, no sinks/biases/windows/qk-norm, a SwiGLU MLP.
  if (const std::string& a = config.get_string("attention_type"); a != "mla") {
    return refuse("attention_type", "'" + a + "'", "mla: DeepSeek-V3's multi-head latent attention");
  }
  if (c.attention_sink) return refuse("attention_sink", "true", "false");
  if (c.attention_bias) return refuse("attention_bias", "true", "false");
  if (c.mlp_bias) return refuse("mlp_bias", "true", "false");
  if (c.use_qk_norm) return refuse("use_qk_norm", "true", "false (MLA normalises its latents instead)");
  if (c.sliding_window != 0) return refuse("sliding_window_size", std::to_string(c.sliding_window), "0: every layer full");
  if (c.mlp_activations != std::vector<std::string>{"silu", "linear"}) {
    return refuse("mlp_activations", fmt::format("[{}]", fmt::join(c.mlp_activations, ", ")), "[silu, linear]");
  }
  if (c.activations_limit > 0) return refuse("mlp_activations_limit", fmt::format("{}", c.activations_limit), "-1");
  if (c.rope.type != "default" && c.rope.type != "yarn") return refuse("rope_type", "'" + c.rope.type + "'", "default, yarn");
  if (c.kv_heads != c.heads) {
    return refuse("base_num_kv_heads", std::to_string(c.kv_heads),
                  fmt::format("{} (base_num_query_heads: MLA expands one latent into every head)", c.heads));
  }
  if (d.q_lora_rank < 0 || d.kv_lora_rank <= 0 || d.qk_nope < 0 || d.qk_rope <= 0 || d.qk_rope % 2 != 0 ||
      d.v_head_dim <= 0) {
    return invalid_argument("MLA widths: q_lora_rank {} (>= 0), kv_lora_rank {} (> 0), qk_nope_head_dim {} (>= 0), "
                            "qk_rope_head_dim {} (> 0, even), v_head_dim {} (> 0)",
                            d.q_lora_rank, d.kv_lora_rank, d.qk_nope, d.qk_rope, d.v_head_dim);
  }
  // RoPE covers the qk_rope_head_dim part only; rope_interleave rotates (2i, 2i+1) pairs and
  // writes halves (transformers' apply_rotary_pos_emb_interleave), for default RoPE too.
  c.rope.head_dim = d.qk_rope;
  if (c.rope.type == "yarn" && c.rope.attention_scaling) {
    return refuse("rope_attention_scaling", "true",
                  "false: DeepSeek-V3 scales the softmax by mscale^2 instead of cos and sin (mscale = mscale_all_dim)");
  }
  // transformers' yarn_apply_mscale (and MaxText's MLA): the softmax scale 1/sqrt(dqk) times
  // (0.1 mscale ln(factor) + 1)^2 under YaRN with factor > 1.
  d.softmax_scale = 1.0 / std::sqrt(static_cast<double>(d.qk_nope + d.qk_rope));
  if (c.rope.type == "yarn" && c.rope.factor > 1.0) {
    const double m = 0.1 * c.rope.mscale * std::log(c.rope.factor) + 1.0;
    d.softmax_scale *= m * m;
  }

  // The MLP: dense first, then MoE with sigmoid group routing and shared experts.
  if (d.first_dense_layers < 0 || d.first_dense_layers > c.layers) {
    return invalid_argument("first_num_dense_layers: {} must be between 0 and the {} layers", d.first_dense_layers,
                            c.layers);
  }
  d.dense = c;
  d.dense.num_experts = 1;
  d.dense.top_k = 1;
  d.dense.shared_experts = 0;
  d.dense.mlp_dim = config.derived().mlp_dim;
  d.moe = c;
  if (c.is_moe()) {
    if (c.routed_score_func != "sigmoid") {
      return refuse("routed_score_func", "'" + c.routed_score_func + "'", "sigmoid: DeepSeek-V3's router");
    }
    if (c.load_balance_loss_weight > 0) {
      return refuse("load_balance_loss_weight", fmt::format("{}", c.load_balance_loss_weight),
                    "0: DeepSeek-V3 balances with the bias update (routed_bias_update_rate)");
    }
    if (c.shared_experts < 0) return refuse("shared_experts", std::to_string(c.shared_experts), ">= 0");
    const int64_t e = c.num_experts, g = c.n_routing_groups;
    if (g != -1 && g != 1) {
      const int64_t tg = c.topk_routing_group == -1 ? g : c.topk_routing_group;
      if (g < 1 || e % g != 0 || e / g < 2) {
        return refuse("n_routing_groups", std::to_string(g),
                      fmt::format("-1 or a divisor of num_experts={} leaving at least 2 experts per group", e));
      }
      if (tg < 1 || tg > g || tg * (e / g) < c.top_k) {
        return refuse("topk_routing_group", std::to_string(c.topk_routing_group),
                      fmt::format("-1 or 1..{} groups holding at least num_experts_per_tok={} experts", g, c.top_k));
      }
      d.moe.topk_routing_group = tg;
    } else if (c.topk_routing_group != -1) {
      return refuse("topk_routing_group", std::to_string(c.topk_routing_group), "-1 without n_routing_groups");
    }
    if (c.capacity_factor > 0) {
      return refuse("capacity_factor", fmt::format("{}", c.capacity_factor), "-1: dropless, as DeepSeek-V3 trains");
    }
  } else {
    for (const char* key : {"shared_experts", "mtp_num_layers"}) {
      if (config.get_int(key) != 0) return refuse(key, std::to_string(config.get_int(key)), "0 with num_experts=1");
    }
  }
  if (d.bias_update_rate < 0) return refuse("routed_bias_update_rate", fmt::format("{}", d.bias_update_rate), ">= 0");
  if (d.bias_update_rate > 0 && !(c.is_moe() && c.routed_bias)) {
    return refuse("routed_bias_update_rate", fmt::format("{}", d.bias_update_rate),
                  "0 unless routed_bias=true and num_experts > 1 (it updates the router's correction bias)");
  }
  if (d.mtp_layers < 0) return refuse("mtp_num_layers", std::to_string(d.mtp_layers), ">= 0");
  return d;
}

}  // namespace kiln::models::deepseek
