// Token-routed expert parallelism (MaxText's sparse_matmul under expert sharding, with
// jax.lax.ragged_all_to_all): the sparse dispatch of mlp.cc written over token shards, so
// that the SPMD partitioner runs each shard on its own device and moves rows, not weights.
// The math is sparse_experts' for any shard counts; only the layout of the work changes.
//
//   P = token shards (the batch's devices), G = expert shards (G divides P; the experts of
//   shard d are d*El .. d*El+El-1, El = E / G), n = B*T / P tokens per shard, k picks each.
//   x [B, T, D] -> [P, n, D]; per shard the (token, slot) pairs [P, n*k] are sorted by
//   expert and their rows gathered; sizes [P, G] count the rows for each expert shard;
//   ragged_all_to_all sends them (slot = n*k rows per source: the worst case, every pair
//   to one shard; with a capacity, El experts × capacity × sequences per shard, the dropped
//   pairs not sent at all) -> [P, G*slot, D], entry q*G + d holding what shard d received;
//   there the rows are ordered by local expert (the per-source counts are known to every
//   device from the routing), the batched grouped matmuls run on the shard's own experts
//   (entry p uses block p mod G), the rows go back to slot order and return with the
//   reverse exchange; each token sums its k rows times their weights.
// Partitioned with the batch over (.., expert) (the default rules), every device holds one
// shard: the exchange runs over the expert axis and each device multiplies only its own
// experts' weights (spmd/ragged_exchange.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

namespace {

// The exchange op in the global form (ops/ragged_all_to_all_op.cc).
Tensor ragged(const Tensor& x, const Tensor& sizes, int64_t group, int64_t rows, int64_t slot, bool reverse) {
  frontend::Graph& g = *x.graph();
  ir::Attrs a;
  a.set("group_size", group);
  a.set("rows", rows);
  a.set("slot", slot);
  a.set("reverse", int64_t{reverse ? 1 : 0});
  return Tensor(&g, g.builder().emit(ir::Opcode::kRaggedAllToAll, {x.instr(), sizes.instr()}, a));
}

// Inclusive running sum along the last (small) dimension.
Tensor running_sum(const Tensor& x) {
  const int last = static_cast<int>(x.dims().size()) - 1;
  std::vector<Tensor> parts;
  for (int64_t e = 0; e < x.dim(last); ++e) parts.push_back(x.slice(last, 0, e + 1).sum({last}, true));
  return frontend::concatenate(parts, last);
}

// MaxText's per-sequence expert capacity (mlp.cc's expert_capacity).
int64_t capacity(const GptOssConfig& c, int64_t seq_len) {
  double balanced = std::ceil(static_cast<double>(seq_len * c.top_k) / static_cast<double>(c.num_experts));
  return static_cast<int64_t>(std::max(balanced * c.capacity_factor, c.capacity_factor));
}

}  // namespace

bool use_token_routing(const GptOssConfig& c, const Tensor& x) {
  const int64_t g = c.expert_shards, p = c.token_shards;
  return c.is_moe() && g > 1 && p % g == 0 && c.num_experts % g == 0 && x.dim(0) % p == 0;
}

