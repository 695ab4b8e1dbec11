// DeepSeek-V3's multi-token prediction against an independent PyTorch implementation written
// around transformers' DeepseekV3 layers (tests/reference/deepseek_mtp_ref.py; transformers
// has no MTP module), run by this test with the project venv:
//   HF_HUB_OFFLINE=1 .venv/bin/python tests/reference/deepseek_mtp_ref.py OUT_DIR
// Its files (the MTP module as model.layers.L.*) are imported through checkpoint/hf_deepseek;
// Kiln's loss (main + 0.1 * MTP) matches within 1e-5 relative and every parameter's gradient
// within 1e-4 of the tensor's largest (float32 on both sides). It needs torch, transformers and
// safetensors in the venv, which only `make parity` installs (python/requirements-parity.txt):
// without them it skips, and scripts/parity.sh runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiln/autodiff/autodiff.h"
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
namespace fs = std::filesystem;

constexpr int64_t kB = 2, kT = 10;

TEST(DeepseekMtp, LossAndGradientsMatchPyTorchReference) {
  const std::string python = std::string(KILN_SOURCE_DIR) + "/.venv/bin/python";
  const std::string probe = python + " -c 'import torch, transformers, safetensors' > /dev/null 2>&1";
  if (!fs::exists(python) || std::system(probe.c_str()) != 0) {
    GTEST_SKIP() << python << " lacks torch, transformers or safetensors (make parity installs them: "
                 << "python/requirements-parity.txt)";
  }
  const std::string dir = testing::temp_path("deepseek_mtp").string();
  const std::string command = "HF_HUB_OFFLINE=1 " + python + " " + KILN_SOURCE_DIR +
                              "/tests/reference/deepseek_mtp_ref.py " + dir + " > " + dir + ".log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  std::ifstream in(dir + "/config.json");
  const nlohmann::json hf_config = nlohmann::json::parse(in);
  auto hf = checkpoint::read_hf_tensors({dir + "/model.safetensors"});
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto kiln = checkpoint::deepseek_from_hf(*hf, hf_config);
  ASSERT_TRUE(kiln.ok()) << kiln.status().to_string();
  std::map<std::string, ir::Shape> shapes;
  for (const auto& [name, t] : *kiln) shapes.emplace(name, t.shape());
  ASSERT_TRUE(shapes.count("mtp.1.projection.kernel"));
  auto yaml = checkpoint::deepseek_kiln_config(shapes, hf_config);
  ASSERT_TRUE(yaml.ok()) << yaml.status().to_string();
  const std::string path = dir + "/kiln.yml";
  std::ofstream(path) << *yaml << "max_target_length: " << kT << "\nper_device_batch_size: " << kB << "\n";
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.config_path = path;
  auto config = config::load(options);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->get_int("mtp_num_layers"), 1);
  auto model = make_model(*config);
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  frontend::Graph g("deepseek_mtp");
  std::vector<Tensor> params;
  std::vector<ir::Literal> args;
  for (const ParamSpec& p : (*model)->params()) {
    params.push_back(g.parameter(p.name, p.shape, p.axes));
    ASSERT_TRUE(kiln->count(p.name)) << p.name;
    args.push_back(kiln->at(p.name));
  }
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  LossOutputs loss = (*model)->loss(g, params, batch);
  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  auto grads = autodiff::gradients(g.computation(), loss.loss.instr(), wrt);
  ASSERT_TRUE(grads.ok()) << grads.status().to_string();
  std::vector<Tensor> outputs = {loss.loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);

  auto ref = checkpoint::read_hf_tensors({dir + "/reference.safetensors"});
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  std::vector<double> positions(kB * kT), ones(kB * kT, 1.0);
  for (int64_t i = 0; i < kB * kT; ++i) positions[i] = static_cast<double>(i % kT);
  for (const std::vector<double>& v : {ref->at("input_ids").values(), ref->at("targets").values(), positions, ones}) {
    args.emplace_back(frontend::s32({kB, kT}), v);
  }
  auto out = interp::run(g.module(), args);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const double want = ref->at("loss").values()[0];
  EXPECT_NEAR((*out)[0].values()[0], want, 1e-5 * want);

  // Kiln's gradients in Hugging Face names and layouts, against the reference's.
  checkpoint::TensorMap kiln_grads;
  for (size_t i = 0; i < params.size(); ++i) kiln_grads[(*model)->params()[i].name] = (*out)[i + 1];
  auto hf_grads = checkpoint::deepseek_to_hf(kiln_grads, "");
  ASSERT_TRUE(hf_grads.ok()) << hf_grads.status().to_string();
  double worst = 0;
  int compared = 0;
  for (const auto& [name, got] : *hf_grads) {
    if (name.ends_with("e_score_correction_bias")) {
      for (double v : got.values()) EXPECT_EQ(v, 0.0) << name << " takes no gradient";
      continue;
    }
    ASSERT_TRUE(ref->count("grad." + name)) << name;
    const std::vector<double>& w = ref->at("grad." + name).values();
    double diff = 0, scale = 1e-12;
    for (size_t i = 0; i < w.size(); ++i) {
      diff = std::max(diff, std::abs(got.values()[i] - w[i]));
      scale = std::max(scale, std::abs(w[i]));
    }
    EXPECT_LT(diff / scale, 1e-4) << name;
    worst = std::max(worst, diff / scale);
    ++compared;
  }
  EXPECT_GT(compared, 40);
  std::printf("loss %.7f vs %.7f; %d gradients, worst relative difference %.3g\n", (*out)[0].values()[0], want,
              compared, worst);
}

}  // namespace
}  // namespace kiln::models
