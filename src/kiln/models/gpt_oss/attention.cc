// GPT-OSS self-attention (spec §1.2 steps 4-10, §1.3): q/k/v projections with biases, RoPE
// on the batch's positions, grouped-query attention with per-head sinks under a causal,
// segment and (on sliding layers) window mask, and the output projection with bias.
//
// Two attention paths give the same result (tests/models/gpt_oss_flash_attention_test.cc):
//   dot_product  the composite: scores [B, K, G, T, T], a masked float32 softmax with the
//                sink column, and the probabilities times v (memory grows with T^2);
//   flash        one fused `attention` op (flash kernels on the CPU backend, one fused
//                backward op): memory grows with T.
// `autoselected` picks flash from 128 tokens on, as MaxText does on TPU (its CPU choice is
// always dot_product, but Kiln's fused CPU kernel is the faster one there too; bench/
// attention_bench.cc), and dot_product for shorter sequences, where the difference is small.
#include <cmath>

#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

Tensor attention_mask(const Tensor& segmentation, int64_t window) {
  frontend::Graph& g = *segmentation.graph();
  const int64_t t = segmentation.dim(1);
  Tensor query = g.iota({t, t}, 0), key = g.iota({t, t}, 1);                         // [T, T] s32
  Tensor allowed = key <= query;
  if (window > 0) allowed = allowed && (key > query - static_cast<double>(window));  // W keys including self
  Tensor same_segment = frontend::equal(segmentation.expand_dims(2), segmentation.expand_dims(1));  // [B, T, T]
  return allowed && same_segment;
}

Tensor attention(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x,
                 const RopeTables& rope, const Tensor& allowed, const Tensor& segmentation, int64_t window) {
  frontend::Graph& g = *x.graph();
  auto scope = g.scope(prefix);
  auto project = [&](const char* name, std::vector<std::string> axes) {
    Tensor y = frontend::einsum("btd,dhk->bthk", x, p(prefix + "." + name + ".kernel"));
    if (c.attention_bias) y = y + p(prefix + "." + name + ".bias");
    return y.named(std::string(name) + "_proj").axes(std::move(axes));
  };
  // [B, T, H, Dh] and [B, T, K, Dh]
  Tensor q = project("query", {"activation_batch", "activation_length", "activation_heads", "activation_kv"});
  Tensor k = project("key", {"activation_batch", "activation_length", "activation_kv_heads", "activation_kv_head_dim"});
  Tensor v = project("value", {"activation_batch", "activation_length", "activation_kv_heads", "activation_kv_head_dim"});

  if (c.use_qk_norm) {
    // Qwen3: RMSNorm over each head's Dh, with a [Dh] scale shared by the heads, before RoPE.
    q = frontend::nn::rms_norm(q, p.raw(prefix + ".query_norm.scale"), c.eps).named("query_norm");
    k = frontend::nn::rms_norm(k, p.raw(prefix + ".key_norm.scale"), c.eps).named("key_norm");
  }
  q = apply_rope(q, rope).named("query_rope");
  k = apply_rope(k, rope).named("key_rope");

  Tensor sinks = c.attention_sink ? p.raw(prefix + ".sinks") : Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const bool flash = c.attention == "flash" || (c.attention == "autoselected" && x.dim(1) >= 128);
  Tensor context = (flash ? frontend::nn::flash_attention(q, k, v, scale, sinks, segmentation, segmentation, true, window)
                          : frontend::nn::dot_product_attention(q, k, v, allowed, scale, sinks))
                       .named("context")
                       .axes({"activation_batch", "activation_length", "activation_heads", "activation_kv"});  // [B, T, H, Dh]
  Tensor out = frontend::einsum("bthk,hkd->btd", context, p(prefix + ".out.kernel"));  // [B, T, D]
  if (c.attention_bias) out = out + p(prefix + ".out.bias");
  return out.named("out_proj").axes({"activation_batch", "activation_length", "activation_embed"});
}

}  // namespace kiln::models::gpt_oss
