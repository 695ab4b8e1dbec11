// Runs the training step on a mesh of devices: the step program is partitioned once by
// the SPMD partitioner (spmd/partitioner.h) into the per-device program, and every
// virtual device of the runtime world runs it (on the interpreter or compiled) on its own
// shard of the state and of the batch, with the collectives the partitioner inserted.
// To the trainer it is one StepRunner on global values: set_arg() splits a global value
// into the devices' shards, arg() assembles it back, and the metrics are the (replicated)
// values of device 0.
//
// Under MPI (an MpiWorld of several ranks) every rank runs one such runner on its own local
// devices (global device id = world.first_device() + local index) and the trainer on every
// rank makes the same calls in the same order: set_arg() takes the same global value on every
// rank and keeps only the local devices' shards; arg() is collective (every local device
// all-gathers its shard over the whole mesh) and returns the global value on every rank; the
// metrics are local device 0's, replicated and so identical on every rank. Checkpoints do
// not go through arg(): arg_bytes()/set_arg_bytes() read and write one local device's shard
// (layout() and arg_sharding() say where it lies), so each rank saves and restores its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/runtime/world.h"
#include "kiln/spmd/partitioner.h"
#include "kiln/train/step/step_runner.h"

namespace kiln::train {

struct ShardedRunnerOptions {
  // Runs each device's program (backend=cpu); the interpreter backend runs the reference
  // interpreter's runner (ir::Literal state). Never null.
  const backend::Backend* backend = &backend::cpu_backend();
  backend::CompileOptions compile;      // for the per-device program
};

// The state and batch shardings of `program` from the config's logical axis rules:
// parameters and their moments by each ParamSpec's logical axes, the batch over the mesh
// axes that `activation_batch` resolves to, the step and metrics replicated.
Result<spmd::PartitionOptions> step_partition_options(const config::Config& config, const StepProgram& program,
                                                      const std::vector<models::ParamSpec>& params);

// The partitioned step, as `kiln compile` and the runner use it.
Result<spmd::PartitionResult> partition_step(const config::Config& config, const StepProgram& program,
                                             const std::vector<models::ParamSpec>& params);

// `world` must hold the mesh's devices: all of them (one process), or ranks × local_devices
// of them over MPI. Shared: the application keeps it too (MpiWorld::abort_job on errors).
Result<std::unique_ptr<StepRunner>> make_sharded_runner(const config::Config& config, const StepProgram& program,
                                                        const std::vector<models::ParamSpec>& params,
                                                        std::shared_ptr<runtime::World> world,
                                                        const ShardedRunnerOptions& options,
                                                        backend::CompileReport* report);

}  // namespace kiln::train
