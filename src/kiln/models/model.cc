#include "kiln/models/model.h"

#include <cmath>

#include "kiln/base/check.h"
#include "kiln/config/mesh.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/spmd/logical_rules.h"

namespace kiln::models {

ParamCounts Model::counts() const {
  ParamCounts c;
  for (const ParamSpec& p : params()) {
    int64_t n = p.shape.num_elements();
    c.total += n;
    c.active_per_token += std::llround(static_cast<double>(n) * p.active_fraction);
  }
  return c;
}

namespace {

// How many devices the experts and the batch are split over on the configured mesh, as the
// partitioner will resolve them from the same logical axis rules: the MoE block writes its
// dispatch over that many token shards (gpt_oss/expert_parallel.cc).
Status set_moe_shards(const config::Config& config, gpt_oss::GptOssConfig& c) {
  if (!c.is_moe()) return ok_status();
  const config::Mesh& mesh = config.derived().mesh;
  if (mesh.num_devices() == 1) return ok_status();
  KILN_ASSIGN_OR_RETURN(spmd::LogicalRules rules, spmd::LogicalRules::from_config(config));
  auto shards = [&](const std::string& logical, int64_t size) {
    ir::Sharding s = rules.resolve({logical}, {size}, mesh);
    return s.dims.empty() ? int64_t{1} : mesh.size(s.dims[0]);
  };
  c.expert_shards = shards("exp", c.num_experts);
  c.token_shards = shards("activation_batch", config.derived().micro_batch_size);
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Model>> make_model(const config::Config& config) {
  const std::string& block = config.get_string("decoder_block");
  if (block == "gpt_oss") {
    KILN_ASSIGN_OR_RETURN(gpt_oss::GptOssConfig c, gpt_oss::GptOssConfig::from(config));
    KILN_RETURN_IF_ERROR(set_moe_shards(config, c));
    return std::unique_ptr<Model>(std::make_unique<gpt_oss::GptOss>(std::move(c)));
  }
  return invalid_argument("decoder_block: '{}' is not a model family Kiln has (accepted: gpt_oss)", block);
}

frontend::Tensor initial_value(frontend::Graph& g, const ParamSpec& spec, int64_t seed) {
  const std::vector<int64_t>& dims = spec.shape.dims();
  const ir::DType dtype = spec.shape.dtype();
  switch (spec.init.kind) {
    case Init::Kind::kZeros:
      return g.full(dims, 0.0, dtype);
    case Init::Kind::kOnes:
      return g.full(dims, 1.0, dtype);
    case Init::Kind::kNormal:
      return g.random(dims, "normal", seed, dtype) * spec.init.stddev;
    case Init::Kind::kTruncatedNormalFanIn: {
      // Variance scaling (scale 1, fan-in, truncated normal on [-2, 2]): 0.87962566 is the
      // standard deviation of a standard normal truncated to [-2, 2], divided out so the
      // result has variance 1 / fan_in.
      double stddev = std::sqrt(1.0 / static_cast<double>(spec.init.fan_in)) / 0.87962566103423978;
      return g.random(dims, "truncated_normal", seed, dtype) * stddev;
    }
  }
  KILN_CHECK(false) << "unknown Init kind for " << spec.name;
  return {};
}

}  // namespace kiln::models
