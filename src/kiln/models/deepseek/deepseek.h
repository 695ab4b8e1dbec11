// DeepSeek-V3 (decoder_block "deepseek", MaxText's name), exactly as transformers'
// DeepseekV3ForCausalLM computes it:
//
//   x = embed[tokens]                                            [B, T, D]
//   for each layer l:
//     x += mla(rms_norm(x))        multi-head latent attention (mla.cc): low-rank q and kv
//                                  projections, RoPE on a decoupled part of q and on one key
//                                  part shared by all heads, softmax scale 1/sqrt(dqk) * m^2
//     x += mlp(rms_norm(x))        l < first_num_dense_layers: a dense SwiGLU MLP of
//                                  base_mlp_dim; then MoE: sigmoid scores, the correction bias
//                                  (gate.bias) only to choose, group-limited top-k, weights =
//                                  picked scores normalised x routed_scaling_factor, plus the
//                                  shared expert(s) (gpt_oss/mlp.cc, the MoE dispatch of GPT-OSS)
//   logits = rms_norm(x) @ unembed                               [B, T, V] float32
//   loss = xent_sum / total_weights + z-loss + mtp_loss_scaling_factor * mean_k(MTP loss k)
//
// Multi-token prediction (mtp_num_layers = K, deepseek.cc), DeepSeek-V3 §2.2: module k (1..K)
//   h_k = block_k(projection_k(concat(rms_norm_e(embed(tokens shifted k)), rms_norm_h(h_{k-1}))))
// with h_0 the last decoder layer's output (before the final norm), block_k a decoder layer
// (MLA + MoE), and the final norm and unembedding shared; its cross-entropy is against the
// targets k positions further ahead, counted where those stay in the same segment.
//
// Parameters (MaxText names and layouts; N the layer, H heads, dqk = qk_nope + qk_rope):
//   token_embedder.embedding                        [V, D]
//   layers.N.pre_self_attention_layer_norm.scale    [D]
//   layers.N.self_attention.wq_a.kernel             [D, q_lora_rank]             q_lora_rank > 0
//   layers.N.self_attention.q_norm.scale            [q_lora_rank]                q_lora_rank > 0
//   layers.N.self_attention.wq_b.kernel             [q_lora_rank, H, dqk]        q_lora_rank > 0
//   layers.N.self_attention.query.kernel            [D, H, dqk]                  q_lora_rank = 0
//   layers.N.self_attention.wkv_a.kernel            [D, kv_lora_rank + qk_rope]
//   layers.N.self_attention.kv_norm.scale           [kv_lora_rank]
//   layers.N.self_attention.wkv_b.kernel            [kv_lora_rank, H, qk_nope + v_head_dim]
//   layers.N.self_attention.out.kernel              [H, v_head_dim, D]
//   layers.N.post_self_attention_layer_norm.scale   [D]
//   dense layers (N < first_num_dense_layers), F = base_mlp_dim:
//   layers.N.mlp.{wi_0,wi_1}.kernel [D, F], layers.N.mlp.wo.kernel [F, D]
//   MoE layers, I = moe_mlp_dim, S = shared_experts:
//   layers.N.mlp.gate.kernel [D, E], layers.N.mlp.gate.bias [E] (routed_bias: the correction bias)
//   layers.N.mlp.{wi_0,wi_1} [E, D, I], layers.N.mlp.wo [E, I, D]
//   layers.N.mlp.shared_experts.{wi_0,wi_1}.kernel [D, S*I], .wo.kernel [S*I, D]
//   mtp.K.embedding_norm.scale, mtp.K.hidden_state_norm.scale [D], mtp.K.projection.kernel
//   [2D, D], mtp.K.layer.* (a MoE decoder layer's parameters, names as under layers.N.)
//   decoder_norm.scale [D], logits_dense.kernel [D, V]
//
// The correction bias gate.bias takes no gradient and is never trained: the step sets it
// (LossOutputs::state_updates) to gate.bias + routed_bias_update_rate * sign(mean load - load)
// over that step's (token, expert) pairs per expert of the whole batch (DeepSeek-V3's
// auxiliary-loss-free balancing, MaxText's calculate_load_balance_updates); rate 0 keeps it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"

namespace kiln::models::deepseek {

struct DeepseekConfig {
  gpt_oss::GptOssConfig moe;    // the shared decoder's config for MoE layers (mlp_dim = moe_mlp_dim)
  gpt_oss::GptOssConfig dense;  // the same with num_experts 1 and mlp_dim = base_mlp_dim
  int64_t first_dense_layers = 0;
  // MLA widths.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head_dim = 0;
  double softmax_scale = 1.0;  // 1/sqrt(qk_nope + qk_rope), times mscale^2 under YaRN
  int64_t mtp_layers = 0;
  double mtp_scale = 0.1;
  double bias_update_rate = 0.0;

  static Result<DeepseekConfig> from(const config::Config& config);
  int64_t qk_head_dim() const { return qk_nope + qk_rope; }
  bool is_moe_layer(int64_t layer) const { return moe.is_moe() && layer >= first_dense_layers; }
};

class Deepseek final : public Model {
 public:
  explicit Deepseek(DeepseekConfig config);
  const DeepseekConfig& config() const { return config_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  LossOutputs loss(frontend::Graph& g, std::span<const frontend::Tensor> params, const Batch& batch) const override;
  frontend::Tensor logits(frontend::Graph& g, std::span<const frontend::Tensor> params,
                          const Batch& batch) const override;
  int index(const std::string& name) const;

 private:
  struct Forward;
  Forward forward(frontend::Graph& g, std::span<const frontend::Tensor> params, const Batch& batch,
                  bool with_mtp) const;
  void build_specs();
  void add_layer_specs(const std::string& prefix, bool moe_layer);

  DeepseekConfig config_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, int> index_;
  std::vector<double> inv_freq_;
};

// The family's entry in models::families().
Result<std::unique_ptr<Model>> make_deepseek(const config::Config& config);

}  // namespace kiln::models::deepseek
