// Llama weights between Kiln's MaxText layout (models/llama/llama.h) and transformers'
// LlamaForCausalLM:
//
//   Kiln (MaxText)                                   Hugging Face
//   token_embedder.embedding [V, D]                  model.embed_tokens.weight [V, D]
//   layers.N.pre_self_attention_layer_norm.scale     model.layers.N.input_layernorm.weight [D]
//   layers.N.post_self_attention_layer_norm.scale    model.layers.N.post_attention_layernorm.weight [D]
//   layers.N.self_attention.query.kernel [D, H, Dh]  ...self_attn.q_proj.weight [H*Dh, D] (transposed)
//   layers.N.self_attention.key.kernel [D, K, Dh]    ...self_attn.k_proj.weight [K*Dh, D] (transposed)
//   layers.N.self_attention.value.kernel [D, K, Dh]  ...self_attn.v_proj.weight [K*Dh, D] (transposed)
//   layers.N.self_attention.out.kernel [H, Dh, D]    ...self_attn.o_proj.weight [D, H*Dh] (transposed)
//   layers.N.mlp.wi_0.kernel [D, F]                  ...mlp.gate_proj.weight [F, D] (transposed)
//   layers.N.mlp.wi_1.kernel [D, F]                  ...mlp.up_proj.weight [F, D] (transposed)
//   layers.N.mlp.wo.kernel [F, D]                    ...mlp.down_proj.weight [D, F] (transposed)
//   decoder_norm.scale [D]                           model.norm.weight [D]
//   logits_dense.kernel [D, V]                       lm_head.weight [V, D] (transposed); absent when
//                                                    tied (logits_via_embedding / tie_word_embeddings)
//
// q_proj and k_proj need no permutation of their rows: Kiln's Llama rotates the two halves
// of each head (rope_interleave: false), as transformers' Llama does. Both directions are
// pure data movement, so Kiln -> HF -> Kiln is bit-exact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/hf_gpt_oss.h"  // TensorMap, HfShapes, KilnFromHf

namespace kiln::checkpoint {

// Kiln parameter names -> HF tensors (the config is not needed: the tensors' shapes say
// everything, tying included). Fails naming the tensor that is missing or misshapen.
Result<TensorMap> llama_to_hf(const TensorMap& kiln, const std::string& config_yaml);

// HF shapes and config.json (num_attention_heads, tie_word_embeddings) -> which HF tensor
// makes each Kiln tensor (kCopy or kTranspose), in Kiln name order. A missing or misshapen
// tensor, or one that is not part of a Llama Kiln implements (biases), is an error naming it.
Result<std::vector<KilnFromHf>> plan_llama_from_hf(const HfShapes& hf, const nlohmann::json& hf_config);
// The plan carried out on literals (tests, small models).
Result<TensorMap> llama_from_hf(const TensorMap& hf, const nlohmann::json& hf_config);

// A LlamaForCausalLM config.json for the Kiln tensors and their resolved Kiln config (YAML:
// norm epsilon, RoPE). v4 keys (rope_theta + rope_scaling), which transformers 4 and 5 both
// read. What LlamaForCausalLM cannot express (another rope_type, interleaved RoPE, a
// minimum timescale other than 1, another activation) is an error naming the key.
Result<nlohmann::json> llama_hf_config(const TensorMap& kiln, const std::string& config_yaml);

// The Kiln config (YAML over base.yml) of imported tensors (their shapes and dtype) and
// their config.json: v4 rope_theta + rope_scaling or v5 rope_parameters; absent keys take
// transformers' LlamaConfig defaults. rope_type llama3 becomes llama3.1 with rope_factor and
// original_max_position_embeddings; low_freq_factor and high_freq_factor must be 1 and 4
// (MaxText's fixed values), and anything else Kiln's Llama cannot express (another
// rope_type, biases, another hidden_act) is an error naming the key.
Result<std::string> llama_kiln_config(const std::map<std::string, ir::Shape>& kiln, const nlohmann::json& hf_config);

}  // namespace kiln::checkpoint
