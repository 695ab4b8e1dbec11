#include "kiln/models/moe_layout.h"

#include <algorithm>

#include "kiln/config/mesh.h"
#include "kiln/spmd/logical_rules.h"

namespace kiln::models {

namespace {

// num_moe_chunks for the token-routed dispatch: n tokens per shard in chunks of n / C.
// -1 picks the fewest chunks (a divisor of n) whose worst-case buffer, expert_shards × n / C
// × top_k rows of the wider of the model and MLP widths in the compute dtype, fits 256 MiB:
// 16 for gpt-oss-120b at 16,384 tokens per device on 8 expert shards, 1 for small models.
// Without expert shards it picks 1: the buffers then hold exactly n × top_k rows, no worst
// case, while every chunk would make its own unreduced gradient of all the experts' weights
// (gpt-oss-120b on fsdp 64: 4 GiB each in float32), more than chunking saves.
Status resolve_moe_chunks(const config::Config& config, gpt_oss::GptOssConfig& c) {
  const int64_t asked = config.get_int("num_moe_chunks");
  const int64_t batch = config.derived().micro_batch_size, length = config.get_int("max_target_length");
  const bool routed = c.token_shards > 1 && batch % c.token_shards == 0;
  const int64_t n = routed ? batch * length / c.token_shards : batch * length;
  if (asked == -1) {
    c.moe_chunks = 1;
    if (!routed || c.expert_shards == 1) return ok_status();
    constexpr double kChunkBytes = 256.0 * 1024 * 1024;
    const double row_bytes = static_cast<double>(std::max(c.emb, c.mlp_dim) * ir::dtype_size(c.dtype));
    const double worst = static_cast<double>(c.expert_shards * n * c.top_k) * row_bytes;
    for (int64_t chunks = 1; chunks <= n; ++chunks) {
      if (n % chunks == 0 && worst / static_cast<double>(chunks) <= kChunkBytes) {
        c.moe_chunks = chunks;
        break;
      }
    }
    return ok_status();
  }
  if (asked < 1 || n % asked != 0) {
    return invalid_argument("num_moe_chunks={}: the chunks split the {} tokens each device routes, so it must divide {} "
                            "(accepted: a divisor of it, or -1 to choose)",
                            asked, n, n);
  }
  // Without token routing (one device, or a batch the shards do not divide) the dispatch
  // is the whole batch's at once; the key has nothing to split.
  c.moe_chunks = routed ? asked : 1;
  return ok_status();
}

}  // namespace

// How many devices the experts and the batch are split over on the configured mesh, as the
// partitioner will resolve them from the same logical axis rules: the MoE block writes its
// dispatch over that many token shards (gpt_oss/expert_parallel.cc).
Status resolve_moe_layout(const config::Config& config, gpt_oss::GptOssConfig& c) {
  if (!c.is_moe()) return ok_status();
  const config::Mesh& mesh = config.derived().mesh;
  if (mesh.num_devices() == 1) return resolve_moe_chunks(config, c);
  KILN_ASSIGN_OR_RETURN(spmd::LogicalRules rules, spmd::LogicalRules::from_config(config));
  auto shards = [&](const std::string& logical, int64_t size) {
    ir::Sharding s = rules.resolve({logical}, {size}, mesh);
    return s.dims.empty() ? int64_t{1} : mesh.size(s.dims[0]);
  };
  c.expert_shards = shards("exp", c.num_experts);
  c.token_shards = shards("activation_batch", config.derived().micro_batch_size);
  return resolve_moe_chunks(config, c);
}

}  // namespace kiln::models
