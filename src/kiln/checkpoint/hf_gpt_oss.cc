#include "kiln/checkpoint/hf_gpt_oss.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/checkpoint/hf_common.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace {

class Reader {
 public:
  Reader(const TensorMap& m, const char* side) : m_(m), side_(side) {}
  bool has(const std::string& name) const { return m_.count(name) > 0; }
  // The tensor `name`, of rank `rank` (or any rank when -1).
  Result<const ir::Literal*> get(const std::string& name, int rank = -1) const {
    auto it = m_.find(name);
    if (it == m_.end()) return not_found("{} tensor {} is missing", side_, name);
    if (rank >= 0 && it->second.shape().rank() != rank) {
      return invalid_argument("{} tensor {} is {}, expected rank {}", side_, name, it->second.shape().to_string(), rank);
    }
    return &it->second;
  }
  Status expect_dims(const std::string& name, const ir::Literal& t, const std::vector<int64_t>& dims) const {
    if (t.shape().dims() != dims) {
      return invalid_argument("{} tensor {} is {}, expected dims {}", side_, name, t.shape().to_string(),
                              ir::dims_to_string(dims));
    }
    return ok_status();
  }

 private:
  const TensorMap& m_;
  const char* side_;
};

}  // namespace

Result<TensorMap> gpt_oss_to_hf(const TensorMap& k) {
  Reader r(k, "Kiln");
  TensorMap hf;
  KILN_ASSIGN_OR_RETURN(const ir::Literal* emb, r.get("token_embedder.embedding", 2));
  const int64_t V = emb->shape().dims()[0], D = emb->shape().dims()[1];
  hf["model.embed_tokens.weight"] = *emb;
  const int64_t layers = count_layers(k, "layers.", ".self_attention.query.kernel");
  if (layers == 0) return not_found("Kiln tensor layers.0.self_attention.query.kernel is missing");
  for (int64_t l = 0; l < layers; ++l) {
    const std::string n = fmt::format("layers.{}.", l), m = fmt::format("model.layers.{}.", l);
    const std::string a = n + "self_attention.";
    KILN_ASSIGN_OR_RETURN(const ir::Literal* pre, r.get(n + "pre_self_attention_layer_norm.scale", 1));
    KILN_ASSIGN_OR_RETURN(const ir::Literal* post, r.get(n + "post_self_attention_layer_norm.scale", 1));
    hf[m + "input_layernorm.weight"] = *pre;
    hf[m + "post_attention_layernorm.weight"] = *post;
    for (const char* which : {"query", "key", "value"}) {
      const std::string proj = std::string(1, which[0]) + "_proj";
      KILN_ASSIGN_OR_RETURN(const ir::Literal* w, r.get(a + which + ".kernel", 3));
      const auto& d = w->shape().dims();  // [D, heads, Dh]
      KILN_RETURN_IF_ERROR(r.expect_dims(a + which + ".kernel", *w, {D, d[1], d[2]}));
      hf[m + "self_attn." + proj + ".weight"] =
          literal_of(w->shape().dtype(), {d[1] * d[2], D}, transpose2d(w->values(), D, d[1] * d[2]));
      if (r.has(a + which + ".bias")) {
        KILN_ASSIGN_OR_RETURN(const ir::Literal* b, r.get(a + which + ".bias", 2));
        hf[m + "self_attn." + proj + ".bias"] = literal_of(b->shape().dtype(), {b->shape().num_elements()}, b->values());
      }
    }
    KILN_ASSIGN_OR_RETURN(const ir::Literal* o, r.get(a + "out.kernel", 3));  // [H, Dh, D]
    const int64_t HD = o->shape().dims()[0] * o->shape().dims()[1];
    hf[m + "self_attn.o_proj.weight"] = literal_of(o->shape().dtype(), {D, HD}, transpose2d(o->values(), HD, D));
    if (r.has(a + "out.bias")) hf[m + "self_attn.o_proj.bias"] = k.at(a + "out.bias");
    if (r.has(a + "sinks")) hf[m + "self_attn.sinks"] = k.at(a + "sinks");

    KILN_ASSIGN_OR_RETURN(const ir::Literal* gate, r.get(n + "mlp.gate.kernel", 2));  // [D, E]
    const int64_t E = gate->shape().dims()[1];
    hf[m + "mlp.router.weight"] = literal_of(gate->shape().dtype(), {E, D}, transpose2d(gate->values(), D, E));
    if (r.has(n + "mlp.gate.bias")) hf[m + "mlp.router.bias"] = k.at(n + "mlp.gate.bias");
    KILN_ASSIGN_OR_RETURN(const ir::Literal* w0, r.get(n + "mlp.wi_0", 3));
    KILN_ASSIGN_OR_RETURN(const ir::Literal* w1, r.get(n + "mlp.wi_1", 3));
    const int64_t I = w0->shape().dims()[2];
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.wi_0", *w0, {E, D, I}));
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.wi_1", *w1, {E, D, I}));
    // gate_up_proj [E, D, 2I]: wi_0 in the even columns, wi_1 in the odd ones.
    std::vector<double> gate_up(static_cast<size_t>(E * D * 2 * I));
    for (int64_t row = 0; row < E * D; ++row)
      for (int64_t i = 0; i < I; ++i) {
        gate_up[row * 2 * I + 2 * i] = w0->values()[row * I + i];
        gate_up[row * 2 * I + 2 * i + 1] = w1->values()[row * I + i];
      }
    hf[m + "mlp.experts.gate_up_proj"] = literal_of(w0->shape().dtype(), {E, D, 2 * I}, std::move(gate_up));
    if (r.has(n + "mlp.wi_0_bias")) {
      KILN_ASSIGN_OR_RETURN(const ir::Literal* b0, r.get(n + "mlp.wi_0_bias", 2));
      KILN_ASSIGN_OR_RETURN(const ir::Literal* b1, r.get(n + "mlp.wi_1_bias", 2));
      std::vector<double> gub(static_cast<size_t>(E * 2 * I));
      for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < I; ++i) {
          gub[e * 2 * I + 2 * i] = b0->values()[e * I + i];
          gub[e * 2 * I + 2 * i + 1] = b1->values()[e * I + i];
        }
      hf[m + "mlp.experts.gate_up_proj_bias"] = literal_of(b0->shape().dtype(), {E, 2 * I}, std::move(gub));
    }
    KILN_ASSIGN_OR_RETURN(const ir::Literal* wo, r.get(n + "mlp.wo", 3));
    hf[m + "mlp.experts.down_proj"] = *wo;
    if (r.has(n + "mlp.wo_bias")) hf[m + "mlp.experts.down_proj_bias"] = k.at(n + "mlp.wo_bias");
  }
  KILN_ASSIGN_OR_RETURN(const ir::Literal* norm, r.get("decoder_norm.scale", 1));
  hf["model.norm.weight"] = *norm;
  KILN_ASSIGN_OR_RETURN(const ir::Literal* head, r.get("logits_dense.kernel", 2));
  KILN_RETURN_IF_ERROR(r.expect_dims("logits_dense.kernel", *head, {D, V}));
  hf["lm_head.weight"] = literal_of(head->shape().dtype(), {V, D}, transpose2d(head->values(), D, V));
  return hf;
}

