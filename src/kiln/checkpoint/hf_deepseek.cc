// The DeepSeek-V3 mapping (hf_deepseek.h) is written once, as a list of links between a Kiln
// tensor and the Hugging Face tensor(s) it is, with both shapes; every direction walks it.
#include "kiln/checkpoint/hf_deepseek.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/checkpoint/hf_common.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace {

// The model's dimensions, from either side.
struct Dims {
  int64_t vocab = 0, emb = 0, heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v = 0;
  int64_t mlp = 0, moe_mlp = 0, experts = 0, shared = 0;  // shared: the shared experts' total width
  int64_t layers = 0, first_dense = 0, mtp = 0;
  int64_t dqk() const { return nope + rope; }
};

// One Kiln tensor and the HF tensor it is: the same values, or (transpose) the HF tensor is
// the Kiln tensor, viewed as a matrix [hf[1], hf[0]], transposed. With experts > 0 the Kiln
// tensor [E, ...] is the E tensors named by `hf` with {} the expert, each as above.
struct Link {
  std::string kiln, hf;
  std::vector<int64_t> kiln_dims, hf_dims;
  bool transpose = false;
  int64_t experts = 0;
  std::string hf_name(int64_t e) const { return experts > 0 ? fmt::format(fmt::runtime(hf), e) : hf; }
};

void layer_links(const Dims& d, const std::string& n, const std::string& m, bool moe, std::vector<Link>& out) {
  const int64_t D = d.emb, H = d.heads;
  const std::string a = n + "self_attention.", s = m + "self_attn.";
  out.push_back({n + "pre_self_attention_layer_norm.scale", m + "input_layernorm.weight", {D}, {D}});
  if (d.q_lora > 0) {
    out.push_back({a + "wq_a.kernel", s + "q_a_proj.weight", {D, d.q_lora}, {d.q_lora, D}, true});
    out.push_back({a + "q_norm.scale", s + "q_a_layernorm.weight", {d.q_lora}, {d.q_lora}});
    out.push_back({a + "wq_b.kernel", s + "q_b_proj.weight", {d.q_lora, H, d.dqk()}, {H * d.dqk(), d.q_lora}, true});
  } else {
    out.push_back({a + "query.kernel", s + "q_proj.weight", {D, H, d.dqk()}, {H * d.dqk(), D}, true});
  }
  out.push_back({a + "wkv_a.kernel", s + "kv_a_proj_with_mqa.weight", {D, d.kv_lora + d.rope}, {d.kv_lora + d.rope, D}, true});
  out.push_back({a + "kv_norm.scale", s + "kv_a_layernorm.weight", {d.kv_lora}, {d.kv_lora}});
  out.push_back({a + "wkv_b.kernel", s + "kv_b_proj.weight", {d.kv_lora, H, d.nope + d.v}, {H * (d.nope + d.v), d.kv_lora}, true});
  out.push_back({a + "out.kernel", s + "o_proj.weight", {H, d.v, D}, {D, H * d.v}, true});
  out.push_back({n + "post_self_attention_layer_norm.scale", m + "post_attention_layernorm.weight", {D}, {D}});
  const std::string k = n + "mlp.", h = m + "mlp.";
  if (!moe) {
    out.push_back({k + "wi_0.kernel", h + "gate_proj.weight", {D, d.mlp}, {d.mlp, D}, true});
    out.push_back({k + "wi_1.kernel", h + "up_proj.weight", {D, d.mlp}, {d.mlp, D}, true});
    out.push_back({k + "wo.kernel", h + "down_proj.weight", {d.mlp, D}, {D, d.mlp}, true});
    return;
  }
  const int64_t E = d.experts, I = d.moe_mlp;
  out.push_back({k + "gate.kernel", h + "gate.weight", {D, E}, {E, D}, true});
  out.push_back({k + "gate.bias", h + "gate.e_score_correction_bias", {E}, {E}});
  out.push_back({k + "wi_0", h + "experts.{}.gate_proj.weight", {E, D, I}, {I, D}, true, E});
  out.push_back({k + "wi_1", h + "experts.{}.up_proj.weight", {E, D, I}, {I, D}, true, E});
  out.push_back({k + "wo", h + "experts.{}.down_proj.weight", {E, I, D}, {D, I}, true, E});
  if (d.shared > 0) {
    out.push_back({k + "shared_experts.wi_0.kernel", h + "shared_experts.gate_proj.weight", {D, d.shared}, {d.shared, D}, true});
    out.push_back({k + "shared_experts.wi_1.kernel", h + "shared_experts.up_proj.weight", {D, d.shared}, {d.shared, D}, true});
    out.push_back({k + "shared_experts.wo.kernel", h + "shared_experts.down_proj.weight", {d.shared, D}, {D, d.shared}, true});
  }
}

