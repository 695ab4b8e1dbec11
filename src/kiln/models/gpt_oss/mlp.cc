// The feed-forward half of a layer (spec §1.2 steps 13-15, §1.6, §1.7): a mixture of
// experts (router with bias, top-k on the raw logits, softmax over the k picked, experts
// with biases, weighted sum including the down-projection bias) or, with num_experts = 1,
// a dense MLP. Activations from mlp_activations: a gated pair [a0, a1] computes
// a0(x W0) * a1(x W1); ["sigmoid", "linear"] is GPT-OSS's clamped SwiGLU
// (gate * sigmoid(1.702 gate) * (up + 1), gate <= limit, |up| <= limit when limit > 0).
// Activations are named as MaxText's remat policies name them: mlpwi_0, mlpwi_1, mlpwo.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>

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

}  // namespace

// hidden = act(gate[, up]) with the config's activations; shapes are any equal shapes (layers.h).
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

namespace {

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
  Tensor weights;  // f32 [B, T, k]: their weights (0 for a pair dropped by the capacity)
  Tensor combine;  // f32 [B, T, E]: the weights scattered over all experts (0 where not picked)
  Tensor logits;   // f32 [B, T, E]: the router logits (for the load-balance loss)
  Tensor counts;   // f32 [E]: (token, expert) pairs routed to each expert
  Tensor dropped;  // f32 []: pairs dropped by the capacity (0 when dropless)
  Tensor keep;     // f32 [B, T, k]: 1 for a pair within its expert's capacity (invalid when dropless)
};

// Inclusive prefix sum along `axis` in log2(n) shifted adds (Hillis-Steele).
Tensor cumsum(const Tensor& x, int axis) {
  const int64_t n = x.dim(axis);
  Tensor s = x;
  for (int64_t d = 1; d < n; d *= 2) {
    std::vector<int64_t> zero_dims = x.dims();
    zero_dims[axis] = d;
    s = s + frontend::concatenate({x.graph()->zeros(zero_dims, x.dtype()), s.slice(axis, 0, n - d)}, axis);
  }
  return s;
}

// MaxText's per-sequence expert capacity (moe.py generate_masks):
// int(max(ceil(T * k / E) * capacity_factor, capacity_factor)).
int64_t expert_capacity(const GptOssConfig& c, int64_t seq_len) {
  double balanced = std::ceil(static_cast<double>(seq_len * c.top_k) / static_cast<double>(c.num_experts));
  return static_cast<int64_t>(std::max(balanced * c.capacity_factor, c.capacity_factor));
}

// DeepSeek-V3's choice (routed_score_func "sigmoid", as transformers' DeepseekV3TopkRouter):
// the bias (gate.bias, routed_bias) is added to the sigmoid scores [B, T, E] only to choose;
// with n_routing_groups > 1 the experts come from the topk_routing_group groups whose two
// best biased scores sum highest. Returns the picked unbiased scores and the experts; no
// gradient reaches the bias (the choice is an index).
std::pair<Tensor, Tensor> sigmoid_top_k(const GptOssConfig& c, const ParamTable& p, const std::string& prefix,
                                        const Tensor& scores) {
  const int64_t b = scores.dim(0), t = scores.dim(1), e = c.num_experts;
  Tensor choice = frontend::stop_gradient(scores);
  if (c.routed_bias) choice = choice + frontend::stop_gradient(p.raw(prefix + ".gate.bias").astype(ir::DType::kF32));
  choice = choice.named("router_choice_scores");                                   // [B, T, E]
  if (c.n_routing_groups > 1) {
    const int64_t groups = c.n_routing_groups, per = e / groups;
    Tensor group_scores = frontend::top_k(choice.reshape({b, t, groups, per}), 2).first.sum({-1});  // [B, T, G]
    Tensor best = frontend::top_k(group_scores, c.topk_routing_group).second;                       // [B, T, g]
    Tensor kept = frontend::one_hot(best, groups, ir::DType::kF32).sum({2});                         // [B, T, G]
    Tensor kept_experts = kept.expand_dims(-1).broadcast_to({b, t, groups, per}).reshape({b, t, e});
    // Experts of the other groups are never picked (top_k needs k <= g * E / G experts left).
    choice = frontend::where(kept_experts > 0.5, choice, -3.0e38).named("router_group_limited_scores");
  }
  Tensor index = frontend::top_k(choice, c.top_k).second;                          // [B, T, k]
  return {scores.take(index, 2, 2), index};
}

