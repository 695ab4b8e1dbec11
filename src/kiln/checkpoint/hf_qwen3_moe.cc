#include "kiln/checkpoint/hf_qwen3_moe.h"

#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/checkpoint/hf_common.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace {

constexpr const char* kClass = "Qwen3MoeForCausalLM";

// One side's tensors by name, each taken at most once; what is never taken is reported.
template <typename Map>
class Taker {
 public:
  Taker(const Map& m, const char* side) : m_(m), side_(side) {}
  bool has(const std::string& name) const { return m_.count(name) > 0; }
  Result<typename Map::const_iterator> take(const std::string& name, int rank) {
    auto it = m_.find(name);
    if (it == m_.end()) return not_found("{} tensor {} is missing", side_, name);
    taken_.insert(name);
    if (rank >= 0 && static_cast<int>(dims_of(it->second).size()) != rank) {
      return invalid_argument("{} tensor {} is {}, expected rank {}", side_, name,
                              ir::dims_to_string(dims_of(it->second)), rank);
    }
    return it;
  }
  Status expect_dims(const std::string& name, const std::vector<int64_t>& got, const std::vector<int64_t>& dims) const {
    if (got != dims) {
      return invalid_argument("{} tensor {} is {}, expected dims {}", side_, name, ir::dims_to_string(got),
                              ir::dims_to_string(dims));
    }
    return ok_status();
  }
  // The first tensor nobody took, as an error (a bias, a sink, a shared expert: the other
  // side has no place for it, so converting would drop it silently).
  Status all_taken(const char* other) const {
    for (const auto& [name, t] : m_) {
      if (!taken_.count(name)) return invalid_argument("{} tensor {} has no place in {}", side_, name, other);
    }
    return ok_status();
  }

 private:
  static const std::vector<int64_t>& dims_of(const ir::Literal& t) { return t.shape().dims(); }
  static const std::vector<int64_t>& dims_of(const HfTensorInfo& t) { return t.dims; }
  const Map& m_;
  const char* side_;
  std::set<std::string> taken_;
};

std::string hf_expert(const std::string& layer, int64_t e, const char* proj) {
  return fmt::format("{}mlp.experts.{}.{}.weight", layer, e, proj);
}

}  // namespace

