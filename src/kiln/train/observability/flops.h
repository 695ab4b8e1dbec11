// MaxText's analytic training FLOP count per device per step
// (maxtext_utils.calculate_tflops_training_per_device), the numerator of the logged
// TFLOP/s/device. It counts matmul FLOPs only: 3 × (forward weight matmuls + forward
// attention scores and values), the 3 standing for one forward and two backward matmuls.
//
//   B = per_device_batch_size, T = max_target_length, D = emb_dim, H/K = query/kv heads,
//   d = head_dim, L = layers, V = vocab, E = experts, k = experts per token,
//   I = moe_mlp_dim (MoE) or mlp_dim (dense), n_act = len(mlp_activations)
//   FFN per layer   MoE:   2BTDE (router) + (k + S) (2BTID n_act + 2BTID), S = shared_experts
//                   dense: 2BTFD n_act + 2BTFD, F = mlp_dim
//                   the first first_num_dense_layers layers are dense, the rest MoE (DeepSeek-V3;
//                   MaxText counts them so for its deepseek block, Kiln for every family)
//   attention proj  2BTD(H + 2K)d (qkv) + 2BTDHd (out);  unembedding 2BTDV (embedding lookup free)
//                   MLA (attention_type=mla), with r_q = q_lora_rank, r_kv = kv_lora_rank,
//                   d_qk = qk_nope_head_dim + qk_rope_head_dim, d_v = v_head_dim:
//                   q 2BT(D r_q + r_q H d_qk) (2BTDH d_qk when r_q = 0),
//                   kv 2BT(D (r_kv + qk_rope_head_dim) + r_kv H (qk_nope_head_dim + d_v)),
//                   out 2BTDH d_v; scores and values 2BT²H(d_qk + d_v) before the causal halving
//   learnable       3 × (L FFN + L proj + unembed)
//   multi-token prediction (mtp_num_layers M, as MaxText): each module counts one more layer's
//                   FFN (the last layer's kind) and attention projections in learnable and one
//                   more layer of attention; its [2D, D] projection and second unembedding not
//   not counted     QK norms
//   attention       GPT-OSS alternates sliding (W' = min(W, T)) and full layers, layer 0
//                   sliding: L - floor(L/2) sliding, floor(L/2) full (all full when W = 0).
//     kMaxText2602  (MaxText of Feb 2026, which the reference run used):
//                   3 × (full 4BT²Hd + sliding 4BTW'Hd) / 2
//     kMaxTextHead  (MaxText HEAD): 3 × (full 2BT²Hd + sliding 4B(TW' - W'²/2)Hd)
// Everything × gradient_accumulation_steps. Not counted: remat recompute, norms, RoPE, the
// sink column, router softmax/top-k, expert biases and activations, load imbalance.
//
// Kiln logs kMaxText2602: it reproduces the reference run's "Total TFLOPs: 4.04" (HEAD
// would say 4.05), so TFLOP/s/device is comparable with the reference run's log.
#pragma once

#include <cstdint>

#include "kiln/config/config.h"

namespace kiln::train {

enum class FlopFormula { kMaxText2602, kMaxTextHead };

struct FlopInputs {
  double batch = 1;  // B: per_device_batch_size (may be fractional)
  int64_t seq_len = 1, emb_dim = 1, num_query_heads = 1, num_kv_heads = 1, head_dim = 1;
  int64_t num_layers = 1, vocab = 1;
  int64_t num_experts = 1, experts_per_token = 1, mlp_dim = 1, moe_mlp_dim = 1, num_activations = 2;
  int64_t sliding_window = 0;  // 0: every layer is full causal
  int64_t first_dense_layers = 0;  // of num_layers, dense before the MoE ones (num_experts > 1)
  int64_t shared_experts = 0;      // each of width moe_mlp_dim, beside the routed ones
  int64_t mtp_layers = 0;          // multi-token prediction modules (mtp_num_layers)
  // Multi-head latent attention (attention_type=mla); head_dim and kv heads are then unused.
  bool mla = false;
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t gradient_accumulation_steps = 1;

  static FlopInputs from_config(const config::Config& config);
};

struct TrainingFlops {
  double learnable_tflops = 0;  // per device per step
  double attention_tflops = 0;
  double total_tflops() const { return learnable_tflops + attention_tflops; }
};

TrainingFlops training_tflops_per_device(const FlopInputs& in, FlopFormula formula = FlopFormula::kMaxText2602);
const char* flop_formula_name(FlopFormula formula);  // "MaxText 2026-02, halved window, ..."

}  // namespace kiln::train
