#include "kiln/train/observability/flops.h"

#include <algorithm>

namespace kiln::train {

FlopInputs FlopInputs::from_config(const config::Config& config) {
  const config::Derived& d = config.derived();
  FlopInputs in;
  in.batch = config.get_float("per_device_batch_size");
  in.seq_len = config.get_int("max_target_length");
  in.emb_dim = d.emb_dim;
  in.num_query_heads = d.num_query_heads;
  in.num_kv_heads = d.num_kv_heads;
  in.head_dim = d.head_dim;
  in.num_layers = d.num_decoder_layers;
  in.vocab = config.get_int("vocab_size");
  in.num_experts = config.get_int("num_experts");
  in.experts_per_token = config.get_int("num_experts_per_tok");
  in.mlp_dim = d.mlp_dim;
  in.moe_mlp_dim = d.moe_mlp_dim;
  in.num_activations = static_cast<int64_t>(config.get_list("mlp_activations").size());
  in.sliding_window = config.get_int("sliding_window_size");
  in.gradient_accumulation_steps = config.get_int("gradient_accumulation_steps");
  if (in.num_experts > 1) {
    in.first_dense_layers = std::min(config.get_int("first_num_dense_layers"), in.num_layers);
    in.shared_experts = config.get_int("shared_experts");
  }
  in.mtp_layers = config.get_int("mtp_num_layers");
  in.mla = config.get_string("attention_type") == "mla";
  if (in.mla) {
    in.q_lora_rank = config.get_int("q_lora_rank");
    in.kv_lora_rank = config.get_int("kv_lora_rank");
    in.qk_nope_head_dim = config.get_int("qk_nope_head_dim");
    in.qk_rope_head_dim = config.get_int("qk_rope_head_dim");
    in.v_head_dim = config.get_int("v_head_dim");
  }
  return in;
}

TrainingFlops training_tflops_per_device(const FlopInputs& in, FlopFormula formula) {
  const double B = in.batch, T = static_cast<double>(in.seq_len), D = static_cast<double>(in.emb_dim);
  const double H = static_cast<double>(in.num_query_heads), K = static_cast<double>(in.num_kv_heads);
  const double hd = static_cast<double>(in.head_dim), V = static_cast<double>(in.vocab);
  const double n_act = static_cast<double>(in.num_activations);
  const int64_t L = in.num_layers;

  // One MLP of width `width`: the gate (and up) projections, then the down projection.
  auto mlp = [&](double width) { return 2 * B * T * width * D * n_act + 2 * B * T * width * D; };
  double ffn_all_layers, ffn_last_layer;  // over all L layers; the last one's (multi-token prediction)
  if (in.num_experts > 1) {
    const double E = static_cast<double>(in.num_experts), k = static_cast<double>(in.experts_per_token);
    const double S = static_cast<double>(in.shared_experts), I = static_cast<double>(in.moe_mlp_dim);
    const double moe = 2 * B * T * D * E + (k + S) * mlp(I);
    ffn_all_layers = static_cast<double>(in.first_dense_layers) * mlp(static_cast<double>(in.mlp_dim)) +
                     static_cast<double>(L - in.first_dense_layers) * moe;
    ffn_last_layer = in.first_dense_layers < L ? moe : mlp(static_cast<double>(in.mlp_dim));
  } else {
    ffn_all_layers = static_cast<double>(L) * mlp(static_cast<double>(in.mlp_dim));
    ffn_last_layer = mlp(static_cast<double>(in.mlp_dim));
  }
  double qkv, proj, score_width;  // score_width: q·k plus p·v widths per head (2d without MLA)
  if (in.mla) {
    const double d_qk = static_cast<double>(in.qk_nope_head_dim + in.qk_rope_head_dim);
    const double rq = static_cast<double>(in.q_lora_rank), rkv = static_cast<double>(in.kv_lora_rank);
    const double dv = static_cast<double>(in.v_head_dim);
    const double q = in.q_lora_rank == 0 ? 2 * B * T * D * H * d_qk : 2 * B * T * (D * rq + rq * H * d_qk);
    const double kv = 2 * B * T *
                      (D * (rkv + static_cast<double>(in.qk_rope_head_dim)) +
                       rkv * H * static_cast<double>(in.qk_nope_head_dim + in.v_head_dim));
    qkv = q + kv;
    proj = 2 * B * T * D * H * dv;
    score_width = d_qk + dv;
  } else {
    qkv = 2 * B * T * D * (H + 2 * K) * hd;
    proj = 2 * B * T * D * H * hd;
    score_width = 2 * hd;
  }
  const double unembed = 2 * B * T * D * V;
  const double mtp = static_cast<double>(in.mtp_layers);
  const double learnable =
      3 * (ffn_all_layers + static_cast<double>(L) * (qkv + proj) + unembed + mtp * (ffn_last_layer + qkv + proj));

  // Sliding layers: the even ones (0, 2, ...) when a window is set.
  const int64_t full_layers = (in.sliding_window > 0 ? L / 2 : L) + in.mtp_layers;
  const int64_t sliding_layers = L + in.mtp_layers - full_layers;
  const double W = static_cast<double>(std::min(in.sliding_window > 0 ? in.sliding_window : in.seq_len, in.seq_len));
  double attention;
  if (formula == FlopFormula::kMaxText2602) {
    attention = 3 * (static_cast<double>(full_layers) * 2 * B * T * T * H * score_width +
                     static_cast<double>(sliding_layers) * 2 * B * T * W * H * score_width) / 2;
  } else {
    attention = 3 * (static_cast<double>(full_layers) * B * T * T * H * score_width +
                     static_cast<double>(sliding_layers) * 2 * B * (T * W - W * W / 2) * H * score_width);
  }
  const double ga = static_cast<double>(in.gradient_accumulation_steps);
  return {learnable * ga / 1e12, attention * ga / 1e12};
}

const char* flop_formula_name(FlopFormula formula) {
  return formula == FlopFormula::kMaxText2602 ? "MaxText 2026-02, halved window, as in the reference run"
                                              : "MaxText HEAD, exact banded window";
}

}  // namespace kiln::train