std::vector<Link> links(const Dims& d) {
  const int64_t V = d.vocab, D = d.emb;
  std::vector<Link> out = {{"token_embedder.embedding", "model.embed_tokens.weight", {V, D}, {V, D}}};
  for (int64_t l = 0; l < d.layers; ++l) {
    layer_links(d, fmt::format("layers.{}.", l), fmt::format("model.layers.{}.", l), l >= d.first_dense, out);
  }
  for (int64_t k = 1; k <= d.mtp; ++k) {
    const std::string n = fmt::format("mtp.{}.", k), m = fmt::format("model.layers.{}.", d.layers + k - 1);
    out.push_back({n + "embedding_norm.scale", m + "enorm.weight", {D}, {D}});
    out.push_back({n + "hidden_state_norm.scale", m + "hnorm.weight", {D}, {D}});
    out.push_back({n + "projection.kernel", m + "eh_proj.weight", {2 * D, D}, {D, 2 * D}, true});
    layer_links(d, n + "layer.", m, d.experts > 1, out);
  }
  out.push_back({"decoder_norm.scale", "model.norm.weight", {D}, {D}});
  out.push_back({"logits_dense.kernel", "lm_head.weight", {D, V}, {V, D}, true});
  return out;
}

int64_t num_elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Result<std::vector<int64_t>> kiln_dims(const std::map<std::string, ir::Shape>& k, const std::string& name, size_t rank) {
  auto it = k.find(name);
  if (it == k.end()) return not_found("Kiln tensor {} is missing", name);
  if (it->second.dims().size() != rank) {
    return invalid_argument("Kiln tensor {} is {}, expected rank {}", name, it->second.to_string(), rank);
  }
  return it->second.dims();
}

// The dimensions of Kiln tensors, from their shapes alone.
Result<Dims> dims_from_kiln(const std::map<std::string, ir::Shape>& k) {
  Dims d;
  KILN_ASSIGN_OR_RETURN(auto emb, kiln_dims(k, "token_embedder.embedding", 2));
  KILN_ASSIGN_OR_RETURN(auto out, kiln_dims(k, "layers.0.self_attention.out.kernel", 3));
  KILN_ASSIGN_OR_RETURN(auto kv_a, kiln_dims(k, "layers.0.self_attention.wkv_a.kernel", 2));
  KILN_ASSIGN_OR_RETURN(auto kv_b, kiln_dims(k, "layers.0.self_attention.wkv_b.kernel", 3));
  d.vocab = emb[0], d.emb = emb[1], d.heads = out[0], d.v = out[1];
  d.kv_lora = kv_b[0], d.rope = kv_a[1] - d.kv_lora, d.nope = kv_b[2] - d.v;
  if (k.count("layers.0.self_attention.wq_a.kernel")) {
    KILN_ASSIGN_OR_RETURN(auto wq_a, kiln_dims(k, "layers.0.self_attention.wq_a.kernel", 2));
    d.q_lora = wq_a[1];
  }
  d.layers = count_layers(k, "layers.", ".self_attention.out.kernel", 0);
  d.first_dense = count_layers(k, "layers.", ".mlp.wi_0.kernel", 0);
  if (d.first_dense > 0) {
    KILN_ASSIGN_OR_RETURN(auto wi, kiln_dims(k, "layers.0.mlp.wi_0.kernel", 2));
    d.mlp = wi[1];
  }
  const std::string moe = fmt::format("layers.{}.mlp.", d.first_dense);
  if (d.first_dense < d.layers) {
    KILN_ASSIGN_OR_RETURN(auto wi, kiln_dims(k, moe + "wi_0", 3));
    d.experts = wi[0], d.moe_mlp = wi[2];
    if (k.count(moe + "shared_experts.wi_0.kernel")) {
      KILN_ASSIGN_OR_RETURN(auto s, kiln_dims(k, moe + "shared_experts.wi_0.kernel", 2));
      d.shared = s[1];
    }
  }
  d.mtp = count_layers(k, "mtp.", ".projection.kernel", 1);
  return d;
}

