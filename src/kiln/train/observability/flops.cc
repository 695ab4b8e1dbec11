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
  return in;
}

TrainingFlops training_tflops_per_device(const FlopInputs& in, FlopFormula formula) {
  const double B = in.batch, T = static_cast<double>(in.seq_len), D = static_cast<double>(in.emb_dim);
  const double H = static_cast<double>(in.num_query_heads), K = static_cast<double>(in.num_kv_heads);
  const double hd = static_cast<double>(in.head_dim), V = static_cast<double>(in.vocab);
  const double n_act = static_cast<double>(in.num_activations);
  const int64_t L = in.num_layers;

  double ffn;
  if (in.num_experts > 1) {
    const double E = static_cast<double>(in.num_experts), k = static_cast<double>(in.experts_per_token);
    const double I = static_cast<double>(in.moe_mlp_dim);
    ffn = 2 * B * T * D * E + k * (2 * B * T * I * D * n_act + 2 * B * T * I * D);
  } else {
    const double I = static_cast<double>(in.mlp_dim);
    ffn = 2 * B * T * I * D * n_act + 2 * B * T * I * D;
  }
  const double qkv = 2 * B * T * D * (H + 2 * K) * hd;
  const double proj = 2 * B * T * D * H * hd;
  const double unembed = 2 * B * T * D * V;
  const double learnable = 3 * (static_cast<double>(L) * (ffn + qkv + proj) + unembed);

  // Sliding layers: the even ones (0, 2, ...) when a window is set.
  const int64_t full_layers = in.sliding_window > 0 ? L / 2 : L;
  const int64_t sliding_layers = L - full_layers;
  const double W = static_cast<double>(std::min(in.sliding_window > 0 ? in.sliding_window : in.seq_len, in.seq_len));
  double attention;
  if (formula == FlopFormula::kMaxText2602) {
    attention = 3 * (static_cast<double>(full_layers) * 4 * B * T * T * H * hd +
                     static_cast<double>(sliding_layers) * 4 * B * T * W * H * hd) / 2;
  } else {
    attention = 3 * (static_cast<double>(full_layers) * 2 * B * T * T * H * hd +
                     static_cast<double>(sliding_layers) * 4 * B * (T * W - W * W / 2) * H * hd);
  }
  const double ga = static_cast<double>(in.gradient_accumulation_steps);
  return {learnable * ga / 1e12, attention * ga / 1e12};
}

const char* flop_formula_name(FlopFormula formula) {
  return formula == FlopFormula::kMaxText2602 ? "MaxText 2026-02, halved window, as in the reference run"
                                              : "MaxText HEAD, exact banded window";
}

}  // namespace kiln::train
