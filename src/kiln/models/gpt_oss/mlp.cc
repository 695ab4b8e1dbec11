// The feed-forward half of a layer (spec §1.2 steps 13-15, §1.6, §1.7): a mixture of
// experts (router with bias, top-k on the raw logits, softmax over the k picked, experts
// with biases, weighted sum including the down-projection bias) or, with num_experts = 1,
// a dense MLP. Activations from mlp_activations: a gated pair [a0, a1] computes
// a0(x W0) * a1(x W1); ["sigmoid", "linear"] is GPT-OSS's clamped SwiGLU
// (gate * sigmoid(1.702 gate) * (up + 1), gate <= limit, |up| <= limit when limit > 0).
// Activations are named as MaxText's remat policies name them: mlpwi_0, mlpwi_1, mlpwo.
#include <cmath>
#include <numbers>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

namespace {

constexpr double kGptOssAlpha = 1.702;

Tensor activation(const std::string& name, const Tensor& x) {
  if (name == "linear") return x;
  if (name == "silu") return x * frontend::sigmoid(x);
  if (name == "sigmoid") return frontend::sigmoid(x);
  if (name == "relu") return frontend::maximum(x, 0.0);
  if (name == "gelu") {  // tanh approximation (flax's default)
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return x * 0.5 * (1.0 + frontend::tanh((x + x * x * x * 0.044715) * c));
  }
  KILN_CHECK(false) << "unknown activation " << name;
  return x;
}

// hidden = act(gate[, up]) with the config's activations; shapes are any equal shapes.
Tensor hidden_activation(const GptOssConfig& c, const Tensor& gate, const Tensor& up) {
  const auto& acts = c.mlp_activations;
  if (acts.size() == 1) return activation(acts[0], gate);
  if (acts[0] == "sigmoid" && acts[1] == "linear") {
    // GPT-OSS: x * sigmoid(1.702 x) on the gate (QuickGELU), + 1 on the linear branch.
    if (c.activations_limit > 0) return frontend::nn::clamped_swiglu(gate, up, kGptOssAlpha, c.activations_limit);
    return gate * frontend::sigmoid(gate * kGptOssAlpha) * (up + 1.0);
  }
  return activation(acts[0], gate) * activation(acts[1], up);
}

Tensor dense_mlp(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x) {
  auto project = [&](const std::string& name) {
    Tensor y = frontend::matmul(x, p(prefix + "." + name + ".kernel"));  // [B, T, F]
    if (c.mlp_bias) y = y + p(prefix + "." + name + ".bias");
    return y.named("mlp" + name).axes({"activation_batch", "activation_length", "activation_mlp"});
  };
  Tensor gate = project("wi_0");
  Tensor up = c.mlp_activations.size() == 2 ? project("wi_1") : Tensor();
  Tensor hidden = hidden_activation(c, gate, up).named("hidden");
  Tensor out = frontend::matmul(hidden, p(prefix + ".wo.kernel"));  // [B, T, D]
  if (c.mlp_bias) out = out + p(prefix + ".wo.bias");
  return out.named("mlpwo");
}

// The router's decision for every token, in the two forms dispatches use.
struct Routing {
  Tensor index;    // s32 [B, T, k]: the picked experts, best first
  Tensor weights;  // f32 [B, T, k]: their weights
  Tensor combine;  // f32 [B, T, E]: the weights scattered over all experts (0 where not picked)
  Tensor logits;   // f32 [B, T, E]: the router logits (for the load-balance loss)
};

// Router: linear with bias, top-k on the raw logits, softmax over the k picked (in float32).
Routing route(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x) {
  Routing r;
  Tensor logits = frontend::einsum("btd,de->bte", x, p(prefix + ".gate.kernel"));
  if (c.routed_bias) logits = logits + p(prefix + ".gate.bias");
  r.logits = logits.astype(ir::DType::kF32).named("router_logits").axes({"activation_batch", "activation_length", ""});
  auto [top_logits, top_index] = frontend::top_k(r.logits, c.top_k);              // [B, T, k]
  r.index = top_index.named("expert_index");
  r.weights = frontend::nn::softmax(top_logits, -1);                               // over the k picked
  if (c.norm_topk_prob) r.weights = r.weights / r.weights.sum({-1}, true);
  if (c.routed_scaling_factor != 1.0) r.weights = r.weights * c.routed_scaling_factor;
  r.weights = r.weights.named("expert_weights");
  Tensor picked = frontend::one_hot(r.index, c.num_experts, ir::DType::kF32);      // [B, T, k, E]
  r.combine = (picked * r.weights.expand_dims(-1)).sum({2}).named("combine");      // [B, T, E]
  return r;
}

// Every expert runs on every token; routing.combine weights their outputs and is zero for
// the experts a token did not pick. A sparse (grouped-matmul) dispatch replaces this
// function: same inputs, same result.
Tensor dense_experts(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x,
                     const Routing& routing) {
  auto project = [&](const std::string& name) {
    Tensor y = frontend::einsum("btd,edi->btei", x, p(prefix + "." + name));  // [B, T, E, I]
    if (c.mlp_bias) y = y + p(prefix + "." + name + "_bias");
    return y.named("mlp" + name).axes({"activation_batch", "activation_length", "activation_exp", "activation_mlp"});
  };
  Tensor gate = project("wi_0");
  Tensor up = c.mlp_activations.size() == 2 ? project("wi_1") : Tensor();
  Tensor hidden = hidden_activation(c, gate, up).named("hidden");               // [B, T, E, I]
  Tensor y = frontend::einsum("btei,eid->bted", hidden, p(prefix + ".wo"));    // [B, T, E, D]
  if (c.mlp_bias) y = y + p(prefix + ".wo_bias");
  y = y.named("mlpwo");
  const ir::DType sum_dtype = c.float32_weight_sum ? ir::DType::kF32 : c.dtype;
  Tensor out = frontend::einsum("bted,bte->btd", y.astype(sum_dtype), routing.combine.astype(sum_dtype));
  return out.astype(c.dtype);
}

}  // namespace

MlpOutputs mlp(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x) {
  frontend::Graph& g = *x.graph();
  auto scope = g.scope(prefix);
  MlpOutputs result;
  if (!c.is_moe()) {
    result.out = dense_mlp(c, p, prefix, x).axes({"activation_batch", "activation_length", "activation_embed"});
    return result;
  }
  // sparse_matmul will select the grouped-matmul dispatch once it exists; until then every
  // config dispatches densely (the same numbers, more FLOPs).
  Routing routing = route(c, p, prefix, x);
  result.out = dense_experts(c, p, prefix, x, routing)
                   .named("out")
                   .axes({"activation_batch", "activation_length", "activation_embed"});

  if (c.load_balance_loss_weight > 0) {
    // MaxText: per sequence, density[e] = mean over tokens of "e is among the picked",
    // prob[e] = mean router probability of e; mean(density * prob) * E^2 * weight,
    // averaged over the batch (balanced routing scores k * weight).
    const int64_t e = c.num_experts;
    Tensor density = frontend::one_hot(routing.index, e, ir::DType::kF32).sum({2}).mean({1});  // [B, E]
    Tensor prob = frontend::nn::softmax(routing.logits, -1).mean({1});                          // [B, E]
    result.lb_loss = ((density * prob).mean({0, 1}) * (static_cast<double>(e * e) * c.load_balance_loss_weight))
                         .named("moe_lb_loss");
  }
  return result;
}

}  // namespace kiln::models::gpt_oss