// Router: linear with bias, top-k on the raw logits, softmax over the k picked (in float32);
// routed_score_func "softmax": softmax over all experts, top-k of those probabilities.
// use_random_routing picks the k experts from uniform random scores instead (a balanced
// load for performance work; the same draw every step) and keeps the softmax of the router
// logits over those k as the weights, so the router still trains.
Routing route(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x) {
  Routing r;
  const int64_t b = x.dim(0), t = x.dim(1), e = c.num_experts, k = c.top_k;
  const bool sigmoid_scores = c.routed_score_func == "sigmoid";  // DeepSeek-V3: the bias only chooses
  Tensor logits = frontend::einsum("btd,de->bte", x, p(prefix + ".gate.kernel"));
  if (c.routed_bias && !sigmoid_scores) logits = logits + p(prefix + ".gate.bias");
  r.logits = logits.astype(ir::DType::kF32).named("router_logits").axes({"activation_batch", "activation_length", ""});
  // routed_score_func "softmax" (Qwen3-MoE): top-k of the probabilities over all experts,
  // which are the weights themselves (renormalised below when norm_topk_prob).
  const bool softmax_scores = c.routed_score_func == "softmax";
  const Tensor scores = softmax_scores   ? frontend::nn::softmax(r.logits, -1).named("router_probs")
                        : sigmoid_scores ? frontend::sigmoid(r.logits).named("router_scores")
                                         : r.logits;
  Tensor top_logits, top_index;
  if (c.use_random_routing) {
    Tensor uniform = x.graph()->random({b, t, e}, "uniform", /*seed=*/0).named("random_routing_scores");
    top_index = frontend::top_k(uniform, k).second;
    top_logits = scores.take(top_index, 2, 2);                                     // [B, T, k]
  } else if (sigmoid_scores) {
    std::tie(top_logits, top_index) = sigmoid_top_k(c, p, prefix, scores);        // [B, T, k]
  } else {
    std::tie(top_logits, top_index) = frontend::top_k(scores, k);                  // [B, T, k]
  }
  r.index = top_index.named("expert_index");
  r.weights = softmax_scores || sigmoid_scores ? top_logits : frontend::nn::softmax(top_logits, -1);  // "": over the k picked
  if (c.norm_topk_prob) r.weights = r.weights / r.weights.sum({-1}, true);
  if (c.routed_scaling_factor != 1.0) r.weights = r.weights * c.routed_scaling_factor;
  Tensor picked = frontend::one_hot(r.index, e, ir::DType::kF32);                  // [B, T, k, E]
  r.counts = picked.sum({0, 1, 2}).named("expert_counts");                         // [E]
  if (c.capacity_factor > 0) {
    // MaxText's token dropping: within each sequence, the pairs of an expert in (token,
    // slot) order past its capacity are dropped (their weight becomes 0).
    Tensor hits = picked.reshape({b, t * k, e});
    Tensor position = (cumsum(hits, 1) * hits).sum({2}).reshape({b, t, k});        // 1-based, among its expert's pairs
    Tensor keep = frontend::where(position <= static_cast<double>(expert_capacity(c, t)), x.graph()->full({b, t, k}, 1.0), 0.0);
    r.weights = (r.weights * frontend::stop_gradient(keep)).named("expert_weights_kept");
    r.keep = keep;
    r.dropped = (1.0 - keep).sum().named("dropped_pairs");
  }
  r.weights = r.weights.named("expert_weights");
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

// Sparse (dropless) dispatch, MaxText's sparse_matmul / MegaBlox path: the (token, slot)
// pairs are sorted by expert (stably, so each expert's pairs keep token order), the token
// rows gathered into that grouped layout [N*k, D] with the tokens per expert as group
// sizes, the experts run as grouped matmuls over the ragged groups, and each pair's output,
// times its routing weight, is added back to its token. Equal to dense_experts.
Tensor sparse_experts(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const Tensor& x,
                      const Routing& routing) {
  frontend::Graph& g = *x.graph();
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2), e = c.num_experts, k = c.top_k;
  const int64_t n = b * t, pairs = n * k;
  Tensor xf = x.reshape({n, d});                                                  // [N, D]
  Tensor expert = routing.index.reshape({pairs});                                 // s32 [N*k], pair i: token i / k
  auto [sorted_expert, order] = frontend::sort(expert);                           // stable
  Tensor token = g.iota({n, k}, 0).reshape({pairs}).take(order, 0).named("sorted_token");  // s32 [N*k]
  Tensor sizes = frontend::scatter_add(g.zeros({e}, ir::DType::kS32), expert, g.full({pairs}, 1.0, ir::DType::kS32), 0)
                     .named("group_sizes");                                       // s32 [E]
  Tensor xs = xf.take(token, 0).named("grouped_inputs");                          // [N*k, D], grouped by expert
  auto gmm = [&](const Tensor& lhs, const std::string& name) {
    Tensor y(&g, g.builder().grouped_matmul(lhs.instr(), p(prefix + "." + name).instr(), sizes.instr()));
    if (c.mlp_bias) y = y + p(prefix + "." + name + "_bias").take(sorted_expert, 0);  // each row its expert's bias
    return y;
  };
  auto project = [&](const std::string& name) {
    return gmm(xs, name).named("mlp" + name).axes({"activation_length", "activation_mlp"});  // [N*k, I]
  };
  Tensor gate = project("wi_0");
  Tensor up = c.mlp_activations.size() == 2 ? project("wi_1") : Tensor();
  Tensor hidden = hidden_activation(c, gate, up).named("hidden");                // [N*k, I]
  Tensor y = gmm(hidden, "wo").named("mlpwo");                                    // [N*k, D]
  const ir::DType sum_dtype = c.float32_weight_sum ? ir::DType::kF32 : c.dtype;
  Tensor w = routing.weights.reshape({pairs}).take(order, 0).astype(sum_dtype);   // [N*k]
  Tensor contributions = y.astype(sum_dtype) * w.expand_dims(-1);                 // [N*k, D]
  Tensor out = frontend::scatter_add(g.zeros({n, d}, sum_dtype), token, contributions, 0);  // [N, D]
  return out.reshape({b, t, d}).astype(c.dtype);
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
  Routing routing = route(c, p, prefix, x);
  Tensor out = !c.sparse_matmul              ? dense_experts(c, p, prefix, x, routing)
               : use_token_routing(c, x) ? token_routed_experts(c, p, prefix, x, routing.index, routing.weights, routing.keep)
                                         : sparse_experts(c, p, prefix, x, routing);
  if (c.shared_experts > 0) {
    // DeepSeek's shared expert(s): one dense MLP every token runs, added to the routed sum.
    auto shared_scope = g.scope("shared_experts");
    out = out + dense_mlp(c, p, prefix + ".shared_experts", x);
  }
  result.out = out.named("out").axes({"activation_batch", "activation_length", "activation_embed"});
  result.expert_counts = frontend::stop_gradient(routing.counts);
  {
    // Expert load for the metrics: max and mean pairs per expert, pairs dropped.
    Tensor load_max = frontend::stop_gradient(routing.counts).max({0});
    Tensor load_mean = frontend::stop_gradient(routing.counts).mean({0});
    Tensor dropped = routing.dropped.valid() ? frontend::stop_gradient(routing.dropped) : g.scalar(0.0);
    result.expert_load =
        frontend::concatenate({load_max.reshape({1}), load_mean.reshape({1}), dropped.reshape({1})}, 0).named("expert_load");
  }

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
