// The Llama mapping (hf_llama.h) is written once, as a list of links between a Kiln tensor
// and a Hugging Face tensor with both shapes; every direction walks that list.
#include "kiln/checkpoint/hf_llama.h"

#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/checkpoint/hf_common.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace {

// The model's dimensions, from either side's shapes.
struct Dims {
  int64_t vocab = 0, emb = 0, heads = 0, kv_heads = 0, head_dim = 0, mlp = 0, layers = 0;
  bool tied = false;
};

// One Kiln tensor and the HF tensor it is: the same values, or (transpose) the HF tensor is
// the Kiln tensor, viewed as a matrix [hf[1], hf[0]], transposed.
struct Link {
  std::string kiln, hf;
  std::vector<int64_t> kiln_dims, hf_dims;
  bool transpose = false;
};

std::vector<Link> links(const Dims& d) {
  const int64_t V = d.vocab, D = d.emb, H = d.heads, K = d.kv_heads, Dh = d.head_dim, F = d.mlp;
  std::vector<Link> out = {{"token_embedder.embedding", "model.embed_tokens.weight", {V, D}, {V, D}, false}};
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string n = fmt::format("layers.{}.", l), m = fmt::format("model.layers.{}.", l);
    const std::string a = n + "self_attention.", s = m + "self_attn.";
    out.push_back({n + "pre_self_attention_layer_norm.scale", m + "input_layernorm.weight", {D}, {D}, false});
    out.push_back({a + "query.kernel", s + "q_proj.weight", {D, H, Dh}, {H * Dh, D}, true});
    out.push_back({a + "key.kernel", s + "k_proj.weight", {D, K, Dh}, {K * Dh, D}, true});
    out.push_back({a + "value.kernel", s + "v_proj.weight", {D, K, Dh}, {K * Dh, D}, true});
    out.push_back({a + "out.kernel", s + "o_proj.weight", {H, Dh, D}, {D, H * Dh}, true});
    out.push_back({n + "post_self_attention_layer_norm.scale", m + "post_attention_layernorm.weight", {D}, {D}, false});
    out.push_back({n + "mlp.wi_0.kernel", m + "mlp.gate_proj.weight", {D, F}, {F, D}, true});
    out.push_back({n + "mlp.wi_1.kernel", m + "mlp.up_proj.weight", {D, F}, {F, D}, true});
    out.push_back({n + "mlp.wo.kernel", m + "mlp.down_proj.weight", {F, D}, {D, F}, true});
  }
  out.push_back({"decoder_norm.scale", "model.norm.weight", {D}, {D}, false});
  if (!d.tied) out.push_back({"logits_dense.kernel", "lm_head.weight", {D, V}, {V, D}, true});
  return out;
}

// The shape of `name` in `shapes` (Kiln or HF side, named by `side` in errors), of `rank`.
template <typename Map, typename DimsOf>
Result<std::vector<int64_t>> dims_of(const Map& shapes, const std::string& name, size_t rank, const char* side,
                                     DimsOf dims) {
  auto it = shapes.find(name);
  if (it == shapes.end()) return not_found("{} tensor {} is missing", side, name);
  std::vector<int64_t> d = dims(it->second);
  if (d.size() != rank) {
    return invalid_argument("{} tensor {} is {}, expected rank {}", side, name, ir::dims_to_string(d), rank);
  }
  return d;
}

}  // namespace

