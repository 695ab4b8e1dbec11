// The trainer on a mesh of several devices: the step partitioned by the SPMD partitioner
// and run by every virtual device of the runtime world (train/step/sharded_step_runner.h), in
// one process or, under MPI, on every rank (TrainerOptions::world).
#include <fmt/format.h>

#include "kiln/runtime/world.h"
#include "kiln/train/memory_budget.h"
#include "kiln/train/step/sharded_step_runner.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

Status Trainer::make_sharded_runner(const config::Config& config, double* compile_s) {
  std::shared_ptr<runtime::World> world = options_.world;
  if (world == nullptr) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::World> made, runtime::make_world(config));
    world = std::move(made);
  }
  ShardedRunnerOptions options;
  KILN_ASSIGN_OR_RETURN(options.backend, backend::backend_for(config));
  options.compile = backend::CompileOptions::from_config(config);
  // The overlap limit may grow into spare device memory (memory/memory_stages.h) only when
  // every device is in this process: each rank of a multi-process run sees its own memory,
  // and ranks whose limits differed would order their collectives differently (MPI would
  // pair one rank's gather with another's reduce-scatter). Several processes keep the
  // default, one weight ahead.
  const config::Derived& d = config.derived();
  if (d.num_devices == d.local_devices) options.compile.device_memory_bytes = device_memory_budget(d.local_devices);
  backend::CompileReport report;
  KILN_ASSIGN_OR_RETURN(runner_, train::make_sharded_runner(config, program_, model_->params(), std::move(world),
                                                            options, &report));
  if (options.backend != &backend::interpreter_backend()) {
    *compile_s = report.compile_seconds;
    compile_report_ = report;
    print(fmt::format("partitioned the step over {} devices and compiled the per-device program in {:.3f} s: {} -> {} "
                      "instructions, {} fused loop kernels, {} GEMMs, {} ops on the reference-evaluation fallback",
                      config.derived().num_devices, report.compile_seconds, report.instructions_before,
                      report.instructions_after, report.fused_kernels, report.gemms, report.fallback_kernels));
  }
  print(fmt::format("backend: {}", runner_->name()));
  return ok_status();
}

}  // namespace kiln::train
