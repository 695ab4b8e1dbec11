#include "kiln/models/model.h"

#include <algorithm>
#include <cmath>

#include "kiln/base/check.h"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/models/deepseek/deepseek.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/llama/llama.h"
#include "kiln/models/qwen3_moe/qwen3_moe.h"

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

const std::vector<Family>& families() {
  // One row per family: the decoder_block that names it and the function that builds it
  // from the config (each in its own directory).
  static const std::vector<Family> kFamilies = {
      {"gpt_oss", "GPT-OSS: MoE with sinks, alternating sliding/full attention, YaRN", gpt_oss::make_gpt_oss},
      {"llama2", "Llama 2 and 3: dense SwiGLU, GQA, RoPE with llama3.1 scaling, tied or untied embeddings",
       llama::make_llama},
      {"qwen3_moe", "Qwen3-MoE: QK-norm, softmax top-k routing over many SwiGLU experts", qwen3_moe::make_qwen3_moe},
      {"deepseek", "DeepSeek-V3: MLA, dense-first then MoE with a shared expert, sigmoid group routing, MTP",
       deepseek::make_deepseek},
  };
  return kFamilies;
}

Result<std::unique_ptr<Model>> make_model(const config::Config& config) {
  const std::string& block = config.get_string("decoder_block");
  std::vector<std::string> names;
  for (const Family& f : families()) {
    if (f.decoder_block == block) return f.make(config);
    names.push_back(f.decoder_block);
  }
  return invalid_argument("decoder_block: '{}' is not a model family Kiln has (accepted: {})", block,
                          fmt::join(names, ", "));
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