Result<TensorMap> gpt_oss_from_hf(const TensorMap& hf, int64_t H) {
  // The streaming import's plan (below: the one place the mapping is written), carried out
  // on the literals.
  HfShapes shapes;
  for (const auto& [name, t] : hf) {
    if (name.ends_with("_blocks") || name.ends_with("_scales")) {
      return invalid_argument("Hugging Face tensor {} is MXFP4-quantized; dequantize it first (read_hf_tensors)", name);
    }
    shapes[name] = HfTensorInfo{safetensors_dtype(t.shape().dtype()), t.shape().dims(), false};
  }
  KILN_ASSIGN_OR_RETURN(std::vector<KilnFromHf> plan, plan_gpt_oss_from_hf(shapes, H));
  TensorMap k;
  for (const KilnFromHf& t : plan) {
    const std::vector<double>& x = hf.at(t.source).values();
    switch (t.transform) {
      case HfTransform::kCopy:
        k[t.name] = literal_of(t.shape.dtype(), t.shape.dims(), x);
        break;
      case HfTransform::kTranspose:
        k[t.name] = literal_of(t.shape.dtype(), t.shape.dims(), transpose2d(x, t.rows, t.cols));
        break;
      case HfTransform::kColumns: {
        // Columns first, first + step, ... of the source as [rows, cols].
        const int64_t kept = t.cols / t.step;
        std::vector<double> out(static_cast<size_t>(t.rows * kept));
        for (int64_t r = 0; r < t.rows; ++r) {
          for (int64_t c = 0; c < kept; ++c) out[r * kept + c] = x[r * t.cols + t.first + c * t.step];
        }
        k[t.name] = literal_of(t.shape.dtype(), t.shape.dims(), std::move(out));
        break;
      }
    }
  }
  return k;
}

