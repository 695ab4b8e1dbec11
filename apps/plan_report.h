// The prediction `kiln plan` makes of one config on one target, shared with `kiln compile`
// (which prints Kiln's plan beside XLA's own report for an ahead-of-time compile).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/plan/compiled_step.h"
#include "kiln/plan/cost_model.h"
#include "kiln/plan/target.h"

namespace kiln::app {

inline double gib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

struct Planned {
  config::Config config;
  plan::CompiledStep step;
  plan::PredictOptions options;  // as predicted (bf16_step from the config's dtype)
  plan::StepPrediction prediction;
  double model_tflops = 0;
};

// The config of `settings` compiled for its mesh (nothing allocated or run) and predicted on `target`.
Result<Planned> plan_config(const std::vector<std::string>& settings, const plan::Target& target,
                            const plan::PredictOptions& options);

nlohmann::ordered_json prediction_json(const Planned& pl, const plan::Target& target);
void print_prediction(const nlohmann::ordered_json& j);

}  // namespace kiln::app