Result<TensorMap> qwen3_moe_to_hf(const TensorMap& k, const std::string&) {
  if (k.count("layers.0.mlp.shared_experts.wo.kernel")) {
    return invalid_argument("shared_experts: not 0, but {} has no shared expert", kClass);
  }
  Taker<TensorMap> r(k, "Kiln");
  TensorMap hf;
  KILN_ASSIGN_OR_RETURN(auto emb, r.take("token_embedder.embedding", 2));
  const int64_t V = emb->second.shape().dims()[0], D = emb->second.shape().dims()[1];
  hf["model.embed_tokens.weight"] = emb->second;
  const int64_t layers = count_layers(k, "layers.", ".self_attention.query.kernel");
  if (layers == 0) return not_found("Kiln tensor layers.0.self_attention.query.kernel is missing");
  auto copy = [&](const std::string& from, const std::string& to, int rank) -> Status {
    KILN_ASSIGN_OR_RETURN(auto t, r.take(from, rank));
    hf[to] = t->second;
    return ok_status();
  };
  for (int64_t l = 0; l < layers; ++l) {
    const std::string n = fmt::format("layers.{}.", l), m = fmt::format("model.layers.{}.", l);
    const std::string a = n + "self_attention.";
    KILN_RETURN_IF_ERROR(copy(n + "pre_self_attention_layer_norm.scale", m + "input_layernorm.weight", 1));
    KILN_RETURN_IF_ERROR(copy(n + "post_self_attention_layer_norm.scale", m + "post_attention_layernorm.weight", 1));
    int64_t Dh = 0;
    for (const char* which : {"query", "key", "value"}) {
      KILN_ASSIGN_OR_RETURN(auto w, r.take(a + which + ".kernel", 3));
      const auto& d = w->second.shape().dims();  // [D, heads, Dh]
      KILN_RETURN_IF_ERROR(r.expect_dims(a + which + ".kernel", d, {D, d[1], d[2]}));
      Dh = d[2];
      hf[m + "self_attn." + which[0] + "_proj.weight"] =
          literal_of(w->second.shape().dtype(), {d[1] * d[2], D}, transpose2d(w->second.values(), D, d[1] * d[2]));
    }
    KILN_ASSIGN_OR_RETURN(auto o, r.take(a + "out.kernel", 3));  // [H, Dh, D]
    const int64_t HD = o->second.shape().dims()[0] * o->second.shape().dims()[1];
    KILN_RETURN_IF_ERROR(r.expect_dims(a + "out.kernel", o->second.shape().dims(), {HD / Dh, Dh, D}));
    hf[m + "self_attn.o_proj.weight"] = literal_of(o->second.shape().dtype(), {D, HD}, transpose2d(o->second.values(), HD, D));
    for (const auto& [kiln_name, hf_name] : {std::pair{"query_norm", "q_norm"}, std::pair{"key_norm", "k_norm"}}) {
      KILN_ASSIGN_OR_RETURN(auto s, r.take(a + kiln_name + ".scale", 1));
      KILN_RETURN_IF_ERROR(r.expect_dims(a + kiln_name + ".scale", s->second.shape().dims(), {Dh}));
      hf[m + "self_attn." + hf_name + ".weight"] = s->second;
    }

    KILN_ASSIGN_OR_RETURN(auto gate, r.take(n + "mlp.gate.kernel", 2));  // [D, E]
    const int64_t E = gate->second.shape().dims()[1];
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.gate.kernel", gate->second.shape().dims(), {D, E}));
    hf[m + "mlp.gate.weight"] = literal_of(gate->second.shape().dtype(), {E, D}, transpose2d(gate->second.values(), D, E));
    KILN_ASSIGN_OR_RETURN(auto w0, r.take(n + "mlp.wi_0", 3));
    KILN_ASSIGN_OR_RETURN(auto w1, r.take(n + "mlp.wi_1", 3));
    KILN_ASSIGN_OR_RETURN(auto wo, r.take(n + "mlp.wo", 3));
    const int64_t I = w0->second.shape().dims()[2];
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.wi_0", w0->second.shape().dims(), {E, D, I}));
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.wi_1", w1->second.shape().dims(), {E, D, I}));
    KILN_RETURN_IF_ERROR(r.expect_dims(n + "mlp.wo", wo->second.shape().dims(), {E, I, D}));
    for (int64_t e = 0; e < E; ++e) {  // expert e's [D, I] slices -> [I, D]; [I, D] -> [D, I]
      const ir::DType dt = w0->second.shape().dtype();
      hf[hf_expert(m, e, "gate_proj")] = literal_of(dt, {I, D}, transpose2d(w0->second.values(), D, I, e * D * I));
      hf[hf_expert(m, e, "up_proj")] = literal_of(dt, {I, D}, transpose2d(w1->second.values(), D, I, e * D * I));
      hf[hf_expert(m, e, "down_proj")] = literal_of(dt, {D, I}, transpose2d(wo->second.values(), I, D, e * I * D));
    }
  }
  KILN_RETURN_IF_ERROR(copy("decoder_norm.scale", "model.norm.weight", 1));
  if (r.has("logits_dense.kernel")) {  // absent: tied to the embedding (logits_via_embedding)
    KILN_ASSIGN_OR_RETURN(auto head, r.take("logits_dense.kernel", 2));
    KILN_RETURN_IF_ERROR(r.expect_dims("logits_dense.kernel", head->second.shape().dims(), {D, V}));
    hf["lm_head.weight"] = literal_of(head->second.shape().dtype(), {V, D}, transpose2d(head->second.values(), D, V));
  }
  KILN_RETURN_IF_ERROR(r.all_taken(kClass));
  return hf;
}

