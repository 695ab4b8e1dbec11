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
//   there the rows are ordered by local expert (each row's expert id travels beside it in
//   a second, s32 exchange), the batched grouped matmuls run on the shard's own experts
//   (entry p uses block p mod G), the rows go back to slot order and return with the
//   reverse exchange; each token sums its k rows times their weights.
// Partitioned with the batch over (.., expert) (the default rules), every device holds one
// shard: the exchange runs over the expert axis and each device multiplies only its own
// experts' weights (spmd/ragged_exchange.h).
//
// Dropless, a receive buffer holds the worst case, G × n × k rows per device: 3 GiB of bf16
// rows for 16,384 tokens of gpt-oss-120b on 8 expert shards, and each layer's forward,
// recomputation and backward hold several such buffers. num_moe_chunks = C splits each
// shard's tokens into C chunks of m = n / C that are dispatched, computed and combined one
// after the other: every buffer holds one chunk's worst case (G × m × k rows), no pair is
// dropped, and the result is the same (each token's pairs stay in its chunk).
#include <algorithm>
#include <cmath>
#include <optional>
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

// MaxText's per-sequence expert capacity (mlp.cc's expert_capacity).
int64_t capacity(const GptOssConfig& c, int64_t seq_len) {
  double balanced = std::ceil(static_cast<double>(seq_len * c.top_k) / static_cast<double>(c.num_experts));
  return static_cast<int64_t>(std::max(balanced * c.capacity_factor, c.capacity_factor));
}

// The experts' MLP on rows grouped by expert, each group on its expert's weights:
// xs [P, R, D] -> [P, R, D], group_sizes s32 [P, E'] (rows past the groups are padding).
// Biases are grouped products of a column of ones made from the rows, so that the ones are
// laid out as the rows are (split by shard; a broadcast constant would be replicated): the
// bias gradient is then a grouped weight gradient, a partial sum per shard that is
// reduce-scattered, and the bias stays split like the weights (a take of the bias by
// expert would have a scatter_add gradient that gathers every shard's rows and indices).
Tensor grouped_expert_mlp(const GptOssConfig& c, const ParamTable& params, const std::string& prefix, const Tensor& xs,
                          const Tensor& group_sizes) {
  frontend::Graph& g = *xs.graph();
  const int64_t e = c.num_experts;
  Tensor ones = c.mlp_bias ? frontend::stop_gradient(xs.slice(2, 0, 1)) * 0.0 + 1.0 : Tensor();
  auto gmm = [&](const Tensor& lhs, const std::string& name) {
    Tensor y(&g, g.builder().grouped_matmul(lhs.instr(), params(prefix + "." + name).instr(), group_sizes.instr()));
    if (c.mlp_bias) {
      Tensor bias = params(prefix + "." + name + "_bias");
      bias = bias.reshape({e, 1, bias.dim(1)});
      y = y + Tensor(&g, g.builder().grouped_matmul(ones.instr(), bias.instr(), group_sizes.instr()));
    }
    return y;
  };
  Tensor gate = gmm(xs, "wi_0").named("mlpwi_0");
  Tensor up = c.mlp_activations.size() == 2 ? gmm(xs, "wi_1").named("mlpwi_1") : Tensor();
  Tensor hidden = hidden_activation(c, gate, up).named("hidden");                  // [P, R, I]
  return gmm(hidden, "wo").named("mlpwo");                                         // [P, R, D]
}

}  // namespace

