// The FLOP formula (train/observability/flops.h, MaxText's per family) against each family's
// own parameters: MaxText's learnable FLOPs are 6 × tokens × the matrix weights one token
// uses (2 per multiply-add, × 3 for the forward and two backward products), so for every
// family the formula's figure must equal 6 B T Σ (elements × active fraction) over the
// model's matrix parameters (the router's included, the embedding lookup, norm scales,
// biases and sinks not). The two are computed independently: one from config keys, the
// other from the ParamSpecs the family's code declares.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/observability/flops.h"

namespace kiln::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Matrix weights one token multiplies by, per the model's parameter list.
double active_matmul_weights(const Model& model) {
  double n = 0;
  for (const ParamSpec& p : model.params()) {
    if (p.shape.rank() < 2 || p.name == "token_embedder.embedding") continue;
    if (ends_with(p.name, "bias") || ends_with(p.name, ".scale") || ends_with(p.name, "sinks")) continue;
    n += static_cast<double>(p.shape.num_elements()) * p.active_fraction;
  }
  return n;
}

class FamilyFlops : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(FamilyFlops, LearnableFlopsAreSixTimesTokensTimesActiveMatrixWeights) {
  config::LoadOptions lo;
  lo.overrides = GetParam();
  Result<config::Config> cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Result<std::unique_ptr<Model>> model = make_model(*cfg);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const train::FlopInputs in = train::FlopInputs::from_config(*cfg);
  const double tokens = in.batch * static_cast<double>(in.seq_len);
  const double expected = 6 * tokens * active_matmul_weights(**model) / 1e12;
  EXPECT_NEAR(train::training_tflops_per_device(in).learnable_tflops, expected, expected * 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyFlops,
                         ::testing::Values(std::vector<std::string>{"model_name=gpt-oss-tiny"},
                                           std::vector<std::string>{"model_name=gpt-oss-20b"},
                                           std::vector<std::string>{"model_name=llama3-tiny"},
                                           std::vector<std::string>{"model_name=llama3.1-8b"},
                                           std::vector<std::string>{"model_name=qwen3-moe-tiny"},
                                           std::vector<std::string>{"model_name=qwen3-30b-a3b"},
                                           // Without the MTP module, which MaxText counts only in
                                           // part (flops.h) and Kiln's parameter list counts as
                                           // inactive.
                                           std::vector<std::string>{"model_name=deepseek3-tiny",
                                                                    "override_model_config=true", "mtp_num_layers=0"},
                                           std::vector<std::string>{"model_name=deepseek3-671b",
                                                                    "override_model_config=true", "mtp_num_layers=0"}));

}  // namespace
}  // namespace kiln::models
