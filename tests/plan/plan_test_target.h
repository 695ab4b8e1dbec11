// The cost model tests' target and prediction helper (cost_model_test.cc,
// attention_cost_test.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/plan/cost_model.h"

namespace kiln::plan::testing {

// Round numbers: 1 TFLOP/s f32, 1 GB/s memory; gemm at half the peak plus 1 us; the
// intra link 1 GB/s and 10 us per hop, inter 0.1 GB/s and 100 us; 2 devices per node.
inline Target test_target() {
  Target t;
  t.name = "test";
  t.peak_tflops_f32 = 1;
  t.peak_tflops_bf16 = 2;
  t.memory_gib = 1;
  t.memory_bandwidth_gbs = 1;
  t.intra = {"intra", 1, 10};
  t.inter = {"inter", 0.1, 100};
  t.devices_per_node = 2;
  for (train::KernelKind k : kKernelClasses) t.rate(k) = {1.0, 0.0};
  t.rate(train::KernelKind::kGemm) = {0.5, 1.0};
  return t;
}

struct Predicted {
  std::unique_ptr<ir::Module> module;
  StepPrediction p;
};

inline Predicted predict(const std::string& text, const config::Mesh& mesh, const Target& t, PredictOptions o = {}) {
  auto m = ir::parse_module(text);
  KILN_CHECK(m.ok()) << m.status().to_string();
  std::vector<const ir::Instr*> schedule;
  for (const auto& instr : (*m)->entry()->instructions()) schedule.push_back(instr.get());
  Predicted r{std::move(*m), {}};
  r.p = predict_step(schedule, mesh, t, o);
  return r;
}

}  // namespace kiln::plan::testing
