// Llama against transformers' LlamaForCausalLM through a saved reference: tiny random-init
// models that transformers built and saved (tests/models/data/llama/{untied,tied}: config.json,
// model.safetensors, and reference.safetensors with the ids and transformers' logits and
// losses), made by
//
//   .venv/bin/python tests/reference/make_llama_reference.py tests/models/data/llama
//
// The test imports each directory as `kiln convert --from hf` and load_parameters_path do
// (checkpoint/hf_import.h through the family table: hf_llama's plan and Kiln config), runs
// Kiln's forward and loss on the interpreter and on the CPU backend, and compares the logits,
// the per-token losses and the mean loss. The models use Llama 3.1's RoPE scaling where it
// changes the frequencies, GQA, a head width that is not hidden_size / heads, and (tied) the
// embedding as the unembedding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"
#include "tests/testing/temp_path.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;
using frontend::Tensor;

struct Imported {
  config::Config config;
  std::unique_ptr<Model> model;
  std::vector<ir::Literal> params;  // in model->params() order
};

// The HF directory imported as Kiln imports one: its Kiln config (YAML over base.yml) and
// every parameter produced by the streaming plan.
Imported import(const fs::path& dir, int64_t batch, int64_t length) {
  Result<checkpoint::HfImportPlan> plan = checkpoint::plan_hf_import(dir.string());
  KILN_CHECK_OK(plan);
  const fs::path yml = ::kiln::testing::temp_path("kiln_llama_parity.yml");
  std::ofstream(yml) << plan->config_yaml;
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.config_path = yml.string();
  options.overrides = {"max_target_length=" + std::to_string(length), "per_device_batch_size=" + std::to_string(batch),
                       "num_vocab_tiling=1"};
  Result<config::Config> config = config::load(options);
  fs::remove(yml);
  KILN_CHECK_OK(config);
  Result<std::unique_ptr<Model>> model = make_model(*config);
  KILN_CHECK_OK(model);
  Imported out{*config, std::move(*model), {}};
  std::map<std::string, const checkpoint::KilnFromHf*> by_name;
  for (const checkpoint::KilnFromHf& t : plan->tensors) by_name[t.name] = &t;
  KILN_CHECK_EQ(by_name.size(), out.model->params().size()) << "one planned tensor per parameter";
  for (const ParamSpec& p : out.model->params()) {
    KILN_CHECK(by_name.count(p.name)) << "the plan has no " << p.name;
    const checkpoint::KilnFromHf& t = *by_name.at(p.name);
    KILN_CHECK(t.shape == p.shape) << p.name << ": planned " << t.shape.to_string() << ", model "
                                   << p.shape.to_string();
    Result<std::string> bytes = plan->checkpoint.produce(t);
    KILN_CHECK_OK(bytes);
    Result<ir::Literal> literal = checkpoint::literal_from_bytes(t.shape, *bytes);
    KILN_CHECK_OK(literal);
    out.params.push_back(std::move(*literal));
  }
  return out;
}

// max |a - b| / max |b|.
double relative(const std::vector<double>& a, const std::vector<double>& b) {
  KILN_CHECK_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// Cross-entropy of ids[b, t+1] under logits[b, t], in double: [B, T-1].
std::vector<double> token_losses(const std::vector<double>& logits, const std::vector<double>& ids, int64_t B,
                                 int64_t T, int64_t V) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      const double* row = logits.data() + (b * T + t) * V;
      const double top = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
      out.push_back(top + std::log(sum) - row[static_cast<int64_t>(ids[b * T + t + 1])]);
    }
  }
  return out;
}