Tensor token_routed_experts(const GptOssConfig& c, const ParamTable& params, const std::string& prefix, const Tensor& x,
                            const Tensor& index, const Tensor& weights, const Tensor& keep) {
  frontend::Graph& g = *x.graph();
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2), e = c.num_experts, k = c.top_k;
  const int64_t shards = c.token_shards, groups = c.expert_shards, local = e / groups;
  const int64_t n = b * t / shards, pairs = n * k;
  // Rows per source slot: the worst case, or what the capacity lets through.
  const int64_t slot = c.capacity_factor > 0 ? std::min(pairs, local * capacity(c, t) * (b / shards)) : pairs;
  const ir::DType s32 = ir::DType::kS32;

  Tensor xp = x.reshape({shards, n, d});                                           // [P, n, D]
  Tensor expert = index.reshape({shards, pairs});                                  // s32 [P, n*k]
  if (keep.valid()) {
    // Dropped pairs sort last under a pseudo-expert E and are sent nowhere.
    expert = frontend::where(keep.reshape({shards, pairs}) > 0.5, expert, g.full({shards, pairs}, e, s32));
  }
  auto [sorted_expert, order] = frontend::sort(expert);                            // per shard, stable
  Tensor token = g.iota({shards, n, k}, 1).reshape({shards, pairs}).take(order, 1, 1);
  Tensor rows = xp.take(token, 1, 1).named("dispatch_rows");                       // [P, n*k, D]
  Tensor counts = frontend::one_hot(expert, e, s32).sum({1});                      // s32 [P, E]
  Tensor sizes = counts.reshape({shards, groups, local}).sum({2}).named("dispatch_sizes");  // s32 [P, G]
  Tensor received = ragged(rows, sizes, groups, pairs, slot, false).named("dispatched");    // [P, G*slot, D]

  // What entry q*G + d received from source s, per local expert: counts[q*G+s, d*El+e].
  Tensor from = counts.reshape({shards / groups, groups, groups, local})
                    .transpose({0, 2, 1, 3})
                    .reshape({shards, groups, local});                             // s32 [P, G, El]
  Tensor ends = running_sum(from);                                                 // [P, G, El]
  Tensor row = g.iota({shards, groups, slot, local}, 2);
  Tensor local_expert = frontend::where(row >= ends.expand_dims(2).broadcast_to({shards, groups, slot, local}),
                                        g.full({shards, groups, slot, local}, 1, s32), g.full({shards, groups, slot, local}, 0, s32))
                            .sum({3})
                            .reshape({shards, groups * slot});                     // El: a padding row
  auto [grouped_expert, by_expert] = frontend::sort(local_expert);                 // local expert, then source
  Tensor xs = received.take(by_expert, 1, 1).named("grouped_inputs");              // [P, G*slot, D]
  Tensor group_sizes = from.sum({1}).named("group_sizes");                         // s32 [P, El]

  // Ones shaped like one column of the rows, made from them so that they are laid out as
  // the rows are (split by shard; a broadcast constant would be replicated, and the bias
  // product would then gather the biases of every expert).
  Tensor ones = c.mlp_bias ? frontend::stop_gradient(xs.slice(2, 0, 1)) * 0.0 + 1.0 : Tensor();
  auto gmm = [&](const Tensor& lhs, const std::string& name) {
    Tensor w = params(prefix + "." + name);
    Tensor y(&g, g.builder().grouped_matmul(lhs.instr(), w.instr(), group_sizes.instr()));
    if (c.mlp_bias) {
      // Each row its expert's bias, as a grouped product of ones: the bias stays split
      // over the expert shards like the weights (padding rows get none).
      Tensor bias = params(prefix + "." + name + "_bias");
      bias = bias.reshape({e, 1, bias.dim(1)});
      y = y + Tensor(&g, g.builder().grouped_matmul(ones.instr(), bias.instr(), group_sizes.instr()));
    }
    return y;
  };
  Tensor gate = gmm(xs, "wi_0").named("mlpwi_0");
  Tensor up = c.mlp_activations.size() == 2 ? gmm(xs, "wi_1").named("mlpwi_1") : Tensor();
  Tensor hidden = hidden_activation(c, gate, up).named("hidden");                  // [P, G*slot, I]
  Tensor y = gmm(hidden, "wo").named("mlpwo");                                     // [P, G*slot, D]

  Tensor back = y.take(frontend::sort(by_expert).second, 1, 1);                    // slot order again
  Tensor returned = ragged(back, sizes, groups, pairs, slot, true).named("returned");  // [P, n*k, D], sorted order
  Tensor paired = returned.take(frontend::sort(order).second, 1, 1);               // (token, slot) order
  const ir::DType sum_dtype = c.float32_weight_sum ? ir::DType::kF32 : c.dtype;
  Tensor w = weights.reshape({shards, pairs}).astype(sum_dtype).expand_dims(-1);   // [P, n*k, 1]
  Tensor out = (paired.astype(sum_dtype) * w).reshape({shards, n, k, d}).sum({2});  // [P, n, D]
  return out.reshape({b, t, d}).astype(c.dtype);
}

}  // namespace kiln::models::gpt_oss
