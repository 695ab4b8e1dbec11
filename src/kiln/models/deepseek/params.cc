// The parameter list of Deepseek (the table is in deepseek.h): MaxText's names and layouts,
// its initialisers (kernels variance-scaling over fan-in, the embedding normal with variance
// 1 / D, norm scales one, the correction bias zero).
#include <cmath>

#include "kiln/base/check.h"
#include "kiln/models/deepseek/deepseek.h"

namespace kiln::models::deepseek {

namespace {

Init zeros() { return Init{Init::Kind::kZeros}; }
Init ones() { return Init{Init::Kind::kOnes}; }
Init fan_in(int64_t n) { return Init{Init::Kind::kTruncatedNormalFanIn, 0.0, n}; }

}  // namespace

void Deepseek::add_layer_specs(const std::string& prefix, bool moe_layer) {
  const DeepseekConfig& c = config_;
  const gpt_oss::GptOssConfig& m = c.moe;
  const int64_t d = m.emb, h = m.heads, dqk = c.qk_head_dim();
  auto add = [&](std::string name, std::vector<int64_t> dims, std::vector<std::string> axes, Init init,
                 double active = 1.0) {
    KILN_CHECK_EQ(dims.size(), axes.size()) << name;
    KILN_CHECK(!index_.count(name)) << "duplicate parameter " << name;
    index_[name] = static_cast<int>(specs_.size());
    specs_.push_back(ParamSpec{std::move(name), ir::Shape(m.weight_dtype, std::move(dims)), std::move(axes), init, active});
  };
  const std::string attn = prefix + "self_attention.";
  add(prefix + "pre_self_attention_layer_norm.scale", {d}, {"norm"}, ones());
  if (c.q_lora_rank > 0) {
    add(attn + "wq_a.kernel", {d, c.q_lora_rank}, {"embed", ""}, fan_in(d));
    add(attn + "q_norm.scale", {c.q_lora_rank}, {""}, ones());
    add(attn + "wq_b.kernel", {c.q_lora_rank, h, dqk}, {"", "q_heads", "kv"}, fan_in(c.q_lora_rank));
  } else {
    add(attn + "query.kernel", {d, h, dqk}, {"embed", "q_heads", "kv"}, fan_in(d));
  }
  add(attn + "wkv_a.kernel", {d, c.kv_lora_rank + c.qk_rope}, {"embed", ""}, fan_in(d));
  add(attn + "kv_norm.scale", {c.kv_lora_rank}, {""}, ones());
  add(attn + "wkv_b.kernel", {c.kv_lora_rank, h, c.qk_nope + c.v_head_dim}, {"", "kv_heads", "kv_head_dim"},
      fan_in(c.kv_lora_rank));
  add(attn + "out.kernel", {h, c.v_head_dim, d}, {"heads", "kv", "embed"}, fan_in(h * c.v_head_dim));
  add(prefix + "post_self_attention_layer_norm.scale", {d}, {"norm"}, ones());

  const std::string mlp = prefix + "mlp.";
  if (!moe_layer) {
    const int64_t f = c.dense.mlp_dim;
    for (const char* wi : {"wi_0", "wi_1"}) add(mlp + wi + ".kernel", {d, f}, {"embed", "mlp"}, fan_in(d));
    add(mlp + "wo.kernel", {f, d}, {"mlp", "embed"}, fan_in(f));
    return;
  }
  const int64_t e = m.num_experts, f = m.mlp_dim;
  const double active = static_cast<double>(m.top_k) / static_cast<double>(e);
  add(mlp + "gate.kernel", {d, e}, {"embed", ""}, fan_in(d));
  if (m.routed_bias) add(mlp + "gate.bias", {e}, {""}, zeros());
  for (const char* wi : {"wi_0", "wi_1"}) add(mlp + wi, {e, d, f}, {"exp", "embed_moe", "mlp_moe"}, fan_in(d), active);
  add(mlp + "wo", {e, f, d}, {"exp", "mlp_moe", "embed_moe"}, fan_in(f), active);
  if (m.shared_experts > 0) {
    const int64_t s = m.shared_experts * f;
    for (const char* wi : {"wi_0", "wi_1"}) {
      add(mlp + "shared_experts." + wi + ".kernel", {d, s}, {"embed", "mlp"}, fan_in(d));
    }
    add(mlp + "shared_experts.wo.kernel", {s, d}, {"mlp", "embed"}, fan_in(s));
  }
}

void Deepseek::build_specs() {
  const DeepseekConfig& c = config_;
  const gpt_oss::GptOssConfig& m = c.moe;
  const int64_t d = m.emb;
  auto add = [&](std::string name, std::vector<int64_t> dims, std::vector<std::string> axes, Init init,
                 double active = 1.0) {
    index_[name] = static_cast<int>(specs_.size());
    specs_.push_back(ParamSpec{std::move(name), ir::Shape(m.weight_dtype, std::move(dims)), std::move(axes), init, active});
  };
  // The input embedding is a lookup, not counted as active.
  add("token_embedder.embedding", {m.vocab, d}, {"vocab", "embed_vocab"},
      Init{Init::Kind::kNormal, std::sqrt(1.0 / static_cast<double>(d))}, 0.0);
  for (int64_t l = 0; l < m.layers; ++l) add_layer_specs("layers." + std::to_string(l) + ".", c.is_moe_layer(l));
  // Multi-token prediction modules (not used by logits(), so not counted as active).
  for (int64_t k = 1; k <= c.mtp_layers; ++k) {
    const std::string mtp = "mtp." + std::to_string(k) + ".";
    add(mtp + "embedding_norm.scale", {d}, {"norm"}, ones(), 0.0);
    add(mtp + "hidden_state_norm.scale", {d}, {"norm"}, ones(), 0.0);
    add(mtp + "projection.kernel", {2 * d, d}, {"", "embed"}, fan_in(2 * d), 0.0);
    const size_t first = specs_.size();
    add_layer_specs(mtp + "layer.", m.is_moe());
    for (size_t i = first; i < specs_.size(); ++i) specs_[i].active_fraction = 0.0;
  }
  add("decoder_norm.scale", {d}, {"norm"}, ones());
  add("logits_dense.kernel", {d, m.vocab}, {"embed_vocab", "vocab"}, fan_in(d));
}

}  // namespace kiln::models::deepseek