Result<std::vector<KilnFromHf>> plan_gpt_oss_from_hf(const HfShapes& hf, int64_t H) {
  // The mapping's one definition (gpt_oss_from_hf carries it out on literals): every check
  // and message, and what to do with each tensor instead of doing it.
  auto get = [&](const std::string& name, int rank) -> Result<ir::Shape> {
    auto it = hf.find(name);
    if (it == hf.end()) return not_found("Hugging Face tensor {} is missing", name);
    Result<ir::DType> dtype = parse_safetensors_dtype(it->second.dtype);
    if (!dtype.ok()) return invalid_argument("Hugging Face tensor {}: {}", name, dtype.status().message());
    ir::Shape shape(*dtype, it->second.dims);
    if (rank >= 0 && shape.rank() != rank) {
      return invalid_argument("Hugging Face tensor {} is {}, expected rank {}", name, shape.to_string(), rank);
    }
    return shape;
  };
  auto expect_dims = [](const std::string& name, const ir::Shape& t, const std::vector<int64_t>& dims) -> Status {
    if (t.dims() != dims) {
      return invalid_argument("Hugging Face tensor {} is {}, expected dims {}", name, t.to_string(),
                              ir::dims_to_string(dims));
    }
    return ok_status();
  };
  std::map<std::string, KilnFromHf> k;  // by Kiln name: gpt_oss_from_hf's TensorMap order
  auto copy = [&](const std::string& to, const std::string& from, const ir::Shape& src, std::vector<int64_t> dims) {
    k[to] = {to, ir::Shape(src.dtype(), std::move(dims)), from, HfTransform::kCopy};
  };
  auto transpose = [&](const std::string& to, const std::string& from, const ir::Shape& src,
                       std::vector<int64_t> dims) {
    k[to] = {to, ir::Shape(src.dtype(), std::move(dims)), from, HfTransform::kTranspose, src.dims()[0], src.dims()[1]};
  };
  auto columns = [&](const std::string& to, const std::string& from, const ir::Shape& src, std::vector<int64_t> dims,
                     int64_t first) {
    const int64_t cols = src.dims().back();
    k[to] = {to, ir::Shape(src.dtype(), std::move(dims)), from, HfTransform::kColumns, src.num_elements() / cols, cols,
             first, 2};
  };
  auto optional_copy = [&](const std::string& to, const std::string& from) -> Status {
    if (!hf.count(from)) return ok_status();
    KILN_ASSIGN_OR_RETURN(ir::Shape t, get(from, -1));
    copy(to, from, t, t.dims());
    return ok_status();
  };

  KILN_ASSIGN_OR_RETURN(ir::Shape emb, get("model.embed_tokens.weight", 2));
  const int64_t V = emb.dims()[0], D = emb.dims()[1];
  copy("token_embedder.embedding", "model.embed_tokens.weight", emb, emb.dims());
  const int64_t layers = count_layers(hf, "model.layers.", ".self_attn.q_proj.weight");
  if (layers == 0) return not_found("Hugging Face tensor model.layers.0.self_attn.q_proj.weight is missing");
  if (H <= 0) return invalid_argument("num_attention_heads={} must be positive", H);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string n = fmt::format("layers.{}.", l), m = fmt::format("model.layers.{}.", l);
    const std::string a = n + "self_attention.";
    KILN_ASSIGN_OR_RETURN(ir::Shape pre, get(m + "input_layernorm.weight", 1));
    KILN_ASSIGN_OR_RETURN(ir::Shape post, get(m + "post_attention_layernorm.weight", 1));
    copy(n + "pre_self_attention_layer_norm.scale", m + "input_layernorm.weight", pre, pre.dims());
    copy(n + "post_self_attention_layer_norm.scale", m + "post_attention_layernorm.weight", post, post.dims());
    KILN_ASSIGN_OR_RETURN(ir::Shape q, get(m + "self_attn.q_proj.weight", 2));
    if (q.dims()[0] % H != 0) {
      return invalid_argument("Hugging Face tensor {}self_attn.q_proj.weight has {} rows, not a multiple of {} heads", m,
                              q.dims()[0], H);
    }
    const int64_t Dh = q.dims()[0] / H;
    for (const char* which : {"query", "key", "value"}) {
      const std::string proj = m + "self_attn." + std::string(1, which[0]) + "_proj";
      KILN_ASSIGN_OR_RETURN(ir::Shape w, get(proj + ".weight", 2));  // [heads*Dh, D]
      const int64_t rows = w.dims()[0], heads = rows / Dh;
      KILN_RETURN_IF_ERROR(expect_dims(proj + ".weight", w, {heads * Dh, D}));
      transpose(a + which + ".kernel", proj + ".weight", w, {D, heads, Dh});
      if (hf.count(proj + ".bias")) {
        KILN_ASSIGN_OR_RETURN(ir::Shape b, get(proj + ".bias", 1));
        KILN_RETURN_IF_ERROR(expect_dims(proj + ".bias", b, {heads * Dh}));
        copy(a + which + ".bias", proj + ".bias", b, {heads, Dh});
      }
    }
    KILN_ASSIGN_OR_RETURN(ir::Shape o, get(m + "self_attn.o_proj.weight", 2));  // [D, H*Dh]
    KILN_RETURN_IF_ERROR(expect_dims(m + "self_attn.o_proj.weight", o, {D, H * Dh}));
    transpose(a + "out.kernel", m + "self_attn.o_proj.weight", o, {H, Dh, D});
    KILN_RETURN_IF_ERROR(optional_copy(a + "out.bias", m + "self_attn.o_proj.bias"));
    KILN_RETURN_IF_ERROR(optional_copy(a + "sinks", m + "self_attn.sinks"));

    KILN_ASSIGN_OR_RETURN(ir::Shape router, get(m + "mlp.router.weight", 2));  // [E, D]
    const int64_t E = router.dims()[0];
    transpose(n + "mlp.gate.kernel", m + "mlp.router.weight", router, {D, E});
    KILN_RETURN_IF_ERROR(optional_copy(n + "mlp.gate.bias", m + "mlp.router.bias"));
    const std::string gate_up = m + "mlp.experts.gate_up_proj";
    KILN_ASSIGN_OR_RETURN(ir::Shape gu, get(gate_up, 3));
    const int64_t I = gu.dims()[2] / 2;
    KILN_RETURN_IF_ERROR(expect_dims(gate_up, gu, {E, D, 2 * I}));
    columns(n + "mlp.wi_0", gate_up, gu, {E, D, I}, 0);
    columns(n + "mlp.wi_1", gate_up, gu, {E, D, I}, 1);
    if (hf.count(gate_up + "_bias")) {
      KILN_ASSIGN_OR_RETURN(ir::Shape gb, get(gate_up + "_bias", 2));
      KILN_RETURN_IF_ERROR(expect_dims(gate_up + "_bias", gb, {E, 2 * I}));
      columns(n + "mlp.wi_0_bias", gate_up + "_bias", gb, {E, I}, 0);
      columns(n + "mlp.wi_1_bias", gate_up + "_bias", gb, {E, I}, 1);
    }
    KILN_ASSIGN_OR_RETURN(ir::Shape down, get(m + "mlp.experts.down_proj", 3));
    KILN_RETURN_IF_ERROR(expect_dims(m + "mlp.experts.down_proj", down, {E, I, D}));
    copy(n + "mlp.wo", m + "mlp.experts.down_proj", down, down.dims());
    KILN_RETURN_IF_ERROR(optional_copy(n + "mlp.wo_bias", m + "mlp.experts.down_proj_bias"));
  }
  KILN_ASSIGN_OR_RETURN(ir::Shape norm, get("model.norm.weight", 1));
  copy("decoder_norm.scale", "model.norm.weight", norm, norm.dims());
  KILN_ASSIGN_OR_RETURN(ir::Shape head, get("lm_head.weight", 2));
  KILN_RETURN_IF_ERROR(expect_dims("lm_head.weight", head, {V, D}));
  transpose("logits_dense.kernel", "lm_head.weight", head, {D, V});
  std::vector<KilnFromHf> out;
  out.reserve(k.size());
  for (auto& [name, t] : k) out.push_back(std::move(t));
  return out;
}