namespace {

// G = 1 (the batch split, the experts not: fsdp or data parallelism without expert
// parallelism): every pair stays on its own shard, so there is nothing to exchange. Each
// shard runs sparse_experts' dispatch on its own tokens (one chunk of them): sort its
// pairs by expert, gather their rows, batched grouped matmuls over all E experts (one
// block, the weights gathered whole), each pair's output times its weight added back to
// its token. Partitioned, each device routes only its own tokens, as the one-device step
// does all of them.
//   xp [P, m, D], expert s32 [P, m*k] (E for a dropped pair), w [P, m*k] -> [P, m, D] sum dtype
Tensor shard_local_chunk(const GptOssConfig& c, const ParamTable& params, const std::string& prefix, const Tensor& xp,
                         const Tensor& expert, const Tensor& w) {
  frontend::Graph& g = *xp.graph();
  const int64_t shards = xp.dim(0), m = xp.dim(1), d = xp.dim(2), e = c.num_experts, k = c.top_k, pairs = m * k;
  const ir::DType s32 = ir::DType::kS32;
  Tensor order = frontend::sort(expert).second;                                    // per shard, stable
  Tensor token = g.iota({shards, m, k}, 1).reshape({shards, pairs}).take(order, 1, 1).named("sorted_token");
  Tensor group_sizes = frontend::scatter_add(g.zeros({shards, e}, s32), expert, g.full({shards, pairs}, 1.0, s32), 1, 1)
                           .named("group_sizes");                                  // s32 [P, E]
  Tensor xs = xp.take(token, 1, 1).named("grouped_inputs");                        // [P, m*k, D], grouped by expert
  Tensor y = grouped_expert_mlp(c, params, prefix, xs, group_sizes);              // [P, m*k, D]
  const ir::DType sum_dtype = c.float32_weight_sum ? ir::DType::kF32 : c.dtype;
  Tensor contributions = y.astype(sum_dtype) * w.take(order, 1, 1).astype(sum_dtype).expand_dims(-1);  // [P, m*k, D]
  return frontend::scatter_add(g.zeros({shards, m, d}, sum_dtype), token, contributions, 1, 1);         // [P, m, D]
}

// G > 1: one chunk's exchange (the file comment), rows per source slot `slot`.
//   xp [P, m, D], expert s32 [P, m*k] (E for a dropped pair), w [P, m*k] -> [P, m, D] sum dtype
Tensor exchanged_chunk(const GptOssConfig& c, const ParamTable& params, const std::string& prefix, const Tensor& xp,
                       const Tensor& expert, const Tensor& w, int64_t slot) {
  frontend::Graph& g = *xp.graph();
  const int64_t shards = xp.dim(0), m = xp.dim(1), d = xp.dim(2), e = c.num_experts, k = c.top_k, pairs = m * k;
  const int64_t groups = c.expert_shards, local = e / groups;
  const ir::DType s32 = ir::DType::kS32;

  auto [sorted_expert, order] = frontend::sort(expert);                            // per shard, stable
  Tensor token = g.iota({shards, m, k}, 1).reshape({shards, pairs}).take(order, 1, 1);
  Tensor rows = xp.take(token, 1, 1).named("dispatch_rows");                       // [P, m*k, D]
  Tensor counts = frontend::one_hot(expert, e, s32).sum({1});                      // s32 [P, E]
  Tensor sizes = counts.reshape({shards, groups, local}).sum({2}).named("dispatch_sizes");  // s32 [P, G]
  Tensor received = ragged(rows, sizes, groups, pairs, slot, false).named("dispatched");    // [P, G*slot, D]

  // Each row's expert travels with it (s32, plus 1 so that the zeroed padding rows read
  // 0): the receiver orders and counts what it got from its own rows, so this work stays
  // on the device that holds the entry (deriving it from every source's counts would need
  // all entries' counts, gathered and repeated on every device).
  Tensor ids = ragged((sorted_expert + g.full({shards, pairs}, 1, s32)).reshape({shards, pairs, 1}), sizes, groups, pairs,
                      slot, false)
                   .reshape({shards, groups * slot});                              // s32 [P, G*slot], 0: padding
  // Entry q*G + d holds expert block d: its first expert is d*El.
  Tensor first = g.iota({shards / groups, groups, groups * slot}, 1, s32).reshape({shards, groups * slot}) *
                 g.full({shards, groups * slot}, local, s32);
  Tensor local_expert = frontend::where(ids > g.full({shards, groups * slot}, 0, s32), ids - g.full({shards, groups * slot}, 1, s32) - first,
                                        g.full({shards, groups * slot}, local, s32));  // El: a padding row
  auto [grouped_expert, by_expert] = frontend::sort(local_expert);                 // local expert, then source
  Tensor xs = received.take(by_expert, 1, 1).named("grouped_inputs");              // [P, G*slot, D]
  Tensor group_sizes = frontend::one_hot(local_expert, local, s32).sum({1}).named("group_sizes");  // s32 [P, El]

  Tensor y = grouped_expert_mlp(c, params, prefix, xs, group_sizes);              // [P, G*slot, D]

  Tensor back = y.take(frontend::sort(by_expert).second, 1, 1);                    // slot order again
  Tensor returned = ragged(back, sizes, groups, pairs, slot, true).named("returned");  // [P, m*k, D], sorted order
  Tensor paired = returned.take(frontend::sort(order).second, 1, 1);               // (token, slot) order
  const ir::DType sum_dtype = c.float32_weight_sum ? ir::DType::kF32 : c.dtype;
  Tensor weighted = paired.astype(sum_dtype) * w.astype(sum_dtype).expand_dims(-1);  // [P, m*k, D]
  return weighted.reshape({shards, m, k, d}).sum({2});                             // [P, m, D]
}

}  // namespace

