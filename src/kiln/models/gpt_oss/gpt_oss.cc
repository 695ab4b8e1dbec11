// The GPT-OSS decoder and its loss, composed from the layer pieces (see gpt_oss.h).
#include "kiln/models/gpt_oss/gpt_oss.h"

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

Tensor ParamTable::raw(const std::string& name) const {
  int i = model_.index(name);
  KILN_CHECK(i >= 0) << "the model has no parameter " << name;
  KILN_CHECK_LT(static_cast<size_t>(i), values_.size()) << "fewer traced parameters than params()";
  return values_[i];
}

Tensor ParamTable::operator()(const std::string& name) const { return raw(name).astype(model_.config().dtype); }

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

  x = frontend::nn::rms_norm(x, p.raw("decoder_norm.scale"), c.eps).named("decoder_norm").axes(kActivationAxes);
  Tensor logits = c.logits_via_embedding
                      ? frontend::einsum("btd,vd->btv", x, p("token_embedder.embedding"))
                      : frontend::einsum("btd,dv->btv", x, p("logits_dense.kernel"));  // [B, T, V]
  if (c.cast_logits_to_fp32) logits = logits.astype(ir::DType::kF32);
  f.logits = logits.named("logits").axes({"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});
  return f;
}

Tensor GptOss::logits(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  return forward(g, params, batch).logits;
}

LossOutputs GptOss::loss(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  const GptOssConfig& c = config_;
  Forward f = forward(g, params, batch);
  auto scope = g.scope("loss");
  LossOutputs out;
  // Targets whose segment id is 0 are padding: they count for nothing.
  Tensor counted = frontend::not_equal(batch.segmentation, g.full(batch.segmentation.dims(), 0.0, ir::DType::kS32));
  Tensor weights = frontend::where(counted, g.full(batch.segmentation.dims(), 1.0), 0.0);  // [B, T] f32
  out.total_weights = weights.sum().named("total_weights");
  out.xent_sum = frontend::nn::cross_entropy_sum(f.logits, batch.targets, weights).named("xent_sum");
  // Dividing by at least 1 keeps an all-padding batch finite (its loss is 0).
  Tensor denominator = frontend::maximum(out.total_weights, 1.0);
  Tensor loss = out.xent_sum / denominator;

  if (c.z_loss_multiplier != 0.0) {
    // MaxText's output z-loss: z * logsumexp(logits)^2 per counted token, over total_weights.
    Tensor lse = frontend::nn::logsumexp(f.logits.astype(ir::DType::kF32), -1);  // [B, T]
    out.z_loss = ((frontend::square(lse) * weights).sum() * c.z_loss_multiplier / denominator).named("z_loss");
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
