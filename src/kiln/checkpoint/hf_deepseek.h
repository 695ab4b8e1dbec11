// DeepSeek-V3 weights between Kiln's MaxText layout (models/deepseek/deepseek.h) and
// transformers' DeepseekV3ForCausalLM as save_pretrained writes it (per-expert tensors, the
// layout of the released checkpoints):
//
//   Kiln (MaxText)                                   Hugging Face (model.layers.N. ...)
//   token_embedder.embedding [V, D]                  model.embed_tokens.weight [V, D]
//   layers.N.pre_/post_self_attention_layer_norm     input_layernorm / post_attention_layernorm.weight
//   self_attention.wq_a.kernel [D, rq]               self_attn.q_a_proj.weight [rq, D] (transposed)
//   self_attention.q_norm.scale [rq]                 self_attn.q_a_layernorm.weight
//   self_attention.wq_b.kernel [rq, H, dqk]          self_attn.q_b_proj.weight [H*dqk, rq] (transposed)
//   self_attention.query.kernel [D, H, dqk]          self_attn.q_proj.weight [H*dqk, D] (q_lora_rank 0)
//   self_attention.wkv_a.kernel [D, rkv + rope]      self_attn.kv_a_proj_with_mqa.weight [rkv + rope, D]
//   self_attention.kv_norm.scale [rkv]               self_attn.kv_a_layernorm.weight
//   self_attention.wkv_b.kernel [rkv, H, nope + v]   self_attn.kv_b_proj.weight [H*(nope + v), rkv]
//   self_attention.out.kernel [H, v, D]              self_attn.o_proj.weight [D, H*v]
//   mlp.{wi_0,wi_1,wo}.kernel (dense layers)         mlp.{gate,up,down}_proj.weight (transposed)
//   mlp.gate.kernel [D, E] / mlp.gate.bias [E]       mlp.gate.weight [E, D] / mlp.gate.e_score_correction_bias
//   mlp.wi_0, mlp.wi_1 [E, D, I]                     mlp.experts.e.gate_proj / up_proj.weight [I, D], e < E
//   mlp.wo [E, I, D]                                 mlp.experts.e.down_proj.weight [D, I]
//   mlp.shared_experts.{wi_0,wi_1,wo}.kernel         mlp.shared_experts.{gate,up,down}_proj.weight
//   mtp.K.embedding_norm / hidden_state_norm.scale   model.layers.(L+K-1).enorm / hnorm.weight
//   mtp.K.projection.kernel [2D, D]                  model.layers.(L+K-1).eh_proj.weight [D, 2D]
//   mtp.K.layer.*                                    model.layers.(L+K-1).* as a decoder layer
//   decoder_norm.scale, logits_dense.kernel [D, V]   model.norm.weight, lm_head.weight [V, D]
//
// The multi-token prediction modules sit after the decoder layers as in DeepSeek's release
// (num_nextn_predict_layers); transformers builds no MTP module and skips them. The release
// also stores an embedding, a head and a norm in each MTP layer (shared_head, embed_tokens):
// Kiln shares the main ones and ignores those. FP8 checkpoints (weight_scale_inv tensors)
// are refused in one line: dequantize them to bf16 first. Both directions are pure data
// movement, so Kiln -> HF -> Kiln is bit-exact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/hf_gpt_oss.h"  // TensorMap, HfShapes, KilnFromHf

namespace kiln::checkpoint {

// Kiln parameter names -> HF tensors. Fails naming the tensor that is missing or misshapen.
Result<TensorMap> deepseek_to_hf(const TensorMap& kiln, const std::string& config_yaml);

// HF shapes and config.json -> which HF tensor(s) make each Kiln tensor (kCopy, kTranspose,
// and per-expert tensors stacked), in Kiln name order. A missing or misshapen tensor, or one
// that is not part of the DeepSeek-V3 Kiln implements, is an error naming it.
Result<std::vector<KilnFromHf>> plan_deepseek_from_hf(const HfShapes& hf, const nlohmann::json& hf_config);
// The plan carried out on literals (tests, small models).
Result<TensorMap> deepseek_from_hf(const TensorMap& hf, const nlohmann::json& hf_config);

// A DeepseekV3ForCausalLM config.json for the Kiln tensors and their resolved Kiln config
// (YAML). What DeepseekV3ForCausalLM cannot express (another rope type, YaRN's cos/sin
// scaling, no correction bias, another activation) is an error naming the key.
Result<nlohmann::json> deepseek_hf_config(const TensorMap& kiln, const std::string& config_yaml);

// The Kiln config (YAML over base.yml) of imported tensors and their config.json (v4
// rope_theta + rope_scaling or v5 rope_parameters; absent keys take transformers'
// DeepseekV3Config defaults).
Result<std::string> deepseek_kiln_config(const std::map<std::string, ir::Shape>& kiln, const nlohmann::json& hf_config);

}  // namespace kiln::checkpoint
