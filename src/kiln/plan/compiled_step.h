// The training step compiled for one device of the config's mesh, as the trainer compiles
// it (partitioned, the state donated in place), with nothing allocated or run: what
// `kiln compile` reports and `kiln plan` costs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/config/mesh.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"

namespace kiln::plan {

// Bytes one device holds for the step (the memory plan's peak, split by what it holds).
struct StepMemory {
  int64_t parameters = 0, optimizer_state = 0, bf16_weight_copies = 0, activations = 0, temporaries = 0;
  int64_t total() const { return parameters + optimizer_state + bf16_weight_copies + activations + temporaries; }
};

struct CompiledStep {
  std::unique_ptr<models::Model> model;
  train::StepProgram program;  // its module is the per-device program on a mesh
  std::unique_ptr<backend::Executable> executable;
  config::Mesh mesh;
  StepMemory memory;
};

// dump_dir: "" or where the optimized IR, buffer assignment and kernel sources go.
Result<CompiledStep> compile_step(const config::Config& config, const std::string& dump_dir = "");

}  // namespace kiln::plan
