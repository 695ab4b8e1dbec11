// GPT-OSS (OpenAI's open-weight MoE decoder), exactly as published, and the dense
// Llama-style models that its switches give (spec/gpt-oss-maxtext.md §1.2):
//
//   x = embed[tokens]                                           [B, T, D], no scaling
//   for each layer l:
//     x += attention(rms_norm(x))   q/k/v/o biases, GQA, YaRN RoPE on the batch positions,
//                                   per-head sinks, sliding window on even layers,
//                                   causal and segment masks
//     x += mlp(rms_norm(x))         MoE: router with bias, top-k on raw logits, softmax over
//                                   the k picked, clamped-SwiGLU experts with biases
//   logits = rms_norm(x) @ unembed                              [B, T, V] in float32
//   loss = xent_sum / total_weights + z-loss + mean over layers of the load-balance loss
//
// Parameters (names, MaxText layouts and logical axes; N is the layer index):
//   token_embedder.embedding                        [V, D]        (vocab, embed_vocab)
//   layers.N.pre_self_attention_layer_norm.scale    [D]           (norm)
//   layers.N.self_attention.query.kernel            [D, H, Dh]    (embed, q_heads, kv)
//   layers.N.self_attention.query.bias              [H, Dh]       (q_heads, kv)             attention_bias
//   layers.N.self_attention.{key,value}.kernel      [D, K, Dh]    (embed, kv_heads, kv_head_dim)
//   layers.N.self_attention.{key,value}.bias        [K, Dh]       (kv_heads, kv_head_dim)   attention_bias
//   layers.N.self_attention.out.kernel              [H, Dh, D]    (heads, kv, embed)
//   layers.N.self_attention.out.bias                [D]           (embed)                   attention_bias
//   layers.N.self_attention.sinks                   [H]           (replicated)              attention_sink
//   layers.N.self_attention.{query,key}_norm.scale  [Dh]          (norm)                    use_qk_norm
//   layers.N.post_self_attention_layer_norm.scale   [D]           (norm)
//   MoE (num_experts > 1), expert width I = moe_mlp_dim:
//   layers.N.mlp.gate.kernel                        [D, E]        (embed, -)
//   layers.N.mlp.gate.bias                          [E]           (-)                       routed_bias
//   layers.N.mlp.wi_0, layers.N.mlp.wi_1            [E, D, I]     (exp, embed_moe, mlp_moe) gate and up
//   layers.N.mlp.wi_0_bias, layers.N.mlp.wi_1_bias  [E, I]        (exp, activation_mlp)     mlp_bias
//   layers.N.mlp.wo                                 [E, I, D]     (exp, mlp_moe, embed_moe)
//   layers.N.mlp.wo_bias                            [E, D]        (exp, activation_embed)   mlp_bias
//   Dense MLP (num_experts == 1), width F = mlp_dim:
//   layers.N.mlp.wi_0.kernel, layers.N.mlp.wi_1.kernel  [D, F]    (embed, mlp)   wi_1 only for a gated pair
//   layers.N.mlp.wi_0.bias, layers.N.mlp.wi_1.bias      [F]       (mlp)                     mlp_bias
//   layers.N.mlp.wo.kernel                          [F, D]        (mlp, embed)
//   layers.N.mlp.wo.bias                            [D]           (embed)                   mlp_bias
//   decoder_norm.scale                              [D]           (norm)
//   logits_dense.kernel                             [D, V]        (embed_vocab, vocab)      unless logits_via_embedding
//
// Hugging Face's gate_up_proj [E, D, 2I] holds wi_0 in its even and wi_1 in its odd columns;
// q_proj.weight [H*Dh, D] is query.kernel reshaped to [D, H*Dh] and transposed, and so on.
//
// Precision: parameters are stored in weight_dtype and cast to dtype where they are used;
// matmuls, attention (q.k and p.v) and the residual stream run in dtype; RMSNorm
// statistics, the attention and router softmaxes, the routing weights, the weighted expert
// sum (float32_weight_sum), the logits (cast_logits_to_fp32) and the losses in float32.
//
// MoE dispatch: sparse_matmul=true (default) sorts the (token, expert) pairs by expert and
// runs grouped matmuls over the ragged groups; false runs the dense one-hot dispatch (same
// result, E/k times the FLOPs). capacity_factor > 0 drops pairs past each expert's capacity
// (MaxText semantics, both dispatches); use_random_routing picks experts at random.
//
// Keys read but not (yet) changing the program: scan_layers (layers are unrolled, each with
// its own parameters), megablox (one grouped-matmul kernel serves both of MaxText's
// choices), float32_qk_product / float32_logits (the
// softmax is always float32), inhomogeneous_layer_cycle_interval (the sliding/full
// alternation is GPT-OSS's). Keys that would change the math but are not implemented
// (attn_logits_soft_cap, fused_qkv, dropout) are errors, and so is rope_type llama3.1 in
// GPT-OSS itself (make_gpt_oss; the shared rope code has it for models/llama).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/models/model.h"

