// Qwen3-MoE (Qwen's mixture-of-experts decoder; MaxText's decoder_block "qwen3_moe",
// transformers' Qwen3MoeForCausalLM), built on the shared pre-norm decoder of models/gpt_oss
// (GptOss with two switches on):
//
//   x = embed[tokens]                                           [B, T, D], no scaling
//   for each layer l (all full causal attention, no sliding window, no sinks, no biases):
//     h = rms_norm(x)
//     q, k, v = h Wq, h Wk, h Wv                                [B, T, H|K, Dh], Dh = head_dim
//     q, k = rms_norm(q), rms_norm(k) over Dh (QK-norm,         scales [Dh] shared by the heads
//            use_qk_norm), then RoPE (default, theta rope_max_timescale, halves rotated)
//     x += GQA(q, k, v) Wo
//     h = rms_norm(x)
//     p = softmax(h Wr) over all E experts, in float32          [B, T, E] (routed_score_func softmax)
//     the top k of p, renormalised to sum 1 (norm_topk_prob)
//     x += sum over the k picked of p_e * (silu(h W0_e) * (h W1_e)) Wo_e   (plain SwiGLU experts)
//   logits = rms_norm(x) @ unembed (untied by default)           [B, T, V] in float32
//   loss = xent_sum / total_weights + load_balance_loss_weight × MaxText's load-balance loss
//
// Parameters: GptOss's (gpt_oss.h) with self_attention.query_norm.scale and key_norm.scale
// [Dh], and without biases or sinks. The released Qwen3-MoE has no shared expert;
// shared_experts > 0 adds the shared decoder's (mlp.shared_experts.*, every token runs it),
// which transformers' Qwen3MoeForCausalLM cannot hold.
#pragma once

#include <memory>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"

namespace kiln::models::qwen3_moe {

// The family's entry in models::families(): reads the config (every key it reads by name
// here or in GptOssConfig::from), refuses in one line each the keys Qwen3-MoE does not have
// when set off their defaults, places the MoE dispatch on the mesh and builds the model.
// routed_score_func "" means "softmax" for this family (Qwen3's router).
Result<std::unique_ptr<Model>> make_qwen3_moe(const config::Config& config);

}  // namespace kiln::models::qwen3_moe