// The dimensions config.json states (transformers' DeepseekV3Config defaults when absent),
// the vocabulary and width from the embedding, the MTP modules from the tensors present.
Result<Dims> dims_from_hf(const HfShapes& hf, const nlohmann::json& c) {
  Dims d;
  auto it = hf.find("model.embed_tokens.weight");
  if (it == hf.end()) return not_found("Hugging Face tensor model.embed_tokens.weight is missing");
  if (it->second.dims.size() != 2) return invalid_argument("Hugging Face tensor model.embed_tokens.weight is not a matrix");
  d.vocab = it->second.dims[0], d.emb = it->second.dims[1];
  KILN_ASSIGN_OR_RETURN(d.heads, config_int(c, "num_attention_heads", 128));
  KILN_ASSIGN_OR_RETURN(d.q_lora, config_int(c, "q_lora_rank", 1536));  // null: a full-rank query
  if (c.contains("q_lora_rank") && c["q_lora_rank"].is_null()) d.q_lora = 0;
  KILN_ASSIGN_OR_RETURN(d.kv_lora, config_int(c, "kv_lora_rank", 512));
  KILN_ASSIGN_OR_RETURN(d.nope, config_int(c, "qk_nope_head_dim", 128));
  KILN_ASSIGN_OR_RETURN(d.rope, config_int(c, "qk_rope_head_dim", 64));
  KILN_ASSIGN_OR_RETURN(d.v, config_int(c, "v_head_dim", 128));
  KILN_ASSIGN_OR_RETURN(d.mlp, config_int(c, "intermediate_size", 18432));
  KILN_ASSIGN_OR_RETURN(d.moe_mlp, config_int(c, "moe_intermediate_size", 2048));
  KILN_ASSIGN_OR_RETURN(d.experts, config_int(c, "n_routed_experts", 256));
  KILN_ASSIGN_OR_RETURN(int64_t shared, config_int(c, "n_shared_experts", 1));
  d.shared = shared * d.moe_mlp;
  KILN_ASSIGN_OR_RETURN(d.layers, config_int(c, "num_hidden_layers", 61));
  KILN_ASSIGN_OR_RETURN(d.first_dense, config_int(c, "first_k_dense_replace", 3));
  d.first_dense = std::min(d.first_dense, d.layers);
  KILN_ASSIGN_OR_RETURN(int64_t kv_heads, config_int(c, "num_key_value_heads", d.heads));
  if (kv_heads != d.heads) {
    return invalid_argument("config.json: num_key_value_heads {} (Kiln's MLA expands the latent into all {} heads)",
                            kv_heads, d.heads);
  }
  d.mtp = count_layers(hf, "model.layers.", ".eh_proj.weight", d.layers);
  return d;
}

}  // namespace

Result<TensorMap> deepseek_to_hf(const TensorMap& k, const std::string&) {
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : k) shapes.emplace(name, t.shape());
  KILN_ASSIGN_OR_RETURN(Dims d, dims_from_kiln(shapes));
  TensorMap hf;
  for (const Link& link : links(d)) {
    auto it = k.find(link.kiln);
    if (it == k.end()) {
      if (link.kiln.ends_with(".mlp.gate.bias")) {  // routed_bias=false: a zero correction bias
        hf.emplace(link.hf, ir::Literal(ir::Shape(ir::DType::kF32, link.hf_dims)));
        continue;
      }
      return not_found("Kiln tensor {} is missing", link.kiln);
    }
    const ir::Literal& t = it->second;
    if (t.shape().dims() != link.kiln_dims) {
      return invalid_argument("Kiln tensor {} is {}, expected dims {}", link.kiln, t.shape().to_string(),
                              ir::dims_to_string(link.kiln_dims));
    }
    const int64_t parts = link.experts > 0 ? link.experts : 1, part = num_elements(link.hf_dims);
    for (int64_t e = 0; e < parts; ++e) {
      std::vector<double> x(t.values().begin() + e * part, t.values().begin() + (e + 1) * part);
      ir::Literal out(ir::Shape(t.shape().dtype(), link.hf_dims));
      // Moved, never rounded: exact in the dtype.
      out.mutable_values() = link.transpose ? transpose2d(x, link.hf_dims[1], link.hf_dims[0]) : std::move(x);
      hf.emplace(link.hf_name(e), std::move(out));
    }
  }
  return hf;
}