Result<TensorMap> llama_to_hf(const TensorMap& k, const std::string&) {
  auto dims = [](const ir::Literal& t) { return t.shape().dims(); };
  Dims d;
  KILN_ASSIGN_OR_RETURN(auto emb, dims_of(k, "token_embedder.embedding", 2, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto q, dims_of(k, "layers.0.self_attention.query.kernel", 3, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto kv, dims_of(k, "layers.0.self_attention.key.kernel", 3, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto wi, dims_of(k, "layers.0.mlp.wi_0.kernel", 2, "Kiln", dims));
  d.vocab = emb[0], d.emb = emb[1], d.heads = q[1], d.head_dim = q[2], d.kv_heads = kv[1], d.mlp = wi[1];
  d.layers = count_layers(k, "layers.", ".self_attention.query.kernel");
  d.tied = !k.count("logits_dense.kernel");
  TensorMap hf;
  for (const Link& link : links(d)) {
    KILN_ASSIGN_OR_RETURN(auto got, dims_of(k, link.kiln, link.kiln_dims.size(), "Kiln", dims));
    if (got != link.kiln_dims) {
      return invalid_argument("Kiln tensor {} is {}, expected dims {}", link.kiln, ir::dims_to_string(got),
                              ir::dims_to_string(link.kiln_dims));
    }
    const ir::Literal& t = k.at(link.kiln);
    ir::Literal out(ir::Shape(t.shape().dtype(), link.hf_dims));
    // Moved, never rounded: exact in the dtype.
    out.mutable_values() = link.transpose ? transpose2d(t.values(), link.hf_dims[1], link.hf_dims[0]) : t.values();
    hf.emplace(link.hf, std::move(out));
  }
  return hf;
}

Result<std::vector<KilnFromHf>> plan_llama_from_hf(const HfShapes& hf, const nlohmann::json& config) {
  auto dims = [](const HfTensorInfo& t) { return t.dims; };
  KILN_ASSIGN_OR_RETURN(int64_t heads, config_int(config, "num_attention_heads", 0));
  if (heads <= 0) return invalid_argument("config.json: num_attention_heads must be a positive integer");
  Dims d;
  KILN_ASSIGN_OR_RETURN(d.tied, config_bool(config, "tie_word_embeddings", false));  // LlamaConfig's default
  KILN_ASSIGN_OR_RETURN(auto emb, dims_of(hf, "model.embed_tokens.weight", 2, "Hugging Face", dims));
  KILN_ASSIGN_OR_RETURN(auto q, dims_of(hf, "model.layers.0.self_attn.q_proj.weight", 2, "Hugging Face", dims));
  KILN_ASSIGN_OR_RETURN(auto kv, dims_of(hf, "model.layers.0.self_attn.k_proj.weight", 2, "Hugging Face", dims));
  KILN_ASSIGN_OR_RETURN(auto gate, dims_of(hf, "model.layers.0.mlp.gate_proj.weight", 2, "Hugging Face", dims));
  if (q[0] % heads != 0) {
    return invalid_argument("Hugging Face tensor model.layers.0.self_attn.q_proj.weight has {} rows, not a multiple of "
                            "{} heads (num_attention_heads)",
                            q[0], heads);
  }
  d.vocab = emb[0], d.emb = emb[1], d.heads = heads, d.head_dim = q[0] / heads, d.mlp = gate[0];
  if (kv[0] % d.head_dim != 0) {
    return invalid_argument("Hugging Face tensor model.layers.0.self_attn.k_proj.weight has {} rows, not a multiple of "
                            "the head width {}",
                            kv[0], d.head_dim);
  }
  d.kv_heads = kv[0] / d.head_dim;
  d.layers = count_layers(hf, "model.layers.", ".self_attn.q_proj.weight");
  std::set<std::string> used;
  std::map<std::string, KilnFromHf> k;  // by Kiln name: llama_from_hf's TensorMap order
  for (const Link& link : links(d)) {
    KILN_ASSIGN_OR_RETURN(auto got, dims_of(hf, link.hf, link.hf_dims.size(), "Hugging Face", dims));
    if (got != link.hf_dims) {
      return invalid_argument("Hugging Face tensor {} is {}, expected dims {}", link.hf, ir::dims_to_string(got),
                              ir::dims_to_string(link.hf_dims));
    }
    if (hf.at(link.hf).mxfp4) return invalid_argument("Hugging Face tensor {} is MXFP4-quantized (Kiln's Llama reads "
                                                      "float32 or bfloat16)", link.hf);
    Result<ir::DType> dtype = parse_safetensors_dtype(hf.at(link.hf).dtype);
    if (!dtype.ok()) return invalid_argument("Hugging Face tensor {}: {}", link.hf, dtype.status().message());
    KilnFromHf t{link.kiln, ir::Shape(*dtype, link.kiln_dims), link.hf,
                 link.transpose ? HfTransform::kTranspose : HfTransform::kCopy};
    if (link.transpose) t.rows = link.hf_dims[0], t.cols = link.hf_dims[1];
    k.emplace(link.kiln, std::move(t));
    used.insert(link.hf);
  }
  // Anything else would be dropped: biases (attention_bias, mlp_bias) change the model. A
  // tied checkpoint's lm_head.weight, where one is saved, is the embedding again.
  for (const auto& [name, info] : hf) {
    if (used.count(name) || (d.tied && name == "lm_head.weight")) continue;
    return invalid_argument("Hugging Face tensor {} is not part of a Llama that Kiln implements (no biases)", name);
  }
  std::vector<KilnFromHf> out;
  out.reserve(k.size());
  for (auto& [name, t] : k) out.push_back(std::move(t));
  return out;
}

Result<TensorMap> llama_from_hf(const TensorMap& hf, const nlohmann::json& config) {
  HfShapes shapes;
  for (const auto& [name, t] : hf) shapes[name] = HfTensorInfo{safetensors_dtype(t.shape().dtype()), t.shape().dims()};
  KILN_ASSIGN_OR_RETURN(std::vector<KilnFromHf> plan, plan_llama_from_hf(shapes, config));
  TensorMap k;
  for (const KilnFromHf& t : plan) {
    const std::vector<double>& x = hf.at(t.source).values();
    ir::Literal out(t.shape);
    out.mutable_values() = t.transform == HfTransform::kTranspose ? transpose2d(x, t.rows, t.cols) : x;
    k.emplace(t.name, std::move(out));
  }
  return k;
}

Result<nlohmann::json> llama_hf_config(const TensorMap& k, const std::string& config_yaml) {
  KILN_ASSIGN_OR_RETURN(TensorMap hf, llama_to_hf(k, config_yaml));
  const auto& emb = k.at("token_embedder.embedding").shape();
  const auto& q = k.at("layers.0.self_attention.query.kernel").shape().dims();
  const auto& kv = k.at("layers.0.self_attention.key.kernel").shape().dims();
  const auto& wi = k.at("layers.0.mlp.wi_0.kernel").shape().dims();
  KILN_ASSIGN_OR_RETURN(const ConfigYaml yaml, ConfigYaml::parse(config_yaml));
  // A key of the resolved config, or (absent) base.yml's value.
  auto get = [&]<typename T>(const char* key, T fallback) { return yaml.get(key, fallback); };
  auto refuse = [](const char* key, const std::string& why) {
    return invalid_argument("{}: {} (transformers' LlamaForCausalLM cannot express it)", key, why);
  };
  // The model refuses these already (models/llama); a checkpoint's config is checked again
  // because an exported file that loads as another model is worse than no file.
  if (get("rope_interleave", false)) return refuse("rope_interleave", "true: transformers' Llama rotates halves");
  if (get("rope_min_timescale", 1.0) != 1.0) return refuse("rope_min_timescale", "not 1");
  const std::vector<std::string> swiglu = {"silu", "linear"};
  if (get("mlp_activations", swiglu) != swiglu) {
    return refuse("mlp_activations", "not [silu, linear] (hidden_act silu)");
  }
  nlohmann::json rope_scaling = nullptr;
  const std::string rope_type = get("rope_type", std::string("default"));
  if (rope_type == "llama3.1") {
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", get("rope_factor", 8.0)},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", get("original_max_position_embeddings", int64_t{8192})}};
  } else if (rope_type != "default") {
    return refuse("rope_type", "'" + rope_type + "'");
  }
  return nlohmann::json{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", emb.dims()[0]},
      {"hidden_size", emb.dims()[1]},
      {"intermediate_size", wi[1]},
      {"num_hidden_layers", count_layers(k, "layers.", ".self_attention.query.kernel")},
      {"num_attention_heads", q[1]},
      {"num_key_value_heads", kv[1]},
      {"head_dim", q[2]},
      {"hidden_act", "silu"},
      {"rms_norm_eps", get("normalization_layer_epsilon", 1e-5)},
      {"rope_theta", get("rope_max_timescale", 10000.0)},
      {"rope_scaling", rope_scaling},
      {"max_position_embeddings", get("max_position_embeddings", int64_t{8192})},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", !k.count("logits_dense.kernel")},
      {"torch_dtype", dtype_word(emb.dtype())},
  };
}

Result<std::string> llama_kiln_config(const std::map<std::string, ir::Shape>& k, const nlohmann::json& hf) {
  if (!hf.is_object()) return invalid_argument("config.json is not a JSON object");
  // Shapes and dtype from the tensors (as llama_hf_config takes them); the rest from config.json.
  auto dims = [](const ir::Shape& s) { return s.dims(); };
  KILN_ASSIGN_OR_RETURN(auto emb, dims_of(k, "token_embedder.embedding", 2, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto q, dims_of(k, "layers.0.self_attention.query.kernel", 3, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto kv, dims_of(k, "layers.0.self_attention.key.kernel", 3, "Kiln", dims));
  KILN_ASSIGN_OR_RETURN(auto wi, dims_of(k, "layers.0.mlp.wi_0.kernel", 2, "Kiln", dims));
  const bool tied = !k.count("logits_dense.kernel");
  const ir::DType weight_dtype = k.at("token_embedder.embedding").dtype();

  // What Kiln's Llama does not have. Absent keys: transformers' LlamaConfig defaults.
  KILN_ASSIGN_OR_RETURN(bool attention_bias, config_bool(hf, "attention_bias", false));
  if (attention_bias) return invalid_argument("config.json: attention_bias true (Kiln's Llama has no biases)");
  KILN_ASSIGN_OR_RETURN(bool mlp_bias, config_bool(hf, "mlp_bias", false));
  if (mlp_bias) return invalid_argument("config.json: mlp_bias true (Kiln's Llama has no biases)");
  if (hf.contains("hidden_act") && hf["hidden_act"] != "silu") {
    return invalid_argument("config.json: hidden_act {} (Kiln's Llama is SwiGLU: accepted: \"silu\")",
                            hf["hidden_act"].dump());
  }
  KILN_ASSIGN_OR_RETURN(double eps, config_number(hf, "rms_norm_eps", 1e-6));
  KILN_ASSIGN_OR_RETURN(int64_t max_positions, config_int(hf, "max_position_embeddings", 2048));

  // RoPE: v5 rope_parameters (rope_theta inside) or v4 rope_scaling (null for plain RoPE)
  // beside rope_theta.
  nlohmann::json rope = nlohmann::json::object();
  const char* rope_key = "rope_scaling";
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (hf.contains(key) && hf[key].is_object()) {
      rope = hf[key];
      rope_key = key;
      break;
    }
  }
  std::string rope_type = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (rope.contains(key) && rope[key].is_string()) rope_type = rope[key].get<std::string>();
  }
  KILN_ASSIGN_OR_RETURN(double theta_outside, config_number(hf, "rope_theta", 10000.0));
  KILN_ASSIGN_OR_RETURN(double theta, config_number(rope, "rope_theta", theta_outside));
  std::string lines;
  auto add = [&](const std::string& key, const std::string& value) { lines += key + ": " + value + "\n"; };
  auto num = [](double v) { return fmt::format("{}", v); };
  if (rope_type == "llama3") {
    // MaxText's llama3.1 fixes the low and high frequency factors at Meta's 1 and 4.
    for (auto [key, fixed] : {std::pair<const char*, double>{"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}}) {
      KILN_ASSIGN_OR_RETURN(double v, config_number(rope, key, -1));
      if (v != fixed) {
        return invalid_argument("config.json: {}.{} is {} (Kiln's llama3.1 RoPE fixes it at {}, as MaxText does)",
                                rope_key, key, rope.contains(key) ? rope[key].dump() : "absent", fixed);
      }
    }
    KILN_ASSIGN_OR_RETURN(double factor, config_number(rope, "factor", -1));
    KILN_ASSIGN_OR_RETURN(int64_t original, config_int(rope, "original_max_position_embeddings", -1));
    if (factor <= 0) return invalid_argument("config.json: {}.factor must be a positive number for llama3", rope_key);
    if (original <= 0) {
      return invalid_argument("config.json: {}.original_max_position_embeddings must be a positive integer for llama3",
                              rope_key);
    }
    add("rope_type", "\"llama3.1\"");
    add("rope_factor", num(factor));
    add("original_max_position_embeddings", std::to_string(original));
  } else if (rope_type == "default") {
    add("rope_type", "\"default\"");
  } else {
    return invalid_argument(
        "config.json: {} rope_type '{}' is not supported by Kiln's Llama (accepted: default, llama3)", rope_key,
        rope_type);
  }
  add("rope_max_timescale", num(theta));
  add("rope_min_timescale", "1");
  add("rope_interleave", "false");  // transformers' Llama rotates halves
  add("max_position_embeddings", std::to_string(max_positions));

  const std::string dtype = dtype_word(weight_dtype);
  add("decoder_block", "\"llama2\"");
  add("vocab_size", std::to_string(emb[0]));
  add("base_emb_dim", std::to_string(emb[1]));
  add("base_num_query_heads", std::to_string(q[1]));
  add("base_num_kv_heads", std::to_string(kv[1]));
  add("head_dim", std::to_string(q[2]));
  add("base_num_decoder_layers", std::to_string(count_layers(k, "layers.", ".self_attention.query.kernel")));
  add("base_mlp_dim", std::to_string(wi[1]));
  add("mlp_activations", "[\"silu\", \"linear\"]");
  add("num_experts", "1");
  add("attention_bias", "false");
  add("attention_sink", "false");
  add("mlp_bias", "false");
  add("sliding_window_size", "0");
  add("normalization_layer_epsilon", num(eps));
  add("logits_via_embedding", tied ? "true" : "false");
  add("enable_dropout", "false");
  add("dtype", "\"" + dtype + "\"");
  add("weight_dtype", "\"" + dtype + "\"");
  return lines;
}

}  // namespace kiln::checkpoint