Result<std::vector<KilnFromHf>> plan_qwen3_moe_from_hf(const HfShapes& hf, const nlohmann::json& config) {
  const auto heads = config.find("num_attention_heads");
  if (heads == config.end() || !heads->is_number_integer() || heads->get<int64_t>() <= 0) {
    return invalid_argument("num_attention_heads must be a positive integer");
  }
  const int64_t H = heads->get<int64_t>();
  Taker<HfShapes> r(hf, "Hugging Face");
  // The source's shape, with the dtype Kiln holds it in.
  auto get = [&](const std::string& name, int rank) -> Result<ir::Shape> {
    KILN_ASSIGN_OR_RETURN(auto it, r.take(name, rank));
    Result<ir::DType> dtype = parse_safetensors_dtype(it->second.dtype);
    if (!dtype.ok()) return invalid_argument("Hugging Face tensor {}: {}", name, dtype.status().message());
    return ir::Shape(*dtype, it->second.dims);
  };
  std::map<std::string, KilnFromHf> k;  // by Kiln name, as the literal route orders them
  auto copy = [&](const std::string& to, const std::string& from, int rank) -> Result<ir::Shape> {
    KILN_ASSIGN_OR_RETURN(ir::Shape s, get(from, rank));
    k[to] = {to, s, from, HfTransform::kCopy};
    return s;
  };
  // source [rows, cols] -> Kiln `dims` (its [cols, rows], reshaped).
  auto transpose = [&](const std::string& to, const std::string& from, const ir::Shape& src, std::vector<int64_t> dims) {
    k[to] = {to, ir::Shape(src.dtype(), std::move(dims)), from, HfTransform::kTranspose, src.dims()[0], src.dims()[1]};
  };

  KILN_ASSIGN_OR_RETURN(ir::Shape emb, copy("token_embedder.embedding", "model.embed_tokens.weight", 2));
  const int64_t V = emb.dims()[0], D = emb.dims()[1];
  const int64_t layers = count_layers(hf, "model.layers.", ".self_attn.q_proj.weight");
  if (layers == 0) return not_found("Hugging Face tensor model.layers.0.self_attn.q_proj.weight is missing");
  for (int64_t l = 0; l < layers; ++l) {
    const std::string n = fmt::format("layers.{}.", l), m = fmt::format("model.layers.{}.", l);
    const std::string a = n + "self_attention.";
    KILN_RETURN_IF_ERROR(copy(n + "pre_self_attention_layer_norm.scale", m + "input_layernorm.weight", 1).status());
    KILN_RETURN_IF_ERROR(copy(n + "post_self_attention_layer_norm.scale", m + "post_attention_layernorm.weight", 1).status());
    KILN_ASSIGN_OR_RETURN(ir::Shape q_norm, copy(a + "query_norm.scale", m + "self_attn.q_norm.weight", 1));
    const int64_t Dh = q_norm.dims()[0];
    KILN_ASSIGN_OR_RETURN(ir::Shape k_norm, copy(a + "key_norm.scale", m + "self_attn.k_norm.weight", 1));
    KILN_RETURN_IF_ERROR(r.expect_dims(m + "self_attn.k_norm.weight", k_norm.dims(), {Dh}));
    for (const char* which : {"query", "key", "value"}) {
      const std::string proj = m + "self_attn." + std::string(1, which[0]) + "_proj.weight";
      KILN_ASSIGN_OR_RETURN(ir::Shape w, get(proj, 2));  // [heads*Dh, D]
      const int64_t n_heads = w.dims()[0] / Dh;
      KILN_RETURN_IF_ERROR(r.expect_dims(proj, w.dims(), {n_heads * Dh, D}));
      if (which[0] == 'q' && n_heads != H) {
        return invalid_argument("Hugging Face tensor {} has {} heads of q_norm's width {}, config.json "
                                "num_attention_heads {}", proj, n_heads, Dh, H);
      }
      transpose(a + which + ".kernel", proj, w, {D, n_heads, Dh});
    }
    const std::string o_proj = m + "self_attn.o_proj.weight";
    KILN_ASSIGN_OR_RETURN(ir::Shape o, get(o_proj, 2));  // [D, H*Dh]
    KILN_RETURN_IF_ERROR(r.expect_dims(o_proj, o.dims(), {D, H * Dh}));
    transpose(a + "out.kernel", o_proj, o, {H, Dh, D});

    if (hf.count(m + "mlp.experts.gate_up_proj")) {
      return invalid_argument("Hugging Face tensor {}mlp.experts.gate_up_proj: the fused expert layout is not read "
                              "(accepted: per-expert mlp.experts.E.{{gate,up,down}}_proj.weight, as the released "
                              "checkpoints and save_pretrained write them)", m);
    }
    const std::string router = m + "mlp.gate.weight";
    KILN_ASSIGN_OR_RETURN(ir::Shape g, get(router, 2));  // [E, D]
    const int64_t E = g.dims()[0];
    KILN_RETURN_IF_ERROR(r.expect_dims(router, g.dims(), {E, D}));
    transpose(n + "mlp.gate.kernel", router, g, {D, E});
    // Each expert tensor: the stack of its E per-expert matrices, each transposed.
    KILN_ASSIGN_OR_RETURN(ir::Shape first, get(hf_expert(m, 0, "gate_proj"), 2));  // [I, D]
    const int64_t I = first.dims()[0];
    for (const auto& [kiln_name, proj, dims] :
         {std::tuple{"wi_0", "gate_proj", std::vector<int64_t>{I, D}}, std::tuple{"wi_1", "up_proj", std::vector<int64_t>{I, D}},
          std::tuple{"wo", "down_proj", std::vector<int64_t>{D, I}}}) {
      KilnFromHf t{n + "mlp." + kiln_name, ir::Shape(first.dtype(), {E, dims[1], dims[0]}), hf_expert(m, 0, proj),
                   HfTransform::kTranspose, dims[0], dims[1]};
      for (int64_t e = 0; e < E; ++e) {
        const std::string source = hf_expert(m, e, proj);
        KILN_ASSIGN_OR_RETURN(ir::Shape s, get(source, 2));
        KILN_RETURN_IF_ERROR(r.expect_dims(source, s.dims(), dims));
        if (s.dtype() != first.dtype()) {
          return invalid_argument("Hugging Face tensor {} is {}, but {} is {} (one dtype per expert tensor)", source,
                                  s.to_string(), hf_expert(m, 0, "gate_proj"), first.to_string());
        }
        t.stack.push_back(source);
      }
      k[t.name] = std::move(t);
    }
  }
  KILN_RETURN_IF_ERROR(copy("decoder_norm.scale", "model.norm.weight", 1).status());
  const bool tied = config.value("tie_word_embeddings", false) == true;
  if (!tied) {
    KILN_ASSIGN_OR_RETURN(ir::Shape head, get("lm_head.weight", 2));
    KILN_RETURN_IF_ERROR(r.expect_dims("lm_head.weight", head.dims(), {V, D}));
    transpose("logits_dense.kernel", "lm_head.weight", head, {D, V});
  } else if (hf.count("lm_head.weight")) {
    auto copy_of_embedding = r.take("lm_head.weight", -1);  // tied: the embedding's copy, not read
    (void)copy_of_embedding;
  }
  KILN_RETURN_IF_ERROR(r.all_taken("Kiln's qwen3_moe"));
  std::vector<KilnFromHf> out;
  out.reserve(k.size());
  for (auto& [name, t] : k) out.push_back(std::move(t));
  return out;
}

