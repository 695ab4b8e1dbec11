// The GPT-OSS decoder and its loss, composed from the layer pieces (see gpt_oss.h).
#include "kiln/models/gpt_oss/gpt_oss.h"

#include <optional>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/gpt_oss/layers.h"
#include "kiln/models/moe_layout.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

Tensor ParamTable::raw(const std::string& name) const {
  int i = index_(name);
  KILN_CHECK(i >= 0) << "the model has no parameter " << name;
  KILN_CHECK_LT(static_cast<size_t>(i), values_.size()) << "fewer traced parameters than params()";
  return values_[i];
}

Tensor ParamTable::operator()(const std::string& name) const { return raw(name).astype(dtype_); }

Result<std::unique_ptr<Model>> make_gpt_oss(const config::Config& config) {
  KILN_ASSIGN_OR_RETURN(GptOssConfig c, GptOssConfig::from(config));
  if (c.rope.type == "llama3.1") {
    return invalid_argument(
        "rope_type: 'llama3.1' is not supported by decoder_block gpt_oss (accepted: default, yarn)");
  }
  if (c.use_qk_norm) return invalid_argument("use_qk_norm: true is not supported by decoder_block gpt_oss (accepted: false)");
  // DeepSeek-V3's switches (models/deepseek) are not GPT-OSS's.
  if (c.routed_score_func == "sigmoid") {
    return invalid_argument("routed_score_func: 'sigmoid' is not supported by decoder_block gpt_oss (accepted: \"\")");
  }
  if (config.get_string("attention_type") == "mla") {
    return invalid_argument("attention_type: 'mla' is not supported by decoder_block gpt_oss (accepted: global)");
  }
  for (const char* key : {"n_routing_groups", "topk_routing_group"}) {
    if (config.get_int(key) != -1) {
      return invalid_argument("{}: {} is not supported by decoder_block gpt_oss (accepted: -1)", key, config.get_int(key));
    }
  }
  for (const char* key : {"shared_experts", "first_num_dense_layers", "mtp_num_layers"}) {
    if (config.get_int(key) != 0) {
      return invalid_argument("{}: {} is not supported by decoder_block gpt_oss (accepted: 0)", key, config.get_int(key));
    }
  }
  KILN_RETURN_IF_ERROR(resolve_moe_layout(config, c));
  return std::unique_ptr<Model>(std::make_unique<GptOss>(std::move(c)));
}

GptOss::GptOss(GptOssConfig config) : config_(std::move(config)), inv_freq_(rope_inv_freq(config_.rope)) {
  build_specs();
}

int GptOss::index(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

GptOss::Forward GptOss::forward(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  const GptOssConfig& c = config_;
  KILN_CHECK_EQ(params.size(), specs_.size()) << "one traced value per params() entry";
  const ParamTable p(*this, params);
  const std::vector<std::string> kActivationAxes = {"activation_batch", "activation_norm_length", "activation_embed"};

  // [B, T, D]; the table is gathered then cast (the same values as casting it first).
  Tensor x = p.raw("token_embedder.embedding").take(batch.inputs, 0).astype(c.dtype).named("embed").axes(kActivationAxes);

  // RoPE tables and masks are the same for every layer (of a kind): build each once.
  const RopeTables rope = rope_tables(c.rope, batch.positions, inv_freq_);
  Tensor full_mask = attention_mask(batch.segmentation, 0).named("attention_mask_full");
  Tensor sliding_mask = c.sliding_window > 0
                            ? attention_mask(batch.segmentation, c.sliding_window).named("attention_mask_sliding")
                            : full_mask;

  Forward f;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string layer = "layers." + std::to_string(l);
    Tensor h;
    {
      auto scope = g.scope(layer);
      h = frontend::nn::rms_norm(x, p.raw(layer + ".pre_self_attention_layer_norm.scale"), c.eps)
              .named("pre_self_attention_layer_norm")
              .axes(kActivationAxes);
    }
    Tensor a = attention(c, p, layer + ".self_attention", h, rope, c.is_sliding(l) ? sliding_mask : full_mask,
                         batch.segmentation, c.is_sliding(l) ? c.sliding_window : 0);
    {
      auto scope = g.scope(layer);
      x = (x + a).named("attention_residual").axes(kActivationAxes);
      h = frontend::nn::rms_norm(x, p.raw(layer + ".post_self_attention_layer_norm.scale"), c.eps)
              .named("post_self_attention_layer_norm")
              .axes(kActivationAxes);
    }
    MlpOutputs m = mlp(c, p, layer + ".mlp", h);
    if (m.lb_loss.valid()) f.moe_lb_losses.push_back(m.lb_loss);
    if (m.expert_load.valid()) f.expert_loads.push_back(m.expert_load.expand_dims(0));
    {
      auto scope = g.scope(layer);
      x = (x + m.out).named("output").axes(kActivationAxes);
    }
  }

  f.hidden = frontend::nn::rms_norm(x, p.raw("decoder_norm.scale"), c.eps).named("decoder_norm").axes(kActivationAxes);
  f.unembedding = c.logits_via_embedding ? p("token_embedder.embedding") : p("logits_dense.kernel");
  return f;
}