namespace kiln::models::gpt_oss {

struct RopeConfig {
  std::string type = "default";  // default | llama3.1 | yarn
  int64_t head_dim = 0;
  double min_timescale = 1.0;
  double max_timescale = 10000.0;  // theta
  // YaRN and llama3.1 (factor and original_max_position only; llama3.1's low and high
  // frequency factors are fixed at 1 and 4, as in MaxText and Meta's release).
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position = 4096;
  bool truncate = true;
  bool attention_scaling = false;  // multiply cos/sin by 0.1 * mscale * ln(factor) + 1
  double mscale = 1.0;
  bool interleave = false;  // rotate (2i, 2i+1) pairs (YaRN only; default and llama3.1 RoPE rotate halves)
};

// Inverse frequencies [head_dim / 2], computed in double on the host (spec §1.4).
std::vector<double> rope_inv_freq(const RopeConfig& rope);
// The factor cos and sin are multiplied by (YaRN's concentration; 1 when off).
double rope_cos_sin_scale(const RopeConfig& rope);

struct GptOssConfig {
  int64_t vocab = 0, emb = 0, heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
  int64_t num_experts = 1, top_k = 1;
  int64_t mlp_dim = 0;  // expert width (MoE) or dense MLP width
  double eps = 1e-5;
  bool attention_bias = false, attention_sink = false;
  bool use_qk_norm = false;  // RMSNorm over each head's Dh of q and k before RoPE (Qwen3)
  int64_t sliding_window = 0;  // keys (including self) a sliding layer sees; 0 = all layers full
  std::string attention = "autoselected";  // autoselected | dot_product | flash (see attention.cc)
  RopeConfig rope;
  std::vector<std::string> mlp_activations{"silu", "linear"};
  double activations_limit = -1.0;
  bool mlp_bias = false, routed_bias = false, norm_topk_prob = false, float32_weight_sum = true;
  double routed_scaling_factor = 1.0;
  // Router scores (mlp.cc route): "" is GPT-OSS's (top-k of the logits, softmax over the k
  // picked); "softmax" a softmax over all experts, then top-k of the probabilities (Qwen3-MoE).
  std::string routed_score_func;
  // "sigmoid" (DeepSeek-V3): sigmoid scores; routed_bias (gate.bias) is added only to choose
  // the experts, within the topk_routing_group best of n_routing_groups groups (a group's
  // score: the sum of its two best biased scores); the weights are the picked scores.
  int64_t n_routing_groups = -1, topk_routing_group = -1;  // -1: no groups
  // Experts every token runs beside the routed ones, as one dense MLP of width
  // shared_experts * mlp_dim ("mlp.shared_experts.wi_0.kernel", ...), added to the output.
  int64_t shared_experts = 0;
  double load_balance_loss_weight = 0.0;
  // Expert dispatch: sparse_matmul (megablox is MaxText's kernel choice under it; Kiln has
  // one grouped-matmul kernel for both) sorts the (token, expert) pairs by expert and runs
  // grouped matmuls; false runs every expert on every token (dense one-hot dispatch).
  bool sparse_matmul = true;
  double capacity_factor = -1.0;    // > 0: per-expert capacity per sequence (token dropping); -1 dropless
  bool use_random_routing = false;  // debug: experts picked at random (balanced), router weights kept
  // Token-routed expert parallelism (expert_parallel.cc): the experts are split over
  // expert_shards devices and the batch over token_shards (both from the mesh and the
  // logical axis rules; 1 on one device). With token_shards > 1 the sparse dispatch is
  // written over token shards, so each device routes only its own tokens; with
  // expert_shards > 1 too the shards exchange rows with ragged all-to-alls. The math is
  // the same for every value.
  int64_t expert_shards = 1, token_shards = 1;
  // Each shard's tokens in this many chunks for the dispatch (num_moe_chunks, -1 resolved
  // by make_model from the shards): chunk by chunk, the exchange and grouped-matmul buffers
  // hold one chunk's rows (expert_parallel.cc). 1 on one device.
  int64_t moe_chunks = 1;
  double z_loss_multiplier = 0.0;
  bool logits_via_embedding = false, cast_logits_to_fp32 = true;
  // The loss's logits in this many tiles along the sequence (num_vocab_tiling, -1 resolved):
  // each tile's [B, T / tiles, V] logits are made, reduced to its loss and, in the backward
  // pass, made again (RematPass recomputes "vocab_tiles.N" whatever the policy), so the
  // [B, T, V] matrix never exists.
  int64_t vocab_tiles = 1;
  ir::DType dtype = ir::DType::kF32;         // activations and matmuls
  ir::DType weight_dtype = ir::DType::kF32;  // parameters