Result<TensorMap> qwen3_moe_from_hf(const TensorMap& hf, const nlohmann::json& config) {
  HfShapes shapes;
  for (const auto& [name, t] : hf) shapes[name] = HfTensorInfo{safetensors_dtype(t.shape().dtype()), t.shape().dims(), false};
  KILN_ASSIGN_OR_RETURN(std::vector<KilnFromHf> plan, plan_qwen3_moe_from_hf(shapes, config));
  TensorMap k;
  for (const KilnFromHf& t : plan) {
    const std::vector<std::string> sources = t.stack.empty() ? std::vector<std::string>{t.source} : t.stack;
    std::vector<double> values;
    values.reserve(static_cast<size_t>(t.shape.num_elements()));
    for (const std::string& s : sources) {
      const std::vector<double>& x = hf.at(s).values();
      if (t.transform == HfTransform::kTranspose) {
        std::vector<double> y = transpose2d(x, t.rows, t.cols);
        values.insert(values.end(), y.begin(), y.end());
      } else {
        values.insert(values.end(), x.begin(), x.end());
      }
    }
    k[t.name] = literal_of(t.shape.dtype(), t.shape.dims(), std::move(values));
  }
  return k;
}

Result<nlohmann::json> qwen3_moe_hf_config(const TensorMap& k, const std::string& config_yaml) {
  KILN_ASSIGN_OR_RETURN(TensorMap hf, qwen3_moe_to_hf(k, config_yaml));
  const ir::Shape& emb = k.at("token_embedder.embedding").shape();
  const auto& q = k.at("layers.0.self_attention.query.kernel").shape().dims();
  const auto& kv = k.at("layers.0.self_attention.key.kernel").shape().dims();
  const auto& wi = k.at("layers.0.mlp.wi_0").shape().dims();
  const int64_t layers = count_layers(k, "layers.", ".self_attention.query.kernel");
  KILN_ASSIGN_OR_RETURN(const ConfigYaml yaml, ConfigYaml::parse(config_yaml));
  // A key of the resolved config, or (absent) base.yml's / Qwen3's value.
  auto get = [&]<typename T>(const char* key, T fallback) { return yaml.get(key, fallback); };
  auto refuse = [](const char* key, const std::string& why) {
    return invalid_argument("{}: {} ({} cannot express it)", key, why, kClass);
  };
  if (const auto f = get("routed_score_func", std::string()); !f.empty() && f != "softmax") {
    return refuse("routed_score_func", "'" + f + "': Qwen3-MoE's router is a softmax");
  }
  if (get("routed_scaling_factor", 1.0) != 1.0) return refuse("routed_scaling_factor", "not 1");
  if (get("capacity_factor", -1.0) > 0) return refuse("capacity_factor", "> 0: dropping tokens (Qwen3-MoE is dropless)");
  if (get("use_random_routing", false)) return refuse("use_random_routing", "true");
  if (get("shared_experts", int64_t{0}) != 0) return refuse("shared_experts", "not 0: Qwen3-MoE has no shared expert");
  if (!get("use_qk_norm", true)) return refuse("use_qk_norm", "false: every Qwen3-MoE layer has QK-norm");
  if (get("mlp_activations", std::vector<std::string>{"silu", "linear"}) != std::vector<std::string>{"silu", "linear"}) {
    return refuse("mlp_activations", "not [silu, linear]");
  }
  if (const auto t = get("rope_type", std::string("default")); t != "default") return refuse("rope_type", "'" + t + "'");
  if (get("sliding_window_size", int64_t{0}) != 0) return refuse("sliding_window_size", "not 0");
  const double theta = get("rope_max_timescale", 1000000.0);
  const bool tied = !k.count("logits_dense.kernel");
  return nlohmann::json{
      {"architectures", {kClass}},
      {"model_type", "qwen3_moe"},
      {"vocab_size", emb.dims()[0]},
      {"hidden_size", emb.dims()[1]},
      {"intermediate_size", get("base_mlp_dim", wi[2])},  // a dense layer's width (none here)
      {"moe_intermediate_size", wi[2]},
      {"num_hidden_layers", layers},
      {"num_attention_heads", q[1]},
      {"num_key_value_heads", kv[1]},
      {"head_dim", q[2]},
      {"num_experts", wi[0]},
      {"num_experts_per_tok", get("num_experts_per_tok", int64_t{8})},
      {"norm_topk_prob", get("norm_topk_prob", true)},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", nlohmann::json::array()},
      {"hidden_act", "silu"},
      {"rms_norm_eps", get("normalization_layer_epsilon", 1e-6)},
      {"rope_theta", theta},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", theta}}},
      {"max_position_embeddings", get("max_position_embeddings", int64_t{40960})},
      {"attention_bias", false},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"router_aux_loss_coef", get("load_balance_loss_weight", 0.001)},
      {"tie_word_embeddings", tied},
      {"torch_dtype", emb.dtype() == ir::DType::kBF16 ? "bfloat16" : "float32"},
  };
}