Result<nlohmann::json> gpt_oss_hf_config(const TensorMap& k, const std::string& config_yaml) {
  KILN_ASSIGN_OR_RETURN(TensorMap hf, gpt_oss_to_hf(k));
  const auto& emb = hf.at("model.embed_tokens.weight").shape().dims();
  const int64_t layers = count_layers(hf, "model.layers.", ".self_attn.q_proj.weight");
  const auto& q = k.at("layers.0.self_attention.query.kernel").shape().dims();
  const auto& kv = k.at("layers.0.self_attention.key.kernel").shape().dims();
  const auto& wi = k.at("layers.0.mlp.wi_0").shape().dims();
  KILN_ASSIGN_OR_RETURN(const ConfigYaml yaml, ConfigYaml::parse(config_yaml));
  // A key of the resolved config, or (absent, as in a checkpoint imported before imports
  // carried a config) GPT-OSS's value.
  auto get = [&]<typename T>(const char* key, T fallback) { return yaml.get(key, fallback); };
  auto num = [&](const char* key, double fallback) { return get(key, fallback); };
  auto flag = [&](const char* key, bool fallback) { return get(key, fallback); };

  // What transformers' GptOssForCausalLM cannot express would load as a different model
  // (or with randomly initialised tensors): refuse it, naming the key.
  auto refuse = [](const char* key, const std::string& why) {
    return invalid_argument("{}: {} (transformers' GptOssForCausalLM cannot express it)", key, why);
  };
  if (!flag("attention_sink", true)) return refuse("attention_sink", "false, but every GPT-OSS layer has sinks");
  if (!flag("mlp_bias", true)) return refuse("mlp_bias", "false, but GPT-OSS experts have biases");
  if (!flag("routed_bias", true)) return refuse("routed_bias", "false, but the GPT-OSS router has a bias");
  if (get("mlp_activations", std::vector<std::string>{"sigmoid", "linear"}) !=
      std::vector<std::string>{"sigmoid", "linear"}) {
    return refuse("mlp_activations", "not [sigmoid, linear], GPT-OSS's clamped SwiGLU");
  }
  const double limit = num("mlp_activations_limit", 7.0);
  if (!(limit > 0)) return refuse("mlp_activations_limit", fmt::format("{} (no clamp)", limit));
  if (flag("norm_topk_prob", false)) return refuse("norm_topk_prob", "true");
  if (num("routed_scaling_factor", 1.0) != 1.0) return refuse("routed_scaling_factor", "not 1");
  if (num("capacity_factor", -1.0) > 0) return refuse("capacity_factor", "> 0: dropping tokens (GPT-OSS is dropless)");
  if (flag("use_random_routing", false)) return refuse("use_random_routing", "true");
  if (get("routed_score_func", std::string()) != "") return refuse("routed_score_func", "not \"\" (GPT-OSS's router)");

  nlohmann::json rope;
  const std::string rope_type = get("rope_type", std::string("yarn"));
  if (rope_type == "yarn") {
    // transformers rotates halves and always scales YaRN's cos and sin by 0.1 ln(factor) + 1
    // (Kiln's default rope rotates halves whatever rope_interleave says).
    if (flag("rope_interleave", false)) return refuse("rope_interleave", "true: GPT-OSS rotates halves");
    if (!flag("rope_attention_scaling", true)) return refuse("rope_attention_scaling", "false with rope_type yarn");
    if (num("mscale", 1.0) != 1.0) return refuse("mscale", "not 1");
    rope = {{"rope_type", "yarn"},
            {"factor", num("rope_factor", 32)},
            {"beta_fast", num("beta_fast", 32)},
            {"beta_slow", num("beta_slow", 1)},
            {"original_max_position_embeddings", static_cast<int64_t>(num("original_max_position_embeddings", 4096))},
            {"truncate", flag("rope_truncate", false)}};
  } else if (rope_type == "default") {
    rope = {{"rope_type", "default"}};
  } else {
    return refuse("rope_type", "'" + rope_type + "'");
  }
  // Even layers slide when sliding_window_size > 0 (GptOssConfig::is_sliding).
  const int64_t window = static_cast<int64_t>(num("sliding_window_size", 128));
  const int64_t max_positions = static_cast<int64_t>(num("max_position_embeddings", 131072));
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t l = 0; l < layers; ++l) {
    layer_types.push_back(window > 0 && l % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  return nlohmann::json{
      {"architectures", {"GptOssForCausalLM"}},
      {"model_type", "gpt_oss"},
      {"vocab_size", emb[0]},
      {"hidden_size", emb[1]},
      {"num_hidden_layers", layers},
      {"num_attention_heads", q[1]},
      {"num_key_value_heads", kv[1]},
      {"head_dim", q[2]},
      {"num_local_experts", wi[0]},
      {"intermediate_size", wi[2]},
      {"num_experts_per_tok", static_cast<int64_t>(num("num_experts_per_tok", 4))},
      {"rms_norm_eps", num("normalization_layer_epsilon", 1e-5)},
      {"rope_theta", num("rope_max_timescale", 150000)},
      {"rope_scaling", rope},
      {"max_position_embeddings", max_positions},
      // No sliding layer: transformers still builds the sliding mask, so it needs a window.
      {"sliding_window", window > 0 ? window : max_positions},
      {"layer_types", layer_types},
      {"swiglu_limit", limit},
      {"attention_bias", k.count("layers.0.self_attention.query.bias") > 0},
      {"tie_word_embeddings", false},
      {"torch_dtype", std::string(ir::dtype_name(emb.empty() ? ir::DType::kF32 : hf.at("model.embed_tokens.weight").shape().dtype())) == "bf16" ? "bfloat16" : "float32"},
  };
}

Result<std::string> gpt_oss_kiln_config(const TensorMap& k, const nlohmann::json& hf) {
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : k) shapes.emplace(name, t.shape());
  return gpt_oss_kiln_config(shapes, hf);
}

