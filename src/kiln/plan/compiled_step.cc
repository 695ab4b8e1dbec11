#include "kiln/plan/compiled_step.h"

#include "kiln/train/step/sharded_step_runner.h"

namespace kiln::plan {

Result<CompiledStep> compile_step(const config::Config& cfg, const std::string& dump_dir) {
  CompiledStep c;
  KILN_ASSIGN_OR_RETURN(c.model, models::make_model(cfg));
  KILN_ASSIGN_OR_RETURN(train::StepProgramOptions step_options, train::StepProgramOptions::from_config(cfg));
  KILN_ASSIGN_OR_RETURN(c.program, train::build_step_program(*c.model, step_options));
  c.mesh = cfg.derived().mesh;
  // On a mesh, what each device compiles and runs is the partitioned step.
  if (cfg.derived().num_devices > 1) {
    KILN_ASSIGN_OR_RETURN(spmd::PartitionResult partition, train::partition_step(cfg, c.program, c.model->params()));
    c.program.module = std::move(partition.module);
  }
  backend::CompileOptions options = backend::CompileOptions::from_config(cfg);
  if (!dump_dir.empty()) options.dump_dir = dump_dir;
  // As the trainer runs it: the state (outputs 0 .. num_state) updated in place.
  for (int64_t i = 0; i < c.program.num_state(); ++i) options.donated.push_back({i, i});
  options.mesh = c.mesh;  // a PJRT backend compiles one program for every replica of it
  KILN_ASSIGN_OR_RETURN(const backend::Backend* backend, backend::backend_for(cfg));
  KILN_ASSIGN_OR_RETURN(c.executable, backend->compile(*c.program.module, options));
  const backend::CompileReport& r = c.executable->report();

  const train::StepProgram& program = c.program;
  const ir::Computation& entry = *program.module->entry();
  auto bytes_of = [&](int64_t arg) { return entry.param(static_cast<int>(arg))->shape().byte_size(); };
  StepMemory& m = c.memory;
  for (int64_t i = 0; i < program.num_params; ++i) {
    m.parameters += bytes_of(program.param_arg(i));
    m.optimizer_state += bytes_of(program.mu_arg(i)) + bytes_of(program.nu_arg(i));
  }
  m.optimizer_state += bytes_of(program.step_arg());
  // bf16_weight_copy: state too, written by the optimizer.
  for (int64_t k = 0; k < program.num_copies(); ++k) m.bf16_weight_copies += bytes_of(program.copy_arg(k));
  // From the buffer assignment: activations are the peak of the arena bytes the backward
  // pass reads that no gradient wrote (the forward's saved values, and what remat
  // recomputes); temporaries everything else one run adds (the rest of the arena's peak,
  // outputs of their own, kernel scratch, constants, the batch). docs/backend.md.
  m.activations = r.saved_activation_bytes;
  m.temporaries = r.planned_peak_bytes - m.parameters - m.optimizer_state - m.bf16_weight_copies - m.activations;
  return c;
}

}  // namespace kiln::plan