Tensor GptOss::unembed(const Forward& f, const Tensor& hidden) const {
  Tensor logits = config_.logits_via_embedding ? frontend::einsum("btd,vd->btv", hidden, f.unembedding)
                                               : frontend::einsum("btd,dv->btv", hidden, f.unembedding);  // [B, t, V]
  if (config_.cast_logits_to_fp32) logits = logits.astype(ir::DType::kF32);
  return logits.named("logits").axes({"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});
}

Tensor GptOss::logits(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  Forward f = forward(g, params, batch);
  return unembed(f, f.hidden);
}

LossOutputs GptOss::loss(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  const GptOssConfig& c = config_;
  Forward f = forward(g, params, batch);
  // Untiled, the logits are the forward's ("logits", outside the loss's scope).
  Tensor whole_logits = c.vocab_tiles == 1 ? unembed(f, f.hidden) : Tensor();
  auto scope = g.scope("loss");
  LossOutputs out;
  // Targets whose segment id is 0 are padding: they count for nothing.
  Tensor counted = frontend::not_equal(batch.segmentation, g.full(batch.segmentation.dims(), 0.0, ir::DType::kS32));
  Tensor weights = frontend::where(counted, g.full(batch.segmentation.dims(), 1.0), 0.0);  // [B, T] f32
  out.total_weights = weights.sum().named("total_weights");
  // The cross-entropy (and the z-loss's sum of squared log-partitions) over the sequence's
  // tiles: each tile's logits live only inside its own scope, which RematPass recomputes
  // for the backward pass.
  const int64_t T = f.hidden.dims()[1], tile = T / c.vocab_tiles;
  Tensor xent_sum, lse_squares;
  for (int64_t k = 0; k < c.vocab_tiles; ++k) {
    std::optional<frontend::Graph::Scope> tile_scope;
    if (c.vocab_tiles > 1) tile_scope.emplace(&g, "vocab_tiles." + std::to_string(k));
    auto part = [&](const Tensor& t) { return c.vocab_tiles > 1 ? t.slice(1, k * tile, (k + 1) * tile) : t; };
    Tensor logits = c.vocab_tiles == 1 ? whole_logits : unembed(f, part(f.hidden));  // [B, T / tiles, V]
    Tensor w = part(weights);
    Tensor xent = frontend::nn::cross_entropy_sum(logits, part(batch.targets), w);
    xent_sum = k == 0 ? xent : xent_sum + xent;
    if (c.z_loss_multiplier != 0.0) {
      // MaxText's output z-loss: z * logsumexp(logits)^2 per counted token, over total_weights.
      Tensor lse = frontend::nn::logsumexp(logits.astype(ir::DType::kF32), -1);  // [B, T / tiles]
      Tensor squares = (frontend::square(lse) * w).sum();
      lse_squares = k == 0 ? squares : lse_squares + squares;
    }
  }
  out.xent_sum = xent_sum.named("xent_sum");
  // Dividing by at least 1 keeps an all-padding batch finite (its loss is 0).
  Tensor denominator = frontend::maximum(out.total_weights, 1.0);
  Tensor loss = out.xent_sum / denominator;

  if (c.z_loss_multiplier != 0.0) {
    out.z_loss = (lse_squares * c.z_loss_multiplier / denominator).named("z_loss");
    loss = loss + out.z_loss;
  } else {
    out.z_loss = g.scalar(0.0).named("z_loss");
  }
  if (!f.moe_lb_losses.empty()) {
    Tensor sum = f.moe_lb_losses[0];
    for (size_t i = 1; i < f.moe_lb_losses.size(); ++i) sum = sum + f.moe_lb_losses[i];
    out.moe_lb_loss = (sum / static_cast<double>(f.moe_lb_losses.size())).named("moe_lb_loss");
    loss = loss + out.moe_lb_loss;
  } else {
    out.moe_lb_loss = g.scalar(0.0).named("moe_lb_loss");
  }
  if (!f.expert_loads.empty()) out.expert_load = frontend::concatenate(f.expert_loads, 0).named("expert_load");
  out.loss = loss.named("loss");
  return out;
}

}  // namespace kiln::models::gpt_oss