Result<std::vector<KilnFromHf>> plan_deepseek_from_hf(const HfShapes& hf, const nlohmann::json& config) {
  for (const auto& [name, info] : hf) {
    if (name.ends_with("_scale_inv") || info.dtype.starts_with("F8")) {
      return invalid_argument("Hugging Face tensor {} is FP8-quantized (Kiln reads float32 or bfloat16 DeepSeek-V3 "
                              "weights: dequantize the checkpoint to bf16 first)",
                              name);
    }
  }
  KILN_ASSIGN_OR_RETURN(Dims d, dims_from_hf(hf, config));
  std::set<std::string> used;
  std::map<std::string, KilnFromHf> k;  // by Kiln name
  for (const Link& link : links(d)) {
    const int64_t parts = link.experts > 0 ? link.experts : 1;
    std::vector<std::string> sources;
    ir::DType dtype = ir::DType::kF32;
    for (int64_t e = 0; e < parts; ++e) {
      const std::string name = link.hf_name(e);
      auto it = hf.find(name);
      if (it == hf.end()) return not_found("Hugging Face tensor {} is missing", name);
      if (it->second.dims != link.hf_dims) {
        return invalid_argument("Hugging Face tensor {} is {}, expected dims {}", name, ir::dims_to_string(it->second.dims),
                                ir::dims_to_string(link.hf_dims));
      }
      if (it->second.mxfp4) return invalid_argument("Hugging Face tensor {} is MXFP4-quantized", name);
      Result<ir::DType> t = parse_safetensors_dtype(it->second.dtype);
      if (!t.ok()) return invalid_argument("Hugging Face tensor {}: {}", name, t.status().message());
      if (e > 0 && *t != dtype) return invalid_argument("Hugging Face tensor {} is {}, unlike expert 0", name, it->second.dtype);
      dtype = *t;
      sources.push_back(name);
      used.insert(name);
    }
    KilnFromHf t{link.kiln, ir::Shape(dtype, link.kiln_dims), sources[0],
                 link.transpose ? HfTransform::kTranspose : HfTransform::kCopy};
    if (link.transpose) t.rows = link.hf_dims[0], t.cols = link.hf_dims[1];
    if (link.experts > 0) t.stack = std::move(sources);
    k.emplace(link.kiln, std::move(t));
  }
  // Anything else would be dropped. The release's MTP layers also carry their own copies of
  // the embedding, head and final norm, which Kiln shares with the main model.
  for (const auto& [name, info] : hf) {
    if (used.count(name)) continue;
    bool mtp_copy = false;
    for (int64_t j = 0; j < d.mtp; ++j) {
      const std::string m = fmt::format("model.layers.{}.", d.layers + j);
      mtp_copy = mtp_copy || name == m + "embed_tokens.weight" || name.starts_with(m + "shared_head.");
    }
    if (mtp_copy) continue;
    return invalid_argument("Hugging Face tensor {} is not part of a DeepSeek-V3 that Kiln implements", name);
  }
  std::vector<KilnFromHf> out;
  out.reserve(k.size());
  for (auto& [name, t] : k) out.push_back(std::move(t));
  return out;
}

