// The DeepSeek-V3 decoder, its multi-token prediction modules and its loss (see deepseek.h),
// composed from MLA (mla.cc) and the shared decoder's pieces (gpt_oss/layers.h: RoPE, masks,
// the dense MLP and the MoE dispatch with expert parallelism).
#include "kiln/models/deepseek/deepseek.h"

#include <optional>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/deepseek/mla.h"
#include "kiln/models/gpt_oss/layers.h"
#include "kiln/models/moe_layout.h"

namespace kiln::models::deepseek {

using frontend::Tensor;

namespace {

const std::vector<std::string> kActivationAxes = {"activation_batch", "activation_norm_length", "activation_embed"};

// [B, T] -> [B, T]: x[:, i + 1], 0 past the end.
Tensor shift_left(const Tensor& x) {
  const int64_t b = x.dim(0), t = x.dim(1);
  return frontend::concatenate({x.slice(1, 1, t), x.graph()->zeros({b, 1}, x.dtype())}, 1);
}

}  // namespace

Result<std::unique_ptr<Model>> make_deepseek(const config::Config& config) {
  KILN_ASSIGN_OR_RETURN(DeepseekConfig c, DeepseekConfig::from(config));
  // The step folds micro-batches from xent, z-loss and load-balance terms alone
  // (train/step/step_program.cc), and one step's bias update needs the whole batch's loads.
  if (const int64_t k = config.get_int("gradient_accumulation_steps"); k > 1) {
    if (c.mtp_layers > 0) {
      return invalid_argument("mtp_num_layers: {} with gradient_accumulation_steps={} is not supported by "
                              "decoder_block deepseek (accepted: gradient_accumulation_steps=1)",
                              c.mtp_layers, k);
    }
    if (c.bias_update_rate > 0) {  // the update needs the whole batch's loads
      return invalid_argument("routed_bias_update_rate: {} with gradient_accumulation_steps={} is not supported by "
                              "decoder_block deepseek (accepted: gradient_accumulation_steps=1)",
                              c.bias_update_rate, k);
    }
  }
  KILN_RETURN_IF_ERROR(resolve_moe_layout(config, c.moe));
  c.dense.expert_shards = c.moe.expert_shards;
  c.dense.token_shards = c.moe.token_shards;
  c.dense.moe_chunks = c.moe.moe_chunks;
  return std::unique_ptr<Model>(std::make_unique<Deepseek>(std::move(c)));
}

Deepseek::Deepseek(DeepseekConfig config) : config_(std::move(config)), inv_freq_(gpt_oss::rope_inv_freq(config_.moe.rope)) {
  build_specs();
}

int Deepseek::index(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

struct Deepseek::Forward {
  Tensor hidden;                     // [B, T, D]: the decoder's output, normalised
  std::vector<Tensor> expert_loads;  // per MoE layer, f32 [1, 3]
  struct Counts {
    std::string bias;  // the layer's "....mlp.gate.bias"
    Tensor counts;     // f32 [E]
  };
  std::vector<Counts> expert_counts;
  // Multi-token prediction, per depth k: the module's output after the shared final norm
  // [B, T, D], its targets s32 [B, T] and their weights f32 [B, T] (0 where not counted).
  std::vector<Tensor> mtp_hidden, mtp_targets, mtp_weights;
};

Deepseek::Forward Deepseek::forward(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch,
                                    bool with_mtp) const {
  const DeepseekConfig& c = config_;
  const gpt_oss::GptOssConfig& m = c.moe;
  KILN_CHECK_EQ(params.size(), specs_.size()) << "one traced value per params() entry";
  const gpt_oss::ParamTable p([this](const std::string& name) { return index(name); }, m.dtype, params);
  const Tensor embedding = p.raw("token_embedder.embedding");
  auto embed = [&](const Tensor& tokens) { return embedding.take(tokens, 0).astype(m.dtype); };

  gpt_oss::RopeTables rope = gpt_oss::rope_tables(m.rope, batch.positions, inv_freq_);
  rope.interleave = m.rope.interleave;  // DeepSeek interleaves whatever the rope type
  const Tensor mask = gpt_oss::attention_mask(batch.segmentation, 0).named("attention_mask");

  Forward f;
  // One decoder layer (pre-norm MLA, pre-norm MLP) on x; `prefix` is "layers.N".
  auto layer = [&](const std::string& prefix, Tensor x, bool moe_layer) {
    Tensor h;
    {
      auto scope = g.scope(prefix);
      h = frontend::nn::rms_norm(x, p.raw(prefix + ".pre_self_attention_layer_norm.scale"), m.eps)
              .named("pre_self_attention_layer_norm")
              .axes(kActivationAxes);
    }
    Tensor a = mla_attention(c, p, prefix + ".self_attention", h, rope, mask, batch.segmentation);
    {
      auto scope = g.scope(prefix);
      x = (x + a).named("attention_residual").axes(kActivationAxes);
      h = frontend::nn::rms_norm(x, p.raw(prefix + ".post_self_attention_layer_norm.scale"), m.eps)
              .named("post_self_attention_layer_norm")
              .axes(kActivationAxes);
    }
    gpt_oss::MlpOutputs out = gpt_oss::mlp(moe_layer ? c.moe : c.dense, p, prefix + ".mlp", h);
    if (out.expert_load.valid()) f.expert_loads.push_back(out.expert_load.expand_dims(0));
    if (out.expert_counts.valid() && m.routed_bias) f.expert_counts.push_back({prefix + ".mlp.gate.bias", out.expert_counts});
    auto scope = g.scope(prefix);
    return (x + out.out).named("output").axes(kActivationAxes);
  };

  Tensor x = embed(batch.inputs).named("embed").axes(kActivationAxes);
  for (int64_t l = 0; l < m.layers; ++l) x = layer("layers." + std::to_string(l), x, c.is_moe_layer(l));
  const Tensor final_norm = p.raw("decoder_norm.scale");
  f.hidden = frontend::nn::rms_norm(x, final_norm, m.eps).named("decoder_norm").axes(kActivationAxes);
  if (!with_mtp || c.mtp_layers == 0) return f;

  // Multi-token prediction: depth k sees the token k ahead and predicts the target k ahead,
  // where both stay in the position's segment (elsewhere token 0 and no loss, as MaxText).
  Tensor tokens = batch.inputs, targets = batch.targets, segments = batch.segmentation, h = x;
  const Tensor zero = g.zeros(batch.segmentation.dims(), ir::DType::kS32);
  for (int64_t k = 1; k <= c.mtp_layers; ++k) {
    const std::string prefix = "mtp." + std::to_string(k);
    tokens = shift_left(tokens);
    targets = shift_left(targets);
    segments = shift_left(segments);
    const Tensor valid = frontend::equal(segments, batch.segmentation) && frontend::not_equal(batch.segmentation, zero);
    Tensor e, hn;
    {
      auto scope = g.scope(prefix);
      e = frontend::nn::rms_norm(embed(frontend::where(valid, tokens, zero)), p.raw(prefix + ".embedding_norm.scale"), m.eps)
              .named("embedding_norm");
      hn = frontend::nn::rms_norm(h, p.raw(prefix + ".hidden_state_norm.scale"), m.eps).named("hidden_state_norm");
      h = frontend::einsum("btc,cd->btd", frontend::concatenate({e, hn}, -1), p(prefix + ".projection.kernel"))
              .named("projection")
              .axes(kActivationAxes);
    }
    h = layer(prefix + ".layer", h, m.is_moe());
    auto scope = g.scope(prefix);
    f.mtp_hidden.push_back(frontend::nn::rms_norm(h, final_norm, m.eps).named("decoder_norm").axes(kActivationAxes));
    f.mtp_targets.push_back(frontend::where(valid, targets, zero));
    f.mtp_weights.push_back(frontend::where(valid, g.full(batch.segmentation.dims(), 1.0), 0.0));
  }
  return f;
}

Tensor Deepseek::logits(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  Forward f = forward(g, params, batch, /*with_mtp=*/false);
  const gpt_oss::ParamTable p([this](const std::string& name) { return index(name); }, config_.moe.dtype, params);
  Tensor logits = frontend::einsum("btd,dv->btv", f.hidden, p("logits_dense.kernel"));
  if (config_.moe.cast_logits_to_fp32) logits = logits.astype(ir::DType::kF32);
  return logits.named("logits").axes({"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});
}

LossOutputs Deepseek::loss(frontend::Graph& g, std::span<const Tensor> params, const Batch& batch) const {
  const DeepseekConfig& c = config_;
  const gpt_oss::GptOssConfig& m = c.moe;
  Forward f = forward(g, params, batch, /*with_mtp=*/true);
  const gpt_oss::ParamTable p([this](const std::string& name) { return index(name); }, m.dtype, params);
  const Tensor unembedding = p("logits_dense.kernel");
  auto unembed = [&](const Tensor& hidden) {
    Tensor logits = frontend::einsum("btd,dv->btv", hidden, unembedding);
    if (m.cast_logits_to_fp32) logits = logits.astype(ir::DType::kF32);
    return logits.named("logits").axes({"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});
  };
  // The cross-entropy (and the z-loss's squared log-partitions) of `hidden` [B, T, D] over
  // the sequence's vocabulary tiles, as GPT-OSS's loss: each tile's logits live only in its
  // own scope, which RematPass recomputes for the backward pass.
  auto tiled_xent = [&](const Tensor& hidden, const Tensor& targets, const Tensor& weights, bool z_loss) {
    const int64_t T = hidden.dims()[1], tile = T / m.vocab_tiles;
    Tensor xent_sum, lse_squares;
    for (int64_t k = 0; k < m.vocab_tiles; ++k) {
      std::optional<frontend::Graph::Scope> tile_scope;
      if (m.vocab_tiles > 1) tile_scope.emplace(&g, "vocab_tiles." + std::to_string(k));
      auto part = [&](const Tensor& t) { return m.vocab_tiles > 1 ? t.slice(1, k * tile, (k + 1) * tile) : t; };
      Tensor logits = unembed(part(hidden));
      Tensor w = part(weights);
      Tensor xent = frontend::nn::cross_entropy_sum(logits, part(targets), w);
      xent_sum = k == 0 ? xent : xent_sum + xent;
      if (z_loss) {
        Tensor squares = (frontend::square(frontend::nn::logsumexp(logits.astype(ir::DType::kF32), -1)) * w).sum();
        lse_squares = k == 0 ? squares : lse_squares + squares;
      }
    }
    return std::make_pair(xent_sum, lse_squares);
  };
  auto scope = g.scope("loss");
  LossOutputs out;
  Tensor counted = frontend::not_equal(batch.segmentation, g.full(batch.segmentation.dims(), 0.0, ir::DType::kS32));
  Tensor weights = frontend::where(counted, g.full(batch.segmentation.dims(), 1.0), 0.0);  // [B, T] f32
  out.total_weights = weights.sum().named("total_weights");
  auto [xent_sum, lse_squares] = tiled_xent(f.hidden, batch.targets, weights, m.z_loss_multiplier != 0.0);
  out.xent_sum = xent_sum.named("xent_sum");
  Tensor denominator = frontend::maximum(out.total_weights, 1.0);
  Tensor loss = out.xent_sum / denominator;
  if (m.z_loss_multiplier != 0.0) {
    out.z_loss = (lse_squares * m.z_loss_multiplier / denominator).named("z_loss");
    loss = loss + out.z_loss;
  } else {
    out.z_loss = g.scalar(0.0).named("z_loss");
  }
  out.moe_lb_loss = g.scalar(0.0).named("moe_lb_loss");
  if (!f.mtp_hidden.empty()) {
    // DeepSeek-V3 (2.2): scaling * mean over depths of each depth's mean cross-entropy.
    auto mtp_scope = g.scope("mtp");
    Tensor sum;
    for (size_t k = 0; k < f.mtp_hidden.size(); ++k) {
      auto depth_scope = g.scope(std::to_string(k + 1));
      Tensor xent = tiled_xent(f.mtp_hidden[k], f.mtp_targets[k], f.mtp_weights[k], false).first;
      Tensor depth = xent / frontend::maximum(f.mtp_weights[k].sum(), 1.0);
      sum = k == 0 ? depth : sum + depth;
    }
    loss = loss + (sum * (c.mtp_scale / static_cast<double>(f.mtp_hidden.size()))).named("mtp_loss");
  }
  if (!f.expert_loads.empty()) out.expert_load = frontend::concatenate(f.expert_loads, 0).named("expert_load");
  if (!f.expert_counts.empty()) {
    // Auxiliary-loss-free balancing (DeepSeek-V3 2.1.2; MaxText's calculate_load_balance_updates):
    // each MoE layer's bias moves by rate toward the mean load, b += rate * sign(mean - load),
    // from this step's (token, expert) pairs per expert over the whole batch. The bias is
    // always set this way, never trained (no gradient, Adam or weight decay): rate 0 keeps it.
    auto bias_scope = g.scope("bias_update");
    for (const Forward::Counts& l : f.expert_counts) {
      const Tensor bias = p.raw(l.bias);
      const Tensor below_mean = l.counts.mean({0}, true) - l.counts;                 // [E]
      const Tensor up = g.full(l.counts.dims(), c.bias_update_rate);
      const Tensor step = frontend::where(below_mean > 0.0, up, frontend::where(below_mean < 0.0, up * -1.0, 0.0));
      out.state_updates.push_back({index(l.bias), (bias.astype(ir::DType::kF32) + step).astype(bias.dtype()).named(l.bias)});
    }
  }
  out.loss = loss.named("loss");
  return out;
}

}  // namespace kiln::models::deepseek
