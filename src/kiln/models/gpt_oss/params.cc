// The parameter list of GptOss: names, MaxText layouts, logical axes and initialisers
// (MaxText: kernels variance-scaling truncated normal over fan-in, the embedding normal with
// variance 1 / D, biases and sinks zero, norm scales one). The table is in gpt_oss.h.
#include <cmath>

#include "kiln/base/check.h"
#include "kiln/models/gpt_oss/gpt_oss.h"

namespace kiln::models::gpt_oss {

namespace {

Init zeros() { return Init{Init::Kind::kZeros}; }
Init ones() { return Init{Init::Kind::kOnes}; }
Init fan_in(int64_t n) { return Init{Init::Kind::kTruncatedNormalFanIn, 0.0, n}; }

}  // namespace

void GptOss::build_specs() {
  const GptOssConfig& c = config_;
  const int64_t d = c.emb, h = c.heads, k = c.kv_heads, dh = c.head_dim, e = c.num_experts, f = c.mlp_dim;
  auto add = [&](std::string name, std::vector<int64_t> dims, std::vector<std::string> axes, Init init,
                 double active = 1.0) {
    KILN_CHECK_EQ(dims.size(), axes.size()) << name;
    KILN_CHECK(!index_.count(name)) << "duplicate parameter " << name;
    index_[name] = static_cast<int>(specs_.size());
    specs_.push_back(ParamSpec{std::move(name), ir::Shape(c.weight_dtype, std::move(dims)), std::move(axes), init, active});
  };

  // The input embedding is a lookup, not counted as active (the model card's convention),
  // unless it is also the unembedding.
  add("token_embedder.embedding", {c.vocab, d}, {"vocab", "embed_vocab"},
      Init{Init::Kind::kNormal, std::sqrt(1.0 / static_cast<double>(d))}, c.logits_via_embedding ? 1.0 : 0.0);

  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    const std::string attn = layer + "self_attention.";
    add(layer + "pre_self_attention_layer_norm.scale", {d}, {"norm"}, ones());
    add(attn + "query.kernel", {d, h, dh}, {"embed", "q_heads", "kv"}, fan_in(d));
    if (c.attention_bias) add(attn + "query.bias", {h, dh}, {"q_heads", "kv"}, zeros());
    for (const char* kv : {"key", "value"}) {
      add(attn + kv + ".kernel", {d, k, dh}, {"embed", "kv_heads", "kv_head_dim"}, fan_in(d));
      if (c.attention_bias) add(attn + kv + ".bias", {k, dh}, {"kv_heads", "kv_head_dim"}, zeros());
    }
    add(attn + "out.kernel", {h, dh, d}, {"heads", "kv", "embed"}, fan_in(h * dh));
    if (c.attention_bias) add(attn + "out.bias", {d}, {"embed"}, zeros());
    if (c.attention_sink) add(attn + "sinks", {h}, {""}, zeros());
    if (c.use_qk_norm) {
      add(attn + "query_norm.scale", {dh}, {"norm"}, ones());
      add(attn + "key_norm.scale", {dh}, {"norm"}, ones());
    }
    add(layer + "post_self_attention_layer_norm.scale", {d}, {"norm"}, ones());

    const std::string mlp = layer + "mlp.";
    const bool gated = c.mlp_activations.size() == 2;
    if (c.is_moe()) {
      // Each token runs k of the E experts.
      const double active = static_cast<double>(c.top_k) / static_cast<double>(e);
      add(mlp + "gate.kernel", {d, e}, {"embed", ""}, fan_in(d));
      if (c.routed_bias) add(mlp + "gate.bias", {e}, {""}, zeros());
      for (const char* wi : gated ? std::vector<const char*>{"wi_0", "wi_1"} : std::vector<const char*>{"wi_0"}) {
        add(mlp + wi, {e, d, f}, {"exp", "embed_moe", "mlp_moe"}, fan_in(d), active);
        if (c.mlp_bias) add(mlp + wi + "_bias", {e, f}, {"exp", "activation_mlp"}, zeros(), active);
      }
      add(mlp + "wo", {e, f, d}, {"exp", "mlp_moe", "embed_moe"}, fan_in(f), active);
      if (c.mlp_bias) add(mlp + "wo_bias", {e, d}, {"exp", "activation_embed"}, zeros(), active);
      if (c.shared_experts > 0) {  // one dense MLP of width S * I that every token runs (mlp.cc)
        const int64_t s = c.shared_experts * f;
        for (const char* wi : gated ? std::vector<const char*>{"wi_0", "wi_1"} : std::vector<const char*>{"wi_0"}) {
          add(mlp + "shared_experts." + wi + ".kernel", {d, s}, {"embed", "mlp"}, fan_in(d));
          if (c.mlp_bias) add(mlp + "shared_experts." + wi + ".bias", {s}, {"mlp"}, zeros());
        }
        add(mlp + "shared_experts.wo.kernel", {s, d}, {"mlp", "embed"}, fan_in(s));
        if (c.mlp_bias) add(mlp + "shared_experts.wo.bias", {d}, {"embed"}, zeros());
      }
    } else {
      for (const char* wi : gated ? std::vector<const char*>{"wi_0", "wi_1"} : std::vector<const char*>{"wi_0"}) {
        add(mlp + wi + ".kernel", {d, f}, {"embed", "mlp"}, fan_in(d));
        if (c.mlp_bias) add(mlp + wi + ".bias", {f}, {"mlp"}, zeros());
      }
      add(mlp + "wo.kernel", {f, d}, {"mlp", "embed"}, fan_in(f));
      if (c.mlp_bias) add(mlp + "wo.bias", {d}, {"embed"}, zeros());
    }
  }
  add("decoder_norm.scale", {d}, {"norm"}, ones());
  if (!c.logits_via_embedding) add("logits_dense.kernel", {d, c.vocab}, {"embed_vocab", "vocab"}, fan_in(d));
}

}  // namespace kiln::models::gpt_oss
