// Qwen3-MoE against transformers' Qwen3MoeForCausalLM, from a saved reference: a tiny
// random-init model saved with save_pretrained (the per-expert layout of the released
// checkpoints), its input ids, float32 logits and per-token losses, made by
//
//   .venv/bin/python tests/reference/make_qwen3_moe_reference.py tests/models/data/qwen3_moe
//
// The directory is imported as `kiln convert --from hf` and load_parameters_path read it
// (checkpoint::plan_hf_import: the family table, the streaming per-expert stacking, the
// Kiln config from config.json), and Kiln's forward pass, compiled by the CPU backend, must
// give transformers' logits and losses within 1e-5 relative (both sides float32: what
// remains is summation order, a few 1e-7; a modelling difference in QK-norm, RoPE, routing
// or the experts moves logits by 1e-3 or more).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/models/model.h"
#include "tests/testing/temp_path.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

const std::string kData = std::string(KILN_SOURCE_DIR) + "/tests/models/data/qwen3_moe";

TEST(Qwen3MoeParity, LogitsAndLossesMatchTransformers) {
  auto ref = checkpoint::read_safetensors(kData + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const ir::Literal& ids = ref->tensors.at("ids");
  const ir::Literal& want_logits = ref->tensors.at("logits");
  const ir::Literal& want_token_loss = ref->tensors.at("token_loss");
  const int64_t B = ids.shape().dims()[0], T = ids.shape().dims()[1], V = want_logits.shape().dims()[2];

  // The HF directory as an import reads it, and the Kiln config it makes.
  auto plan = checkpoint::plan_hf_import(kData);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::string config_path = ::kiln::testing::temp_path("qwen3_moe_parity.yml");
  std::ofstream(config_path) << plan->config_yaml;
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.config_path = config_path;
  lo.overrides = {"max_target_length=" + std::to_string(T), "per_device_batch_size=" + std::to_string(B),
                  "attention=dot_product"};
  auto cfg = config::load(lo);
  std::filesystem::remove(config_path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->get_string("decoder_block"), "qwen3_moe");
  auto model = make_model(*cfg);
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  std::map<std::string, const checkpoint::KilnFromHf*> planned;
  for (const checkpoint::KilnFromHf& t : plan->tensors) planned[t.name] = &t;
  ASSERT_EQ(planned.size(), (*model)->params().size());
  std::vector<ir::Literal> args;
  for (const ParamSpec& p : (*model)->params()) {
    ASSERT_TRUE(planned.count(p.name)) << p.name;
    auto bytes = plan->checkpoint.produce(*planned.at(p.name));
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto value = checkpoint::literal_from_bytes(planned.at(p.name)->shape, *bytes);
    ASSERT_TRUE(value.ok()) << value.status().to_string();
    ASSERT_EQ(value->shape(), p.shape) << p.name;
    args.push_back(std::move(*value));
  }

  // Logits over whole rows; the loss as training counts it: every token with a next token
  // (the last of a row has segment 0, after every counted token, so causality keeps it out).
  frontend::Graph g("qwen3_moe_parity");
  std::vector<Tensor> params;
  for (const ParamSpec& p : (*model)->params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  auto s32 = [&](const char* name) { return g.parameter(name, frontend::s32({B, T})); };
  Tensor inputs = s32("inputs"), targets = s32("targets"), positions = s32("positions");
  Tensor whole = s32("whole_rows"), counted = s32("counted");
  Tensor logits = (*model)->logits(g, params, Batch{inputs, targets, positions, whole});
  LossOutputs lo_out = (*model)->loss(g, params, Batch{inputs, targets, positions, counted});
  g.set_outputs({logits, lo_out.xent_sum, lo_out.total_weights});
  std::vector<double> target(B * T, 0), position(B * T), ones(B * T, 1), count(B * T, 1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      position[b * T + t] = static_cast<double>(t);
      if (t + 1 < T) target[b * T + t] = ids.at(b * T + t + 1);
      else count[b * T + t] = 0;
    }
  }
  args.emplace_back(frontend::s32({B, T}), ids.values());
  for (const std::vector<double>* v : {&target, &position, &ones, &count}) args.emplace_back(frontend::s32({B, T}), *v);

  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_qwen3_moe_parity_cache";
  auto exe = backend::compile_cpu(g.module(), options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<backend::Buffer> buffers;
  for (const ir::Literal& a : args) buffers.push_back(backend::Buffer::from_literal(a));
  auto out = (*exe)->run(buffers);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const backend::Buffer& got = (*out)[0];
  ASSERT_EQ(got.shape().dims(), want_logits.shape().dims());

  // Logits: max |kiln - hf| / max |hf|.
  double err = 0, scale = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    err = std::max(err, std::abs(got.get(i) - want_logits.at(i)));
    scale = std::max(scale, std::abs(want_logits.at(i)));
  }
  EXPECT_LT(err / scale, 1e-5) << "max |logit| " << scale;
  // Per-token losses from Kiln's logits (in double) against transformers' cross-entropy.
  double loss_err = 0, loss_scale = 0, sum = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int64_t row = (b * T + t) * V;
      double m = -INFINITY, z = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, got.get(row + v));
      for (int64_t v = 0; v < V; ++v) z += std::exp(got.get(row + v) - m);
      const double loss = m + std::log(z) - got.get(row + static_cast<int64_t>(ids.at(b * T + t + 1)));
      const double hf = want_token_loss.at(b * (T - 1) + t);
      loss_err = std::max(loss_err, std::abs(loss - hf));
      loss_scale = std::max(loss_scale, std::abs(hf));
      sum += hf;
    }
  }
  EXPECT_LT(loss_err / loss_scale, 1e-5);
  // The training loss: the mean cross-entropy, as transformers' own loss.
  const double kiln_mean = (*out)[1].get(0) / (*out)[2].get(0);
  EXPECT_EQ((*out)[2].get(0), static_cast<double>(B * (T - 1)));
  EXPECT_NEAR(kiln_mean, ref->tensors.at("loss").scalar_value(), 1e-5 * std::abs(kiln_mean));
  EXPECT_NEAR(sum / static_cast<double>(B * (T - 1)), ref->tensors.at("loss").scalar_value(), 1e-5 * std::abs(kiln_mean));
}

}  // namespace
}  // namespace kiln::models
