// The SPMD partitioner: turns the global training step into the one program every device
// runs on its own shard of the data, as GSPMD does for MaxText. It propagates shardings
// (propagation.h), then rewrites each instruction on per-device (local) shapes and inserts
// the collectives the layouts require:
//   - an operand split differently from what its op needs is all-gathered along the
//     dimension (an FSDP weight before its matmul) or sliced locally (shard_slice);
//   - a contraction or sum over a split dimension leaves partial sums, resolved by a
//     reduce-scatter onto the dimension its user wants split over the same axes (a weight
//     gradient onto its FSDP shard) and an all-reduce over the remaining axes (data
//     parallelism, tensor-parallel partial sums, the global gradient norm);
//   - ops without a per-dimension rule (sort, top-k, scatter, grouped matmul, attention,
//     ...) run on replicated operands.
// Entry parameters keep their indices and take the local shapes of their shardings; the
// root tuple's elements are produced in the requested output shardings.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"
#include "kiln/spmd/logical_rules.h"
#include "kiln/spmd/propagation.h"

namespace kiln::spmd {

struct PartitionOptions {
  config::Mesh mesh;
  LogicalRules rules;      // for values that carry logical axis names
  PropagationSeeds seeds;  // parameter and output shardings (missing: decided by propagation)
};

struct PartitionResult {
  std::unique_ptr<ir::Module> module;        // the per-device program
  std::vector<ir::Sharding> param_shardings;   // by entry parameter index
  std::vector<ir::Sharding> output_shardings;  // by root tuple element
  std::vector<std::string> notes;            // decisions worth telling a user (--v=1)
};

// A one-device mesh returns a copy of the module with replicated shardings. The result is
// not cleaned up: resharding leaves duplicate gathers and dead slices that the compile
// pipeline's cleanups remove (passes::default_pipeline), so count its collectives after those.
Result<PartitionResult> partition(const ir::Module& module, const PartitionOptions& options);

// The block of `global` that `device` holds under `sharding` (shard_index order).
ir::Literal shard_literal(const ir::Literal& global, const ir::Sharding& sharding, const config::Mesh& mesh, int64_t device);
// The inverse: the global value from every device's block (devices in id order).
ir::Literal assemble_literal(const std::vector<const ir::Literal*>& shards, const ir::Shape& global,
                             const ir::Sharding& sharding, const config::Mesh& mesh);

}  // namespace kiln::spmd