Result<TensorMap> deepseek_from_hf(const TensorMap& hf, const nlohmann::json& config) {
  HfShapes shapes;
  for (const auto& [name, t] : hf) shapes[name] = HfTensorInfo{safetensors_dtype(t.shape().dtype()), t.shape().dims()};
  KILN_ASSIGN_OR_RETURN(std::vector<KilnFromHf> plan, plan_deepseek_from_hf(shapes, config));
  TensorMap k;
  for (const KilnFromHf& t : plan) {
    const std::vector<std::string> sources = t.stack.empty() ? std::vector<std::string>{t.source} : t.stack;
    std::vector<double> values;
    values.reserve(static_cast<size_t>(t.shape.num_elements()));
    for (const std::string& s : sources) {
      const std::vector<double>& x = hf.at(s).values();
      std::vector<double> part = t.transform == HfTransform::kTranspose ? transpose2d(x, t.rows, t.cols) : x;
      values.insert(values.end(), part.begin(), part.end());
    }
    ir::Literal out(t.shape);
    out.mutable_values() = std::move(values);
    k.emplace(t.name, std::move(out));
  }
  return k;
}

Result<nlohmann::json> deepseek_hf_config(const TensorMap& k, const std::string& config_yaml) {
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : k) shapes.emplace(name, t.shape());
  KILN_ASSIGN_OR_RETURN(Dims d, dims_from_kiln(shapes));
  KILN_ASSIGN_OR_RETURN(const ConfigYaml yaml, ConfigYaml::parse(config_yaml));
  // A key of the resolved config, or (absent) DeepSeek-V3's value.
  auto get = [&]<typename T>(const char* key, T fallback) { return yaml.get(key, fallback); };
  auto refuse = [](const char* key, const std::string& why) {
    return invalid_argument("{}: {} (transformers' DeepseekV3ForCausalLM cannot express it)", key, why);
  };
  if (d.experts > 1 && get("routed_score_func", std::string("sigmoid")) != "sigmoid") {
    return refuse("routed_score_func", "not sigmoid");
  }
  if (get("mlp_activations", std::vector<std::string>{"silu", "linear"}) != std::vector<std::string>{"silu", "linear"}) {
    return refuse("mlp_activations", "not [silu, linear]");
  }
  const double eps = get("normalization_layer_epsilon", 1e-6);
  if (eps != 1e-6) return refuse("normalization_layer_epsilon", fmt::format("{}: its MLA latent norms use 1e-6", eps));
  if (d.experts <= 1 && d.first_dense < d.layers) return refuse("num_experts", "1 with MoE layers");
  const double mscale = get("mscale", 1.0);
  nlohmann::json rope;
  const std::string rope_type = get("rope_type", std::string("yarn"));
  if (rope_type == "yarn") {
    if (get("rope_attention_scaling", false)) return refuse("rope_attention_scaling", "true");
    // mscale == mscale_all_dim: cos and sin unscaled, the softmax by mscale_all_dim's m^2.
    rope = {{"rope_type", "yarn"},
            {"factor", get("rope_factor", 40.0)},
            {"beta_fast", get("beta_fast", 32.0)},
            {"beta_slow", get("beta_slow", 1.0)},
            {"mscale", mscale},
            {"mscale_all_dim", mscale},
            {"original_max_position_embeddings", get("original_max_position_embeddings", int64_t{4096})},
            {"truncate", get("rope_truncate", true)},
            {"rope_theta", get("rope_max_timescale", 10000.0)}};
  } else if (rope_type == "default") {
    rope = {{"rope_type", "default"}, {"rope_theta", get("rope_max_timescale", 10000.0)}};
  } else {
    return refuse("rope_type", "'" + rope_type + "'");
  }
  const int64_t groups = get("n_routing_groups", int64_t{-1});
  const int64_t top_groups = get("topk_routing_group", int64_t{-1});
  const ir::DType dtype = k.at("token_embedder.embedding").shape().dtype();
  return nlohmann::json{
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", "deepseek_v3"},
      {"vocab_size", d.vocab},
      {"hidden_size", d.emb},
      {"intermediate_size", d.mlp > 0 ? d.mlp : d.moe_mlp},
      {"moe_intermediate_size", d.moe_mlp},
      {"num_hidden_layers", d.layers},
      {"first_k_dense_replace", d.first_dense},
      {"num_attention_heads", d.heads},
      {"num_key_value_heads", d.heads},
      {"q_lora_rank", d.q_lora > 0 ? nlohmann::json(d.q_lora) : nlohmann::json(nullptr)},
      {"kv_lora_rank", d.kv_lora},
      {"qk_nope_head_dim", d.nope},
      {"qk_rope_head_dim", d.rope},
      {"v_head_dim", d.v},
      {"n_routed_experts", d.experts},
      {"n_shared_experts", d.moe_mlp > 0 ? d.shared / d.moe_mlp : 0},
      {"num_experts_per_tok", get("num_experts_per_tok", int64_t{8})},
      {"n_group", groups > 0 ? groups : 1},
      {"topk_group", groups > 0 ? (top_groups > 0 ? top_groups : groups) : 1},
      {"norm_topk_prob", get("norm_topk_prob", true)},
      {"routed_scaling_factor", get("routed_scaling_factor", 2.5)},
      {"hidden_act", "silu"},
      {"rms_norm_eps", eps},
      {"rope_interleave", get("rope_interleave", true)},
      {"rope_parameters", rope},
      {"max_position_embeddings", get("max_position_embeddings", int64_t{163840})},
      {"num_nextn_predict_layers", d.mtp},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"torch_dtype", dtype_word(dtype)},
  };
}