  // Reads and checks the keys above; errors name the key.
  static Result<GptOssConfig> from(const config::Config& config);
  bool is_moe() const { return num_experts > 1; }
  // GPT-OSS alternates: even layers sliding (when sliding_window > 0), odd layers full.
  bool is_sliding(int64_t layer) const { return sliding_window > 0 && layer % 2 == 0; }
};

class GptOss final : public Model {
 public:
  explicit GptOss(GptOssConfig config);
  const GptOssConfig& config() const { return config_; }

  const std::vector<ParamSpec>& params() const override { return specs_; }
  LossOutputs loss(frontend::Graph& g, std::span<const frontend::Tensor> params, const Batch& batch) const override;
  frontend::Tensor logits(frontend::Graph& g, std::span<const frontend::Tensor> params,
                          const Batch& batch) const override;

  // Index of a parameter in params() by name (-1 if the config has no such parameter).
  int index(const std::string& name) const;

 private:
  struct Forward {
    frontend::Tensor hidden;                     // [B, T, D]: the decoder's output, normalized
    frontend::Tensor unembedding;                // [D, V] or, tied to the embedding, [V, D]
    std::vector<frontend::Tensor> moe_lb_losses;  // per MoE layer, weighted, f32 []
    std::vector<frontend::Tensor> expert_loads;   // per MoE layer, f32 [3] (MlpOutputs::expert_load)
  };
  Forward forward(frontend::Graph& g, std::span<const frontend::Tensor> params, const Batch& batch) const;
  // [B, t, D] -> [B, t, V], in float32 when cast_logits_to_fp32.
  frontend::Tensor unembed(const Forward& f, const frontend::Tensor& hidden) const;
  void build_specs();

  GptOssConfig config_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, int> index_;
  std::vector<double> inv_freq_;
};

// The family's entry in models::families(): reads the config, places the MoE dispatch on
// the mesh (moe_layout.h) and builds the model.
Result<std::unique_ptr<Model>> make_gpt_oss(const config::Config& config);

}  // namespace kiln::models::gpt_oss