Result<std::string> qwen3_moe_kiln_config(const std::map<std::string, ir::Shape>& k, const nlohmann::json& hf) {
  if (!hf.is_object()) return invalid_argument("config.json is not a JSON object");
  auto get = [&](const std::string& name, int rank) { return kiln_shape(k, name, rank); };
  KILN_ASSIGN_OR_RETURN(const ir::Shape emb, get("token_embedder.embedding", 2));
  KILN_ASSIGN_OR_RETURN(const ir::Shape q_kernel, get("layers.0.self_attention.query.kernel", 3));
  KILN_ASSIGN_OR_RETURN(const ir::Shape k_kernel, get("layers.0.self_attention.key.kernel", 3));
  KILN_ASSIGN_OR_RETURN(const ir::Shape wi, get("layers.0.mlp.wi_0", 3));
  const int64_t layers = count_layers(k, "layers.", ".self_attention.query.kernel");

  auto number = [](const nlohmann::json& j, const char* key, double fallback) -> Result<double> {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) return invalid_argument("config.json: {} is {}, expected a number", key, j[key].dump());
    return j[key].get<double>();
  };
  auto boolean = [&](const char* key, bool fallback) -> Result<bool> {
    if (!hf.contains(key) || hf[key].is_null()) return fallback;
    if (!hf[key].is_boolean()) return invalid_argument("config.json: {} is {}, expected true or false", key, hf[key].dump());
    return hf[key].get<bool>();
  };
  auto integer = [&](const char* key, double fallback) -> Result<int64_t> {
    KILN_ASSIGN_OR_RETURN(double v, number(hf, key, fallback));
    if (!(v > -9.0e18 && v < 9.0e18) || v != static_cast<double>(static_cast<int64_t>(v))) {
      return invalid_argument("config.json: {} is {}, expected an integer", key, v);
    }
    return static_cast<int64_t>(v);
  };
  // Absent keys: transformers' Qwen3MoeConfig defaults.
  KILN_ASSIGN_OR_RETURN(int64_t top_k, integer("num_experts_per_tok", 8));
  KILN_ASSIGN_OR_RETURN(int64_t max_positions, integer("max_position_embeddings", 32768));
  KILN_ASSIGN_OR_RETURN(int64_t intermediate, integer("intermediate_size", 6144));
  KILN_ASSIGN_OR_RETURN(int64_t sparse_step, integer("decoder_sparse_step", 1));
  KILN_ASSIGN_OR_RETURN(double eps, number(hf, "rms_norm_eps", 1e-6));
  KILN_ASSIGN_OR_RETURN(double aux, number(hf, "router_aux_loss_coef", 0.001));
  KILN_ASSIGN_OR_RETURN(bool norm_topk, boolean("norm_topk_prob", false));
  KILN_ASSIGN_OR_RETURN(bool tied, boolean("tie_word_embeddings", false));
  KILN_ASSIGN_OR_RETURN(bool attention_bias, boolean("attention_bias", false));
  KILN_ASSIGN_OR_RETURN(bool sliding, boolean("use_sliding_window", false));
  if (attention_bias) return invalid_argument("config.json: attention_bias true (Kiln's qwen3_moe has no attention biases)");
  if (sliding) return invalid_argument("config.json: use_sliding_window true (Kiln's qwen3_moe has only full layers)");
  if (sparse_step != 1) {
    return invalid_argument("config.json: decoder_sparse_step {} (Kiln's qwen3_moe has MoE in every layer: 1)", sparse_step);
  }
  if (hf.contains("mlp_only_layers") && hf["mlp_only_layers"].is_array() && !hf["mlp_only_layers"].empty()) {
    return invalid_argument("config.json: mlp_only_layers {} (Kiln's qwen3_moe has MoE in every layer: [])",
                            hf["mlp_only_layers"].dump());
  }
  if (hf.contains("hidden_act") && hf["hidden_act"] != "silu") {
    return invalid_argument("config.json: hidden_act {} (Kiln's qwen3_moe experts are SwiGLU: silu)", hf["hidden_act"].dump());
  }
  for (const char* key : {"num_experts", "num_local_experts"}) {
    if (hf.contains(key) && hf[key].is_number_integer() && hf[key].get<int64_t>() != wi.dims()[0]) {
      return invalid_argument("config.json: {} {} but the expert tensors hold {}", key, hf[key].get<int64_t>(), wi.dims()[0]);
    }
  }
  // RoPE: v5 rope_parameters (rope_theta inside) or v4 rope_theta + rope_scaling (null: default).
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
  if (rope_type != "default") {
    return invalid_argument("config.json: rope_type '{}' is not supported by Kiln's qwen3_moe (accepted: default)", rope_type);
  }
  KILN_ASSIGN_OR_RETURN(double theta_outside, number(hf, "rope_theta", 10000.0));
  KILN_ASSIGN_OR_RETURN(double theta, number(rope, "rope_theta", theta_outside));

  std::string lines;
  auto add = [&](const std::string& key, const std::string& value) { lines += key + ": " + value + "\n"; };
  auto num = [](double v) { return fmt::format("{}", v); };
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  const std::string dtype = emb.dtype() == ir::DType::kBF16 ? "bfloat16" : "float32";
  add("decoder_block", "\"qwen3_moe\"");
  add("vocab_size", std::to_string(emb.dims()[0]));
  add("base_emb_dim", std::to_string(emb.dims()[1]));
  add("base_num_query_heads", std::to_string(q_kernel.dims()[1]));
  add("base_num_kv_heads", std::to_string(k_kernel.dims()[1]));
  add("head_dim", std::to_string(q_kernel.dims()[2]));
  add("base_num_decoder_layers", std::to_string(layers));
  add("use_qk_norm", "true");
  add("attention_bias", "false");
  add("attention_sink", "false");
  add("sliding_window_size", "0");
  add("rope_type", "\"default\"");
  add("rope_max_timescale", num(theta));
  add("rope_interleave", "false");
  add("rope_attention_scaling", "false");
  add("max_position_embeddings", std::to_string(max_positions));
  add("num_experts", std::to_string(wi.dims()[0]));
  add("num_experts_per_tok", std::to_string(top_k));
  add("base_moe_mlp_dim", std::to_string(wi.dims()[2]));
  add("base_mlp_dim", std::to_string(intermediate));
  add("mlp_activations", "[\"silu\", \"linear\"]");
  add("mlp_activations_limit", "-1");
  add("mlp_bias", "false");
  add("routed_bias", "false");
  add("routed_score_func", "\"softmax\"");
  add("norm_topk_prob", flag(norm_topk));
  add("load_balance_loss_weight", num(aux));
  add("normalization_layer_epsilon", num(eps));
  add("logits_via_embedding", flag(tied));
  add("enable_dropout", "false");
  add("dtype", "\"" + dtype + "\"");
  add("weight_dtype", "\"" + dtype + "\"");
  return lines;
}

}  // namespace kiln::checkpoint
