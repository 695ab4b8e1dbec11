// Llama 2 and 3 (MaxText's decoder_block "llama2"): the GPT-OSS decoder (gpt_oss/gpt_oss.h)
// with its switches set to a dense pre-norm transformer, so one decoder serves both:
//
//   x = embed[tokens]                                            [B, T, D], no scaling
//   for each layer l:
//     x += attention(rms_norm(x))   q/k/v/o without biases, GQA, RoPE (plain, or with
//                                   Llama 3.1's frequency scaling) rotating the two halves of
//                                   each head, causal and segment masks, every layer full
//     x += mlp(rms_norm(x))         SwiGLU: (silu(x W0) * (x W1)) W2
//   logits = rms_norm(x) @ unembed  [B, T, V] in float32; unembed is logits_dense.kernel
//                                   [D, V], or the embedding [V, D] with logits_via_embedding
//   loss = xent_sum / total_weights (+ z-loss)
//
// Parameters (gpt_oss.h's table for num_experts = 1, without biases and sinks):
//   token_embedder.embedding                        [V, D]        (vocab, embed_vocab)
//   layers.N.pre_self_attention_layer_norm.scale    [D]           (norm)
//   layers.N.self_attention.query.kernel            [D, H, Dh]    (embed, q_heads, kv)
//   layers.N.self_attention.{key,value}.kernel      [D, K, Dh]    (embed, kv_heads, kv_head_dim)
//   layers.N.self_attention.out.kernel              [H, Dh, D]    (heads, kv, embed)
//   layers.N.post_self_attention_layer_norm.scale   [D]           (norm)
//   layers.N.mlp.wi_0.kernel, layers.N.mlp.wi_1.kernel  [D, F]    (embed, mlp)   gate and up
//   layers.N.mlp.wo.kernel                          [F, D]        (mlp, embed)
//   decoder_norm.scale                              [D]           (norm)
//   logits_dense.kernel                             [D, V]        (embed_vocab, vocab)   unless logits_via_embedding
//
// RoPE rotates halves (rope_interleave: false), as transformers' LlamaForCausalLM does, so
// Hugging Face's q_proj/k_proj map to query/key with no permutation of their rows
// (checkpoint/hf_llama.h). Keys this family does not implement (sinks, biases, a sliding
// window, experts, QK norm, MLA, YaRN, interleaved RoPE, ...) are refused, one line each.
#pragma once

#include <memory>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"

namespace kiln::models::llama {

// The decoder config of a Llama: GptOssConfig::from's reading, then every key the family
// does not implement refused when it is off its default.
Result<gpt_oss::GptOssConfig> llama_config(const config::Config& config);

// The family's entry in models::families() ("llama2").
Result<std::unique_ptr<Model>> make_llama(const config::Config& config);

}  // namespace kiln::models::llama