Result<std::string> gpt_oss_kiln_config(const std::map<std::string, ir::Shape>& k, const nlohmann::json& hf) {
  if (!hf.is_object()) return invalid_argument("config.json is not a JSON object");
  // Shapes and dtype from the tensors (as gpt_oss_hf_config takes them), so they cannot
  // disagree; the rest from config.json.
  auto get = [&](const std::string& name, int rank) { return kiln_shape(k, name, rank); };
  KILN_ASSIGN_OR_RETURN(const ir::Shape emb, get("token_embedder.embedding", 2));
  KILN_ASSIGN_OR_RETURN(const ir::Shape q_kernel, get("layers.0.self_attention.query.kernel", 3));
  KILN_ASSIGN_OR_RETURN(const ir::Shape k_kernel, get("layers.0.self_attention.key.kernel", 3));
  KILN_ASSIGN_OR_RETURN(const ir::Shape wi, get("layers.0.mlp.wi_0", 3));
  const int64_t vocab = emb.dims()[0], hidden = emb.dims()[1];
  const int64_t heads = q_kernel.dims()[1], head_dim = q_kernel.dims()[2];
  const int64_t kv_heads = k_kernel.dims()[1];
  const int64_t experts = wi.dims()[0], width = wi.dims()[2];
  const int64_t layers = count_layers(k, "layers.", ".self_attention.query.kernel");
  const bool attention_bias = k.count("layers.0.self_attention.query.bias") > 0;
  const ir::DType weight_dtype = emb.dtype();
  // A number (int or float) under `key` of `j`, or `fallback` when absent or null.
  auto number = [](const nlohmann::json& j, const char* key, double fallback) -> Result<double> {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) return invalid_argument("config.json: {} is {}, expected a number", key, j[key].dump());
    return j[key].get<double>();
  };
  auto boolean = [](const nlohmann::json& j, const char* key, bool fallback) -> Result<bool> {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) {
      return invalid_argument("config.json: {} is {}, expected true or false", key, j[key].dump());
    }
    return j[key].get<bool>();
  };
  auto integer = [&](const char* key, double fallback) -> Result<int64_t> {
    KILN_ASSIGN_OR_RETURN(double v, number(hf, key, fallback));
    // Range first: converting a double outside int64's range is undefined.
    if (!(v > -9.0e18 && v < 9.0e18) || v != static_cast<double>(static_cast<int64_t>(v))) {
      return invalid_argument("config.json: {} is {}, expected an integer", key, v);
    }
    return static_cast<int64_t>(v);
  };
  // Absent keys: transformers' GptOssConfig defaults (GPT-OSS's values).
  KILN_ASSIGN_OR_RETURN(int64_t top_k, integer("num_experts_per_tok", 4));
  KILN_ASSIGN_OR_RETURN(int64_t max_positions, integer("max_position_embeddings", 131072));
  KILN_ASSIGN_OR_RETURN(double eps, number(hf, "rms_norm_eps", 1e-5));
  KILN_ASSIGN_OR_RETURN(double limit, number(hf, "swiglu_limit", 7.0));
  KILN_ASSIGN_OR_RETURN(double alpha, number(hf, "swiglu_alpha", 1.702));
  if (alpha != 1.702) return invalid_argument("config.json: swiglu_alpha {} (Kiln's GPT-OSS SwiGLU uses 1.702)", alpha);
  KILN_ASSIGN_OR_RETURN(bool tied, boolean(hf, "tie_word_embeddings", false));
  if (tied) return invalid_argument("config.json: tie_word_embeddings true (GPT-OSS has its own lm_head)");

  // Sliding layers: Kiln alternates sliding (even) and full (odd) layers when
  // sliding_window_size > 0, and has only full layers otherwise.
  KILN_ASSIGN_OR_RETURN(int64_t window, integer("sliding_window", 128));
  std::vector<std::string> types;
  if (hf.contains("layer_types") && !hf["layer_types"].is_null()) {
    for (const auto& t : hf["layer_types"]) types.push_back(t.is_string() ? t.get<std::string>() : t.dump());
  } else {
    for (int64_t l = 0; l < layers; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  bool alternating = static_cast<int64_t>(types.size()) == layers, all_full = alternating;
  for (int64_t l = 0; l < static_cast<int64_t>(types.size()); ++l) {
    alternating = alternating && types[l] == (l % 2 == 0 ? "sliding_attention" : "full_attention");
    all_full = all_full && types[l] == "full_attention";
  }
  if (all_full) {
    window = 0;
  } else if (!alternating || window <= 0) {
    return invalid_argument("config.json: layer_types {} with sliding_window {} (Kiln's GPT-OSS alternates sliding "
                            "and full layers, sliding first, or has only full layers)",
                            nlohmann::json(types).dump(), window);
  }

  // RoPE: v5 rope_parameters (rope_theta inside) or v4 rope_scaling + rope_theta; neither
  // is GptOssConfig's YaRN.
  nlohmann::json rope = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                         {"truncate", false}, {"original_max_position_embeddings", 4096}};
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
  KILN_ASSIGN_OR_RETURN(double theta_outside, number(hf, "rope_theta", 150000.0));
  KILN_ASSIGN_OR_RETURN(double theta, number(rope, "rope_theta", theta_outside));
  std::string lines;
  auto add = [&](const std::string& key, const std::string& value) { lines += key + ": " + value + "\n"; };
  auto num = [](double v) { return fmt::format("{}", v); };
  if (rope_type == "yarn") {
    for (const char* key : {"attention_factor", "mscale", "mscale_all_dim"}) {
      if (rope.contains(key) && !rope[key].is_null()) {
        return invalid_argument("config.json: rope {} is not supported (Kiln's YaRN scales by 0.1 ln(factor) + 1)",
                                key);
      }
    }
    KILN_ASSIGN_OR_RETURN(double original, number(rope, "original_max_position_embeddings", -1));
    if (original <= 0) return invalid_argument("config.json: YaRN needs rope original_max_position_embeddings");
    KILN_ASSIGN_OR_RETURN(double factor, number(rope, "factor", static_cast<double>(max_positions) / original));
    KILN_ASSIGN_OR_RETURN(double beta_fast, number(rope, "beta_fast", 32.0));
    KILN_ASSIGN_OR_RETURN(double beta_slow, number(rope, "beta_slow", 1.0));
    add("rope_type", "\"yarn\"");
    add("rope_factor", num(factor));
    add("beta_fast", num(beta_fast));
    add("beta_slow", num(beta_slow));
    add("original_max_position_embeddings", num(original));
    KILN_ASSIGN_OR_RETURN(bool truncate, boolean(rope, "truncate", true));  // transformers' default: true
    add("rope_truncate", truncate ? "true" : "false");
    add("rope_attention_scaling", "true");
  } else if (rope_type == "default") {
    add("rope_type", "\"default\"");
    add("rope_attention_scaling", "false");
  } else {
    return invalid_argument("config.json: rope_type '{}' is not supported (accepted: default, yarn)", rope_type);
  }
  add("rope_max_timescale", num(theta));
  add("rope_interleave", "false");  // GPT-OSS rotates halves
  add("max_position_embeddings", std::to_string(max_positions));

  const std::string dtype = weight_dtype == ir::DType::kBF16 ? "bfloat16" : "float32";
  add("decoder_block", "\"gpt_oss\"");
  add("vocab_size", std::to_string(vocab));
  add("base_emb_dim", std::to_string(hidden));
  add("base_num_query_heads", std::to_string(heads));
  add("base_num_kv_heads", std::to_string(kv_heads));
  add("head_dim", std::to_string(head_dim));
  add("base_num_decoder_layers", std::to_string(layers));
  add("inhomogeneous_layer_cycle_interval", window > 0 ? "2" : "1");
  add("sliding_window_size", std::to_string(window));
  add("attention_bias", attention_bias ? "true" : "false");
  add("attention_sink", "true");
  add("num_experts", std::to_string(experts));
  add("num_experts_per_tok", std::to_string(top_k));
  add("base_moe_mlp_dim", std::to_string(width));
  add("base_mlp_dim", std::to_string(width));
  add("mlp_activations", "[\"sigmoid\", \"linear\"]");
  add("mlp_activations_limit", num(limit));
  add("mlp_bias", "true");
  add("routed_bias", "true");
  add("normalization_layer_epsilon", num(eps));
  add("logits_via_embedding", "false");
  add("enable_dropout", "false");
  add("dtype", "\"" + dtype + "\"");
  add("weight_dtype", "\"" + dtype + "\"");
  return lines;
}

}  // namespace kiln::checkpoint
