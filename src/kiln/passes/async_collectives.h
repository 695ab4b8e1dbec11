// AsyncCollectivesPass ("async_collectives"): every all_gather, reduce_scatter, all_reduce
// and ragged_all_to_all of the entry computation becomes a start/done pair
// (ops/async_collective_ops.cc), as XLA's async collective creator does:
//     %g = f32[8,6] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
// ->  %g.start = f32[8,6] all_gather_start(%w), dim=0, group_size=2, mesh_axes=fsdp
//     %g = f32[8,6] all_gather_done(%g.start, %w)
// The pair computes exactly what the collective did; only the scheduler's freedom changes:
// sched/latency_hiding.h then moves each start early and each done late, so compute runs
// while the data moves. Both halves keep the collective's metadata (its name, so recomputed
// all-gathers stay "*.regather" and are scheduled lazily).
// A ragged start takes x and its sizes, its done (start, x): the sizes are read when the
// exchange is posted.
//
// Place: last in the backend's pipeline, after fusion: the pair is not fusible and nothing
// after it should see two instructions where one collective was.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class AsyncCollectivesPass : public Pass {
 public:
  std::string_view name() const override { return "async_collectives"; }
  Result<bool> run(ir::Module& module) override;
};

}  // namespace kiln::passes
