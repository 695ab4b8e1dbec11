// GptOssConfig from the resolved config: every architecture number comes from a key.
#include <algorithm>
#include <set>

#include "kiln/models/gpt_oss/gpt_oss.h"

namespace kiln::models::gpt_oss {

namespace {

Result<ir::DType> parse_dtype(const config::Config& config, const char* key) {
  const std::string& s = config.get_string(key);
  if (s == "float32") return ir::DType::kF32;
  if (s == "bfloat16") return ir::DType::kBF16;
  return invalid_argument("{}: '{}' is not a dtype the model computes in (accepted: float32, bfloat16)", key, s);
}

// A number key, whether its base.yml default is written as an int or a float.
double number(const config::Config& config, const char* key) { return config.get(key).as_float(); }

// num_vocab_tiling: tiles along the sequence, each a whole number of tokens. -1 picks the
// fewest tiles (a divisor of the sequence) whose float32 logits per device fit 1 GiB: about
// 1,300 tokens of a 201,088-entry vocabulary, so a GPT-OSS tile's logits, the softmax made
// from them and their gradient stay near a GiB each where 16,384 tokens' would be 12 GiB.
Result<int64_t> resolve_vocab_tiling(const config::Config& config) {
  const int64_t tiles = config.get_int("num_vocab_tiling");
  const int64_t length = config.get_int("max_target_length");
  if (tiles == -1) {
    constexpr double kTileBytes = 1024.0 * 1024 * 1024;
    const double tokens = std::max(1.0, number(config, "per_device_batch_size")) * static_cast<double>(length);
    const double logits_bytes = tokens * static_cast<double>(config.get_int("vocab_size")) * 4.0;
    for (int64_t t = 1; t <= length; ++t) {
      if (length % t == 0 && logits_bytes / static_cast<double>(t) <= kTileBytes) return t;
    }
    return length;
  }
  if (tiles < 1 || length % tiles != 0) {
    return invalid_argument("num_vocab_tiling={}: the tiles split the sequence, so it must divide max_target_length={} "
                            "(accepted: a divisor of it, or -1 to choose)",
                            tiles, length);
  }
  return tiles;
}

}  // namespace

Result<GptOssConfig> GptOssConfig::from(const config::Config& config) {
  const config::Derived& d = config.derived();
  GptOssConfig c;
  c.vocab = config.get_int("vocab_size");
  c.emb = d.emb_dim;
  c.heads = d.num_query_heads;
  c.kv_heads = d.num_kv_heads;
  c.head_dim = d.head_dim;
  c.layers = d.num_decoder_layers;
  c.num_experts = config.get_int("num_experts");
  c.top_k = config.get_int("num_experts_per_tok");
  c.mlp_dim = c.num_experts > 1 ? d.moe_mlp_dim : d.mlp_dim;
  c.eps = number(config, "normalization_layer_epsilon");
  c.attention_bias = config.get_bool("attention_bias");
  c.attention_sink = config.get_bool("attention_sink");
  c.use_qk_norm = config.get_bool("use_qk_norm");
  c.sliding_window = config.get_int("sliding_window_size");
  c.attention = config.get_string("attention");

  RopeConfig& r = c.rope;
  r.type = config.get_string("rope_type");
  r.head_dim = c.head_dim;
  r.min_timescale = number(config, "rope_min_timescale");
  r.max_timescale = number(config, "rope_max_timescale");
  r.factor = number(config, "rope_factor");
  r.beta_fast = number(config, "beta_fast");
  r.beta_slow = number(config, "beta_slow");
  r.original_max_position = config.get_int("original_max_position_embeddings");
  r.truncate = config.get_bool("rope_truncate");
  r.attention_scaling = config.get_bool("rope_attention_scaling");
  r.mscale = number(config, "mscale");
  r.interleave = config.get_bool("rope_interleave");

  c.mlp_activations = config.get_string_list("mlp_activations");
  c.activations_limit = number(config, "mlp_activations_limit");
  c.mlp_bias = config.get_bool("mlp_bias");
  c.routed_bias = config.get_bool("routed_bias");
  c.norm_topk_prob = config.get_bool("norm_topk_prob");
  c.float32_weight_sum = config.get_bool("float32_weight_sum");
  c.routed_scaling_factor = number(config, "routed_scaling_factor");
  c.routed_score_func = config.get_string("routed_score_func");
  c.load_balance_loss_weight = number(config, "load_balance_loss_weight");
  c.sparse_matmul = config.get_bool("sparse_matmul");
  c.capacity_factor = number(config, "capacity_factor");
  c.use_random_routing = config.get_bool("use_random_routing");
  c.z_loss_multiplier = number(config, "z_loss_multiplier");
  c.logits_via_embedding = config.get_bool("logits_via_embedding");
  c.cast_logits_to_fp32 = config.get_bool("cast_logits_to_fp32");
  KILN_ASSIGN_OR_RETURN(c.vocab_tiles, resolve_vocab_tiling(config));
  KILN_ASSIGN_OR_RETURN(c.dtype, parse_dtype(config, "dtype"));
  KILN_ASSIGN_OR_RETURN(c.weight_dtype, parse_dtype(config, "weight_dtype"));

  // What this model can express.
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(c.vocab) || !positive(c.emb) || !positive(c.heads) || !positive(c.kv_heads) ||
      !positive(c.head_dim) || !positive(c.layers) || !positive(c.mlp_dim)) {
    return invalid_argument("model shape must be positive: vocab_size {}, emb_dim {}, heads {}/{}, head_dim {}, "
                            "layers {}, mlp width {}",
                            c.vocab, c.emb, c.heads, c.kv_heads, c.head_dim, c.layers, c.mlp_dim);
  }
  if (c.heads % c.kv_heads != 0) {
    return invalid_argument("base_num_query_heads: {} query heads must be a multiple of the {} kv heads (GQA)",
                            c.heads, c.kv_heads);
  }
  if (c.head_dim % 2 != 0) return invalid_argument("head_dim: RoPE needs an even head width, got {}", c.head_dim);
  // The shared rope code has all three; each family's make function refuses the ones it
  // does not have (GPT-OSS: llama3.1).
  if (r.type != "default" && r.type != "yarn" && r.type != "llama3.1") {
    return invalid_argument("rope_type: '{}' is not supported (accepted: default, llama3.1, yarn)", r.type);
  }
  if (c.num_experts < 1 || c.top_k < 1 || c.top_k > c.num_experts) {
    return invalid_argument("num_experts_per_tok: {} must be between 1 and num_experts ({})", c.top_k, c.num_experts);
  }
  if (c.sliding_window < 0) return invalid_argument("sliding_window_size: {} must be >= 0", c.sliding_window);
  static const std::set<std::string> kActivations = {"silu", "gelu", "relu", "sigmoid", "linear"};
  if (c.mlp_activations.empty() || c.mlp_activations.size() > 2) {
    return invalid_argument("mlp_activations: wants one activation or a gated pair, got {} entries",
                            c.mlp_activations.size());
  }
  for (const std::string& a : c.mlp_activations) {
    if (!kActivations.count(a)) {
      return invalid_argument("mlp_activations: '{}' is not supported (accepted: silu, gelu, relu, sigmoid, linear)", a);
    }
  }
  // Switches that would change the math but are not implemented yet fail loudly.
  if (number(config, "attn_logits_soft_cap") > 0) {
    return unimplemented("attn_logits_soft_cap: attention logit soft-capping is not implemented by decoder_block gpt_oss");
  }
  if (config.get_bool("fused_qkv")) {
    return unimplemented("fused_qkv: the fused q/k/v projection layout is not implemented by decoder_block gpt_oss");
  }
  if (config.get_bool("enable_dropout") && number(config, "dropout_rate") > 0) {
    return unimplemented("dropout_rate: dropout is not implemented by decoder_block gpt_oss (set enable_dropout=false "
                         "or dropout_rate=0)");
  }
  return c;
}

}  // namespace kiln::models::gpt_oss
