// bf16 weight copies as step state (bf16_weight_copy, docs/backend.md "bf16 mixed precision").
//
// With dtype=bfloat16 and float32 master weights the model casts every weight a matmul reads
// to bf16 (convert(param)). Done inside the step, that cast is a kernel of its own per weight
// per step, run again by the backward pass under remat. Instead the step program takes the
// bf16 copy of each such parameter as one more state argument, the forward and backward read
// it in place of the convert, and the AdamW update writes the next copy beside the next f32
// parameter (convert(p'), fused into the update's multi-output kernel). convert is
// deterministic, so the step computes bit for bit what it computed with the casts inside.
//
// The copies are derived state: never checkpointed, made by one cast of the parameters
// after initialisation and after a restore (refresh_weight_copies).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/frontend/graph.h"
#include "kiln/ir/instr.h"

namespace kiln::train {

class StepRunner;
struct StepProgram;

struct WeightCopy {
  int64_t param = 0;        // index of the f32 parameter in the step's parameter list
  frontend::Tensor copy;    // the bf16 parameter that replaced its converts
};

// After autodiff, before the optimizer: for every f32 parameter in `params` that has
// convert-to-bf16 users, adds a bf16 parameter "bf16_copy.<name>" (the parameter's logical
// axes, so it is sharded like it), makes every such convert's users read it and removes the
// converts. The new parameters are the graph's last ones, in `params` order.
std::vector<WeightCopy> attach_weight_copies(frontend::Graph& g, const std::vector<frontend::Tensor>& params);

// Renumbers the entry's parameters: those from `moved_begin` to the last move to `first`
// on, and those from `first` to `moved_begin` shift back behind them. Returns the renumbered
// module (a clone: a computation's parameter table is built as it is filled).
std::unique_ptr<ir::Module> move_params(std::unique_ptr<ir::Module> module, int64_t first, int64_t moved_begin);

// Writes every weight copy of `program` from the runner's current parameters: one cast
// (round to nearest even, as the step's convert) per local device's shard. A copy is sharded
// like its parameter (checked).
Status refresh_weight_copies(StepRunner& runner, const StepProgram& program);

}  // namespace kiln::train