Result<std::string> deepseek_kiln_config(const std::map<std::string, ir::Shape>& k, const nlohmann::json& hf) {
  if (!hf.is_object()) return invalid_argument("config.json is not a JSON object");
  KILN_ASSIGN_OR_RETURN(Dims d, dims_from_kiln(k));
  KILN_ASSIGN_OR_RETURN(int64_t top_k, config_int(hf, "num_experts_per_tok", 8));
  KILN_ASSIGN_OR_RETURN(int64_t groups, config_int(hf, "n_group", 8));
  KILN_ASSIGN_OR_RETURN(int64_t top_groups, config_int(hf, "topk_group", 4));
  KILN_ASSIGN_OR_RETURN(bool norm_topk, config_bool(hf, "norm_topk_prob", true));
  KILN_ASSIGN_OR_RETURN(double scaling, config_number(hf, "routed_scaling_factor", 2.5));
  KILN_ASSIGN_OR_RETURN(double eps, config_number(hf, "rms_norm_eps", 1e-6));
  KILN_ASSIGN_OR_RETURN(bool interleave, config_bool(hf, "rope_interleave", true));
  KILN_ASSIGN_OR_RETURN(int64_t max_positions, config_int(hf, "max_position_embeddings", 4096));
  KILN_ASSIGN_OR_RETURN(bool tied, config_bool(hf, "tie_word_embeddings", false));
  KILN_ASSIGN_OR_RETURN(bool attention_bias, config_bool(hf, "attention_bias", false));
  if (tied) return invalid_argument("config.json: tie_word_embeddings true (DeepSeek-V3 has its own lm_head)");
  if (attention_bias) return invalid_argument("config.json: attention_bias true (Kiln's MLA has no biases)");
  if (eps != 1e-6) {
    return invalid_argument("config.json: rms_norm_eps {} (transformers normalises the MLA latents with 1e-6 whatever "
                            "it says; Kiln uses one epsilon for both: accepted 1e-6)",
                            eps);
  }
  if (hf.contains("hidden_act") && hf["hidden_act"] != "silu") {
    return invalid_argument("config.json: hidden_act {} (accepted: silu)", hf["hidden_act"].dump());
  }
  std::string lines;
  auto add = [&](const std::string& key, const std::string& value) { lines += key + ": " + value + "\n"; };
  auto num = [](double v) { return fmt::format("{}", v); };
  // RoPE: v5 rope_parameters (rope_theta inside) or v4 rope_scaling + rope_theta.
  nlohmann::json rope = nlohmann::json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (hf.contains(key) && hf[key].is_object()) {
      rope = hf[key];
      break;
    }
  }
  std::string rope_type = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (rope.contains(key) && rope[key].is_string()) rope_type = rope[key].get<std::string>();
  }
  KILN_ASSIGN_OR_RETURN(double theta_outside, config_number(hf, "rope_theta", 10000.0));
  KILN_ASSIGN_OR_RETURN(double theta, config_number(rope, "rope_theta", theta_outside));
  if (rope_type == "yarn") {
    KILN_ASSIGN_OR_RETURN(double original, config_number(rope, "original_max_position_embeddings", -1));
    if (original <= 0) return invalid_argument("config.json: YaRN needs rope original_max_position_embeddings");
    KILN_ASSIGN_OR_RETURN(double factor, config_number(rope, "factor", static_cast<double>(max_positions) / original));
    KILN_ASSIGN_OR_RETURN(double mscale, config_number(rope, "mscale", 0.0));
    KILN_ASSIGN_OR_RETURN(double mscale_all_dim, config_number(rope, "mscale_all_dim", 0.0));
    // Kiln's DeepSeek leaves cos and sin unscaled and scales the softmax by m^2 from
    // mscale: transformers does exactly that when mscale == mscale_all_dim != 0.
    if (mscale_all_dim == 0.0 || mscale != mscale_all_dim || rope.contains("attention_factor")) {
      return invalid_argument("config.json: rope mscale {} and mscale_all_dim {} (accepted: equal and non-zero, no "
                              "attention_factor: cos and sin unscaled, the softmax scaled by mscale_all_dim)",
                              mscale, mscale_all_dim);
    }
    KILN_ASSIGN_OR_RETURN(double beta_fast, config_number(rope, "beta_fast", 32.0));
    KILN_ASSIGN_OR_RETURN(double beta_slow, config_number(rope, "beta_slow", 1.0));
    KILN_ASSIGN_OR_RETURN(bool truncate, config_bool(rope, "truncate", true));
    add("rope_type", "\"yarn\"");
    add("rope_factor", num(factor));
    add("beta_fast", num(beta_fast));
    add("beta_slow", num(beta_slow));
    add("mscale", num(mscale_all_dim));
    add("original_max_position_embeddings", num(original));
    add("rope_truncate", truncate ? "true" : "false");
  } else if (rope_type == "default") {
    add("rope_type", "\"default\"");
  } else {
    return invalid_argument("config.json: rope_type '{}' is not supported (accepted: default, yarn)", rope_type);
  }
  add("rope_attention_scaling", "false");
  add("rope_max_timescale", num(theta));
  add("rope_interleave", interleave ? "true" : "false");
  add("max_position_embeddings", std::to_string(max_positions));
  const std::string dtype = dtype_word(k.at("token_embedder.embedding").dtype());
  add("decoder_block", "\"deepseek\"");
  add("attention_type", "\"mla\"");
  add("vocab_size", std::to_string(d.vocab));
  add("base_emb_dim", std::to_string(d.emb));
  add("base_num_query_heads", std::to_string(d.heads));
  add("base_num_kv_heads", std::to_string(d.heads));
  add("q_lora_rank", std::to_string(d.q_lora));
  add("kv_lora_rank", std::to_string(d.kv_lora));
  add("qk_nope_head_dim", std::to_string(d.nope));
  add("qk_rope_head_dim", std::to_string(d.rope));
  add("v_head_dim", std::to_string(d.v));
  add("base_num_decoder_layers", std::to_string(d.layers));
  add("first_num_dense_layers", std::to_string(d.first_dense));
  add("base_mlp_dim", std::to_string(d.mlp > 0 ? d.mlp : d.moe_mlp));
  add("base_moe_mlp_dim", std::to_string(d.moe_mlp > 0 ? d.moe_mlp : d.mlp));
  add("num_experts", std::to_string(std::max<int64_t>(d.experts, 1)));
  add("num_experts_per_tok", std::to_string(d.experts > 1 ? top_k : 1));
  add("shared_experts", std::to_string(d.moe_mlp > 0 ? d.shared / d.moe_mlp : 0));
  add("routed_score_func", "\"sigmoid\"");
  add("routed_bias", "true");
  add("n_routing_groups", std::to_string(groups > 1 ? groups : -1));
  add("topk_routing_group", std::to_string(groups > 1 ? top_groups : -1));
  add("norm_topk_prob", norm_topk ? "true" : "false");
  add("routed_scaling_factor", num(scaling));
  add("mlp_activations", "[\"silu\", \"linear\"]");
  add("mtp_num_layers", std::to_string(d.mtp));
  add("normalization_layer_epsilon", num(eps));
  add("logits_via_embedding", "false");
  add("enable_dropout", "false");
  add("dtype", "\"" + dtype + "\"");
  add("weight_dtype", "\"" + dtype + "\"");
  return lines;
}

}  // namespace kiln::checkpoint
