// GPT-OSS weights between Kiln's MaxText layout (models/gpt_oss/gpt_oss.h) and Hugging
// Face's (spec §1.1): names, transposes, and gate/up interleaving.
//
//   Kiln (MaxText)                               Hugging Face
//   token_embedder.embedding [V, D]              model.embed_tokens.weight [V, D]
//   layers.N.pre_self_attention_layer_norm.scale model.layers.N.input_layernorm.weight
//   layers.N.post_self_attention_layer_norm.scale model.layers.N.post_attention_layernorm.weight
//   layers.N.self_attention.query.kernel [D,H,Dh] ...self_attn.q_proj.weight [H*Dh, D] (transposed)
//   layers.N.self_attention.query.bias [H, Dh]    ...self_attn.q_proj.bias [H*Dh]
//   (key, value: k_proj, v_proj alike; out.kernel [H,Dh,D] -> o_proj.weight [D, H*Dh])
//   layers.N.self_attention.sinks [H]             ...self_attn.sinks [H]
//   layers.N.mlp.gate.kernel [D, E] / .bias [E]   ...mlp.router.weight [E, D] / .bias [E]
//   layers.N.mlp.wi_0, wi_1 [E, D, I]             ...mlp.experts.gate_up_proj [E, D, 2I]: wi_0 even columns, wi_1 odd
//   layers.N.mlp.wi_0_bias, wi_1_bias [E, I]      ...mlp.experts.gate_up_proj_bias [E, 2I], interleaved alike
//   layers.N.mlp.wo [E, I, D] / wo_bias [E, D]    ...mlp.experts.down_proj [E, I, D] / down_proj_bias [E, D]
//   decoder_norm.scale [D]                        model.norm.weight [D]
//   logits_dense.kernel [D, V]                    lm_head.weight [V, D] (transposed)
//
// Both directions are pure data movement, so import -> export -> import is bit-exact.
// Dimensions come from the tensors' shapes (H from sinks or query.bias/kernel).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/ir/literal.h"

namespace kiln::checkpoint {

using TensorMap = std::map<std::string, ir::Literal>;

// Kiln parameter names -> HF tensors. Fails naming the tensor that is missing or misshapen.
Result<TensorMap> gpt_oss_to_hf(const TensorMap& kiln);
// HF tensors -> Kiln parameter names. MXFP4 *_blocks / *_scales must be dequantized first
// (read_hf_tensors in mxfp4.h does it while reading the files).
// `num_heads` is config.json's num_attention_heads.
Result<TensorMap> gpt_oss_from_hf(const TensorMap& hf, int64_t num_heads);

// The streaming import (kiln convert --from hf) plans from names and shapes alone which
// Hugging Face tensor makes each Kiln tensor and how, then produces them one at a time
// (hf_import.h). The plan is the mapping above, as data:
//   kCopy       the source's elements in order (a reshape at most: q_proj.bias [H*Dh] -> [H, Dh])
//   kTranspose  source [rows, cols] -> [cols, rows] (q/k/v/o_proj, router, lm_head)
//   kColumns    source [rows, cols] -> [rows, cols/step], columns first, first+step, ...
//               (gate_up_proj and its bias: wi_0 = even columns, wi_1 = odd)
// An HF tensor stored as MXFP4 *_blocks/*_scales is planned as the bf16 tensor it
// dequantizes to (HfTensorInfo::mxfp4).
struct HfTensorInfo {
  std::string dtype;            // safetensors name: "BF16", "F32", ... ("BF16" for MXFP4)
  std::vector<int64_t> dims;    // as gpt_oss_from_hf would see it (MXFP4: dequantized)
  bool mxfp4 = false;
};
using HfShapes = std::map<std::string, HfTensorInfo>;

enum class HfTransform { kCopy, kTranspose, kColumns };
struct KilnFromHf {
  std::string name;    // Kiln parameter name (no "params/")
  ir::Shape shape;     // its dtype (the source's) and dims
  std::string source;  // the Hugging Face tensor
  HfTransform transform = HfTransform::kCopy;
  int64_t rows = 0, cols = 0;   // the source as a matrix [rows, cols] (kTranspose, kColumns)
  int64_t first = 0, step = 1;  // kColumns
  // Several Hugging Face tensors stacked into one Kiln tensor (per-expert weights, as
  // Qwen3-MoE's experts.E.gate_proj.weight, into one [E, ...] tensor): when not empty, Kiln
  // slice i along dimension 0 is made from stack[i] by `transform` as above (rows and cols
  // describe each source, all of the same shape and dtype); `source` is then stack[0].
  std::vector<std::string> stack;
};
// The Kiln tensors of gpt_oss_from_hf, in its (name) order, with the same checks and errors
// (a missing or misshapen tensor is named), from shapes only. A source whose dtype Kiln does
// not hold (F16, U8 outside MXFP4, ...) is invalid_argument naming it.
Result<std::vector<KilnFromHf>> plan_gpt_oss_from_hf(const HfShapes& hf, int64_t num_heads);

// A config.json for the HF GptOssForCausalLM from the Kiln tensors' shapes and a resolved
// Kiln config (YAML text; rope, norm, window and clamp keys are read from it, GPT-OSS's
// values when absent). A config that GptOssForCausalLM cannot express (no sinks or expert
// biases, another activation or no clamp, rope_interleave, YaRN without its attention
// scaling, norm_topk_prob, token dropping, ...) is an error naming the key: exported, it
// would load as a different model.
Result<nlohmann::json> gpt_oss_hf_config(const TensorMap& kiln, const std::string& config_yaml);

// The other way: the Kiln config (YAML: the model keys, over base.yml) of imported tensors
// (Kiln names, as gpt_oss_from_hf gives them: shapes and dtype come from them) and their
// GptOssForCausalLM config.json (v4 rope_theta + rope_scaling or v5 rope_parameters; absent
// keys take transformers' GptOssConfig defaults). An imported checkpoint carries it, so
// `kiln forward` and `kiln sample` run it as they run a trained one. What Kiln's GPT-OSS
// cannot express (a rope type other than default/yarn, YaRN attention_factor or mscale, a
// layer pattern other than sliding/full alternation, tied embeddings, another
// swiglu_alpha) is an error naming the key.
Result<std::string> gpt_oss_kiln_config(const TensorMap& kiln, const nlohmann::json& hf_config);
// The same from the Kiln tensors' shapes alone (the streaming import has no values yet).
Result<std::string> gpt_oss_kiln_config(const std::map<std::string, ir::Shape>& kiln, const nlohmann::json& hf_config);

}  // namespace kiln::checkpoint
