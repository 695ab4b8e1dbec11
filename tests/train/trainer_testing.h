// Trainer helpers the training and checkpoint tests share: a trainer built from a config
// that prints and writes nothing but checkpoints, and the per-step losses of a run.
#pragma once

#include <memory>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"

namespace kiln::train::testing {

// The config's model; no console output, no metrics file.
inline std::unique_ptr<Trainer> quiet_trainer(const config::Config& cfg) {
  auto model = models::make_model(cfg);
  KILN_CHECK(model.ok()) << model.status().to_string();
  TrainerOptions options;
  options.console = nullptr;
  options.write_metrics_file = false;
  auto trainer = Trainer::create(cfg, std::move(*model), options);
  KILN_CHECK(trainer.ok()) << trainer.status().to_string();
  return std::move(*trainer);
}

// The loss of every step the trainer ran, in order.
inline std::vector<double> step_losses(const Trainer& t) {
  std::vector<double> out;
  for (const StepRecord& r : t.history()) out.push_back(r.loss);
  return out;
}

}  // namespace kiln::train::testing
