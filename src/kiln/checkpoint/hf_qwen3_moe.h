// Qwen3-MoE weights between Kiln's MaxText layout (models/qwen3_moe/qwen3_moe.h, the shared
// decoder's names) and transformers' Qwen3MoeForCausalLM, in the per-expert layout the
// released checkpoints use and save_pretrained writes (transformers 5 fuses the experts into
// gate_up_proj [E, 2I, D] and down_proj [E, D, I] when loading, and splits them again when
// saving):
//
//   Kiln (MaxText)                                Hugging Face
//   token_embedder.embedding [V, D]               model.embed_tokens.weight [V, D]
//   layers.N.pre_self_attention_layer_norm.scale  model.layers.N.input_layernorm.weight
//   layers.N.post_self_attention_layer_norm.scale model.layers.N.post_attention_layernorm.weight
//   layers.N.self_attention.query.kernel [D,H,Dh] ...self_attn.q_proj.weight [H*Dh, D] (transposed)
//   (key, value: k_proj, v_proj alike; out.kernel [H,Dh,D] -> o_proj.weight [D, H*Dh])
//   layers.N.self_attention.query_norm.scale [Dh] ...self_attn.q_norm.weight [Dh]
//   layers.N.self_attention.key_norm.scale [Dh]   ...self_attn.k_norm.weight [Dh]
//   layers.N.mlp.gate.kernel [D, E]               ...mlp.gate.weight [E, D] (transposed)
//   layers.N.mlp.wi_0 [E, D, I]                   ...mlp.experts.e.gate_proj.weight [I, D], e < E (each transposed)
//   layers.N.mlp.wi_1 [E, D, I]                   ...mlp.experts.e.up_proj.weight [I, D]
//   layers.N.mlp.wo [E, I, D]                     ...mlp.experts.e.down_proj.weight [D, I]
//   decoder_norm.scale [D]                        model.norm.weight [D]
//   logits_dense.kernel [D, V]                    lm_head.weight [V, D] (transposed; absent when tied)
//
// The import plans each Kiln expert tensor as the stack of its E per-expert sources
// (KilnFromHf::stack), so it streams like any other tensor. Both directions are pure data
// movement: Kiln -> HF -> Kiln is bit-exact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/hf_gpt_oss.h"

namespace kiln::checkpoint {

// Kiln parameter names -> HF tensors (`config_yaml` unused: the shapes say everything).
// A missing or misshapen tensor, or one Qwen3MoeForCausalLM has no place for, is named.
Result<TensorMap> qwen3_moe_to_hf(const TensorMap& kiln, const std::string& config_yaml);

// Which HF tensor makes each Kiln tensor, from names, shapes and config.json
// (num_attention_heads). Tensors the mapping does not read (biases, a shared expert, dense
// layers), the fused expert layout and a missing expert are errors naming the tensor.
Result<std::vector<KilnFromHf>> plan_qwen3_moe_from_hf(const HfShapes& hf, const nlohmann::json& hf_config);
// The plan carried out on literals (tests, small models).
Result<TensorMap> qwen3_moe_from_hf(const TensorMap& hf, const nlohmann::json& hf_config);

// config.json for Qwen3MoeForCausalLM from the Kiln tensors' shapes and the resolved Kiln
// config (YAML). What the class cannot express (another router, routed_scaling_factor,
// token dropping, a RoPE other than default, no QK-norm, shared experts, ...) is an error
// naming the key.
Result<nlohmann::json> qwen3_moe_hf_config(const TensorMap& kiln, const std::string& config_yaml);

// The Kiln config (YAML over base.yml) of planned tensors and their config.json (v4
// rope_theta + rope_scaling or v5 rope_parameters; absent keys take transformers'
// Qwen3MoeConfig defaults). What Kiln's Qwen3-MoE cannot express (dense layers, a sliding
// window, attention biases, another activation or RoPE) is an error naming the key.
Result<std::string> qwen3_moe_kiln_config(const std::map<std::string, ir::Shape>& kiln,
                                          const nlohmann::json& hf_config);

}  // namespace kiln::checkpoint
