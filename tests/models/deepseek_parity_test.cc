// DeepSeek-V3 against transformers' DeepseekV3ForCausalLM, from a saved reference made by
//   HF_HUB_OFFLINE=1 .venv/bin/python tests/reference/make_deepseek_reference.py tests/models/data/deepseek
// (a tiny random-init model with every feature on, a non-zero correction bias): its
// save_pretrained files are imported through checkpoint/hf_deepseek (per-expert tensors
// stacked), the Kiln config comes from its config.json, and Kiln's logits and per-token
// cross-entropy (the interpreter, float32 as transformers) match the saved ones within 1e-5
// relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_deepseek.h"
#include "kiln/checkpoint/mxfp4.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/model.h"
#include "tests/testing/temp_path.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/models/data/deepseek";
constexpr int64_t kB = 2, kT = 12, kV = 64;

struct Reference {
  checkpoint::TensorMap kiln;  // the imported parameters
  std::unique_ptr<Model> model;
  std::vector<double> ids, logits, per_token_loss;
};

Reference load_reference(std::vector<std::string> overrides = {}) {
  Reference r;
  std::ifstream in(kDir + "/config.json");
  const nlohmann::json hf_config = nlohmann::json::parse(in);
  auto hf = checkpoint::read_hf_tensors({kDir + "/model.safetensors"});
  KILN_CHECK_OK(hf);
  auto kiln = checkpoint::deepseek_from_hf(*hf, hf_config);
  KILN_CHECK_OK(kiln);
  r.kiln = std::move(*kiln);
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : r.kiln) shapes.emplace(name, t.shape());
  auto yaml = checkpoint::deepseek_kiln_config(shapes, hf_config);
  KILN_CHECK_OK(yaml);
  const std::string path = testing::temp_path("deepseek_reference.yml").string();
  std::ofstream(path) << *yaml << "max_target_length: " << kT << "\nper_device_batch_size: " << kB << "\n";
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.config_path = path;
  options.overrides = std::move(overrides);
  auto config = config::load(options);
  KILN_CHECK_OK(config);
  auto model = make_model(*config);
  KILN_CHECK_OK(model);
  r.model = std::move(*model);
  auto ref = checkpoint::read_hf_tensors({kDir + "/reference.safetensors"});
  KILN_CHECK_OK(ref);
  r.ids = ref->at("input_ids").values();
  r.logits = ref->at("logits").values();
  r.per_token_loss = ref->at("per_token_loss").values();
  return r;
}

// Kiln's logits [B, T, V] (one segment per row) and loss (targets: the next token; the last
// position padding).
std::pair<std::vector<double>, double> run(const Reference& r) {
  frontend::Graph g("deepseek_parity");
  std::vector<Tensor> params;
  std::vector<ir::Literal> args;
  for (const ParamSpec& p : r.model->params()) {
    params.push_back(g.parameter(p.name, p.shape, p.axes));
    KILN_CHECK(r.kiln.count(p.name)) << p.name;
    args.push_back(r.kiln.at(p.name));
  }
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  Tensor logits = r.model->logits(g, params, batch);
  // The loss's batch differs only in its segments: the last position is padding (it sees
  // only itself and nothing sees it), so the other positions' logits are the same.
  Batch padded = batch;
  padded.segmentation = g.parameter("loss_segmentation", frontend::s32({kB, kT}));
  LossOutputs loss = r.model->loss(g, params, padded);
  g.set_outputs({logits, loss.loss});
  std::vector<double> targets(kB * kT, 0.0), positions(kB * kT), segments(kB * kT, 1.0);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      positions[b * kT + t] = static_cast<double>(t);
      if (t + 1 < kT) targets[b * kT + t] = r.ids[b * kT + t + 1];
    }
  }
  std::vector<double> last_padding = segments;  // the loss: the last position has no target
  for (int64_t b = 0; b < kB; ++b) last_padding[b * kT + kT - 1] = 0.0;
  for (const std::vector<double>& v : {r.ids, targets, positions, segments, last_padding}) {
    args.emplace_back(frontend::s32({kB, kT}), v);
  }
  auto out = interp::run(g.module(), args);
  KILN_CHECK_OK(out);
  return {(*out)[0].values(), (*out)[1].values()[0]};
}

TEST(DeepseekParity, LogitsAndLossMatchTransformers) {
  Reference r = load_reference();
  auto [logits, loss] = run(r);
  ASSERT_EQ(logits.size(), r.logits.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    worst = std::max(worst, std::abs(logits[i] - r.logits[i]));
    scale = std::max(scale, std::abs(r.logits[i]));
  }
  EXPECT_LT(worst / scale, 1e-5) << "max |logit diff| " << worst << " of max |logit| " << scale;
  // Per-token cross-entropy from Kiln's logits (log-softmax in double).
  double mean = 0, worst_loss = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t + 1 < kT; ++t) {
      const double* row = &logits[(b * kT + t) * kV];
      const double top = *std::max_element(row, row + kV);
      double sum = 0;
      for (int64_t v = 0; v < kV; ++v) sum += std::exp(row[v] - top);
      const int64_t target = static_cast<int64_t>(r.ids[b * kT + t + 1]);
      const double xent = std::log(sum) + top - row[target];
      const double want = r.per_token_loss[b * (kT - 1) + t];
      worst_loss = std::max(worst_loss, std::abs(xent - want) / std::abs(want));
      mean += want / static_cast<double>(kB * (kT - 1));
    }
  }
  EXPECT_LT(worst_loss, 1e-5);
  std::printf("logits: max relative difference %.3g; per-token loss: %.3g\n", worst / scale, worst_loss);
  EXPECT_NEAR(loss, mean, 1e-5 * mean) << "the model's loss over the counted tokens";
}

// The correction bias must matter: without it other experts are picked and the logits move
// far beyond the tolerance (so the test above checks the biased choice, not luck).
TEST(DeepseekParity, TheCorrectionBiasChangesTheRouting) {
  Reference r = load_reference();
  for (auto& [name, t] : r.kiln) {
    if (name.ends_with("mlp.gate.bias")) t = ir::Literal(t.shape(), std::vector<double>(t.shape().num_elements(), 0.0));
  }
  auto [logits, loss] = run(r);
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::abs(logits[i] - r.logits[i]));
  EXPECT_GT(worst, 1e-2);
}

}  // namespace
}  // namespace kiln::models