void check_against_reference(const std::string& which, bool tied) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests/models/data/llama" / which;
  Result<checkpoint::SafetensorsFile> ref = checkpoint::read_safetensors((dir / "reference.safetensors").string());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const ir::Literal& ids = ref->tensors.at("ids");
  const ir::Literal& ref_logits = ref->tensors.at("logits");
  const int64_t B = ids.shape().dims()[0], T = ids.shape().dims()[1], V = ref_logits.shape().dims()[2];

  Imported m = import(dir, B, T);
  EXPECT_EQ(m.config.get_string("decoder_block"), "llama2");
  EXPECT_EQ(m.config.get_string("rope_type"), "llama3.1");
  EXPECT_EQ(m.config.get_bool("logits_via_embedding"), tied);
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(m.model.get());
  ASSERT_NE(gpt, nullptr);
  EXPECT_EQ(gpt->index("logits_dense.kernel") < 0, tied);
  // The scaling acts on this head: not every frequency is the plain one.
  gpt_oss::RopeConfig plain = gpt->config().rope;
  plain.type = "default";
  EXPECT_NE(gpt_oss::rope_inv_freq(plain), gpt_oss::rope_inv_freq(gpt->config().rope));

  // Batch: the ids, each next id as target, positions 0..T-1, the last position uncounted
  // (it has no next token), as transformers' labels=ids shifts them. Segment id 0 would also
  // keep that position from attending to the others, so the logits are traced with all ids 1.
  std::vector<double> targets(B * T, 0.0), positions(B * T), segmentation(B * T, 1.0), one_segment(B * T, 1.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      positions[b * T + t] = static_cast<double>(t);
      if (t + 1 < T) targets[b * T + t] = ids.values()[b * T + t + 1];
    }
    segmentation[b * T + T - 1] = 0.0;
  }
  frontend::Graph g("llama_parity");
  std::vector<Tensor> params;
  for (const ParamSpec& p : m.model->params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  const ir::Shape s32(ir::DType::kS32, {B, T});
  Batch batch{g.parameter("inputs", s32), g.parameter("targets", s32), g.parameter("positions", s32),
              g.parameter("segmentation", s32)};
  LossOutputs lo = m.model->loss(g, params, batch);
  Batch whole = batch;
  whole.segmentation = g.parameter("one_segment", s32);
  g.set_outputs({m.model->logits(g, params, whole), lo.loss, lo.xent_sum, lo.total_weights});
  std::vector<ir::Literal> args = m.params;
  args.emplace_back(s32, ids.values());
  args.emplace_back(s32, targets);
  args.emplace_back(s32, positions);
  args.emplace_back(s32, segmentation);
  args.emplace_back(s32, one_segment);

  auto interpreted = interp::run(g.module(), args);
  ASSERT_TRUE(interpreted.ok()) << interpreted.status().to_string();
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_llama_parity_cache";
  auto exe = backend::compile_cpu(g.module(), options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<backend::Buffer> buffers;
  for (const ir::Literal& a : args) buffers.push_back(backend::Buffer::from_literal(a));
  auto run = (*exe)->run(buffers);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  std::vector<ir::Literal> compiled;
  for (const backend::Buffer& b : *run) compiled.push_back(b.to_literal());

  // Tolerances: both sides compute in float32 from the same f32 weights (the reference in
  // float64 from them), so what remains is Kiln's float32 rounding, a few 1e-7 per op grown
  // by the depth; a modelling difference (a RoPE dimension, the scaling's blend, GQA
  // grouping, the norm epsilon, a transposed weight) moves the logits by 1e-3 or more.
  const std::vector<double> ref_token_loss = ref->tensors.at("token_loss").values();
  const double ref_loss = ref->tensors.at("loss").values().at(0);
  using Run = std::pair<const char*, const std::vector<ir::Literal>*>;
  for (const auto& [executor, out] : {Run{"interpreter", &*interpreted}, Run{"cpu backend", &compiled}}) {
    const std::vector<double>& logits = (*out)[0].values();
    const double logits_err = relative(logits, ref_logits.values());
    EXPECT_LT(logits_err, 1e-5) << executor << " logits";
    const double token_err = relative(token_losses(logits, ids.values(), B, T, V), ref_token_loss);
    EXPECT_LT(token_err, 1e-5) << executor << " per-token loss";
    const double loss = (*out)[1].scalar_value();
    EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss) << executor << " loss";
    EXPECT_EQ((*out)[3].scalar_value(), static_cast<double>(B * (T - 1)));
    std::printf("%s %s: logits rel err %.2e, per-token loss rel err %.2e, loss %.7f (transformers %.7f)\n",
                which.c_str(), executor, logits_err, token_err, loss, ref_loss);
  }
}

TEST(LlamaParity, LogitsAndLossesMatchTransformers) { check_against_reference("untied", false); }

TEST(LlamaParity, TiedEmbeddingsMatchTransformers) { check_against_reference("tied", true); }

}  // namespace
}  // namespace kiln::models