bool use_token_routing(const GptOssConfig& c, const Tensor& x) {
  const int64_t g = c.expert_shards, p = c.token_shards;
  return c.is_moe() && p > 1 && g >= 1 && p % g == 0 && c.num_experts % g == 0 && x.dim(0) % p == 0;
}

Tensor token_routed_experts(const GptOssConfig& c, const ParamTable& params, const std::string& prefix, const Tensor& x,
                            const Tensor& index, const Tensor& weights, const Tensor& keep) {
  frontend::Graph& g = *x.graph();
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2), e = c.num_experts, k = c.top_k;
  const int64_t shards = c.token_shards, n = b * t / shards, pairs = n * k;
  const int64_t chunks = c.moe_chunks, m = n / chunks;
  KILN_CHECK(n % chunks == 0) << "num_moe_chunks=" << chunks << " must divide the " << n << " tokens of a shard";
  const ir::DType s32 = ir::DType::kS32;

  Tensor xp = x.reshape({shards, n, d});                                           // [P, n, D]
  Tensor expert = index.reshape({shards, pairs});                                  // s32 [P, n*k]
  if (keep.valid()) {
    // Dropped pairs sort last under a pseudo-expert E, outside every group, sent nowhere.
    expert = frontend::where(keep.reshape({shards, pairs}) > 0.5, expert, g.full({shards, pairs}, e, s32));
  }
  Tensor w = weights.reshape({shards, pairs});                                     // [P, n*k]
  // Rows per source slot of one chunk's exchange: its worst case (every pair to one
  // shard), or what the capacity lets through.
  const int64_t local = e / c.expert_shards;
  const int64_t slot = c.capacity_factor > 0 ? std::min(m * k, local * capacity(c, t) * (b / shards)) : m * k;

  // The tokens in chunks, each dispatched, computed and combined on its own: the buffers
  // of the exchange and of the grouped matmuls hold one chunk's rows, and no pair is
  // dropped. Each chunk is a scope of its own ("chunks.K"), so its values carry its name.
  std::vector<Tensor> outs;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    std::optional<frontend::Graph::Scope> scope;
    if (chunks > 1) scope.emplace(&g, "chunks." + std::to_string(ch));
    auto part = [&](const Tensor& v, int64_t per_token) {
      return chunks == 1 ? v : v.slice(1, ch * m * per_token, (ch + 1) * m * per_token);
    };
    outs.push_back(c.expert_shards == 1
                       ? shard_local_chunk(c, params, prefix, part(xp, 1), part(expert, k), part(w, k))
                       : exchanged_chunk(c, params, prefix, part(xp, 1), part(expert, k), part(w, k), slot));
  }
  Tensor out = chunks == 1 ? outs[0] : frontend::concatenate(outs, 1);            // [P, n, D]
  return out.reshape({b, t, d}).astype(c.dtype);
}

}  // namespace kiln::models::gpt_oss
