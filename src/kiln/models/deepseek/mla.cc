// Multi-head latent attention (DeepSeek-V2/V3 §2.1.1), as transformers' DeepseekV3Attention:
//
//   q      = wq_b(q_norm(wq_a(x)))  or  query(x)                 [B, T, H, nope + rope]
//   q_rope = rope(q[..., nope:])                                 [B, T, H, rope]
//   kv_a   = wkv_a(x)                                            [B, T, kv_lora + rope]
//   k_rope = rope(kv_a[..., kv_lora:])                           [B, T, 1, rope]: one for all heads
//   kv     = wkv_b(kv_norm(kv_a[..., :kv_lora]))                 [B, T, H, nope + v]
//   k      = concat(kv[..., :nope], k_rope broadcast over heads) [B, T, H, nope + rope]
//   v      = kv[..., nope:]                                      [B, T, H, v]
//   out    = softmax(q k^T * scale + mask) v  @  out             [B, T, D]
//
// The attention op wants q, k and v of one head width; v (v_head_dim) is narrower than q
// and k (nope + rope) in DeepSeek-V3, so both paths run on v padded with zeros to that width
// and keep the first v_head_dim columns of the result (the padded columns are exactly zero
// and take no gradient); with v_head_dim = nope + rope nothing is padded.
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/deepseek/mla.h"

namespace kiln::models::deepseek {

using frontend::Tensor;

Tensor mla_attention(const DeepseekConfig& c, const gpt_oss::ParamTable& p, const std::string& prefix, const Tensor& x,
                     const gpt_oss::RopeTables& rope, const Tensor& allowed, const Tensor& segmentation) {
  frontend::Graph& g = *x.graph();
  auto scope = g.scope(prefix);
  const gpt_oss::GptOssConfig& m = c.moe;
  const int64_t b = x.dim(0), t = x.dim(1), h = m.heads, nope = c.qk_nope, r = c.qk_rope, dqk = c.qk_head_dim();
  const std::vector<std::string> head_axes = {"activation_batch", "activation_length", "activation_heads",
                                              "activation_kv"};

  Tensor q;  // [B, T, H, dqk]
  if (c.q_lora_rank > 0) {
    Tensor low = frontend::einsum("btd,dr->btr", x, p(prefix + ".wq_a.kernel")).named("query_wa_proj");
    low = frontend::nn::rms_norm(low, p.raw(prefix + ".q_norm.scale"), m.eps).named("mla_q");
    q = frontend::einsum("btr,rhk->bthk", low, p(prefix + ".wq_b.kernel"));
  } else {
    q = frontend::einsum("btd,dhk->bthk", x, p(prefix + ".query.kernel"));
  }
  q = q.named("query_proj").axes(head_axes);
  Tensor q_rope = gpt_oss::apply_rope(q.slice(-1, nope, dqk), rope);
  q = (nope > 0 ? frontend::concatenate({q.slice(-1, 0, nope), q_rope}, -1) : q_rope).named("query_rope");

  Tensor kv_a = frontend::einsum("btd,dr->btr", x, p(prefix + ".wkv_a.kernel")).named("kv_wa_proj");  // [B, T, kv_lora + r]
  Tensor latent = frontend::nn::rms_norm(kv_a.slice(-1, 0, c.kv_lora_rank), p.raw(prefix + ".kv_norm.scale"), m.eps)
                      .named("mla_kv");                                                               // [B, T, kv_lora]
  Tensor k_rope = gpt_oss::apply_rope(kv_a.slice(-1, c.kv_lora_rank, c.kv_lora_rank + r).reshape({b, t, 1, r}), rope)
                      .named("key_rope");                                                             // [B, T, 1, r]
  Tensor kv = frontend::einsum("btr,rhk->bthk", latent, p(prefix + ".wkv_b.kernel")).named("kv_proj");  // [B, T, H, nope + v]
  Tensor k_shared = k_rope.broadcast_to({b, t, h, r});
  Tensor k = (nope > 0 ? frontend::concatenate({kv.slice(-1, 0, nope), k_shared}, -1) : k_shared)
                 .named("key")
                 .axes({"activation_batch", "activation_length", "activation_kv_heads", "activation_kv_head_dim"});
  Tensor v = kv.slice(-1, nope, nope + c.v_head_dim);                                                 // [B, T, H, v]
  if (c.v_head_dim < dqk) {
    v = frontend::concatenate({v, g.zeros({b, t, h, dqk - c.v_head_dim}, v.dtype())}, -1);
  } else if (c.v_head_dim > dqk) {
    q = frontend::concatenate({q, g.zeros({b, t, h, c.v_head_dim - dqk}, q.dtype())}, -1);
    k = frontend::concatenate({k, g.zeros({b, t, h, c.v_head_dim - dqk}, k.dtype())}, -1);
  }
  v = v.named("value").axes({"activation_batch", "activation_length", "activation_kv_heads", "activation_kv_head_dim"});

  const bool flash = m.attention == "flash" || (m.attention == "autoselected" && t >= 128);
  Tensor context = flash ? frontend::nn::flash_attention(q, k, v, c.softmax_scale, Tensor(), segmentation, segmentation,
                                                         true, 0)
                         : frontend::nn::dot_product_attention(q, k, v, allowed, c.softmax_scale);
  context = context.slice(-1, 0, c.v_head_dim).named("context").axes(head_axes);               // [B, T, H, v]
  Tensor out = frontend::einsum("bthk,hkd->btd", context, p(prefix + ".out.kernel"));
  return out.named("out_proj").axes({"activation_batch", "activation_length", "activation_embed"});
}

}  // namespace kiln::models::deepseek
