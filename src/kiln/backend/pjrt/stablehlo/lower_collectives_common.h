// What the collective lowerings share (lower_collectives.cc, lower_collectives_ragged.cc):
// replica groups from the mesh, a few op shapes, and the block layout of ragged rows, which
// grouped matmul (lower_grouped_matmul.cc) reads the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {

// XLA's `replica_groups` of a collective or shard_slice: the group of every device
// (config::Mesh::group over the instruction's `mesh_axes`, members in rank order, the order
// Kiln concatenates chunks in), each group once. The program runs in replica mode with one
// replica per mesh device, so a device id is a replica id. Fails when the mesh makes groups
// of another size than the instruction's `group_size`.
Result<std::vector<std::vector<int64_t>>> replica_groups(const ir::Instr& instr, const config::Mesh& mesh);

// For shard_slice: per device (replica id), its rank in its group.
std::vector<int64_t> group_ranks(const ir::Instr& instr, const config::Mesh& mesh);

// "replica_groups = dense<...> : tensor<NxGxi64>" for a collective's properties.
std::string replica_groups_property(const std::vector<std::vector<int64_t>>& groups);

// "[0, 2]": the dimension lists of #stablehlo.dot and #stablehlo.gather.
std::string dim_list(std::span<const int64_t> dims);

// Small op shapes.
Val iota(Writer& w, ir::DType dtype, std::span<const int64_t> dims, int64_t dim);
Val select(Writer& w, const Val& pred, const Val& on_true, const Val& on_false);
Val transpose(Writer& w, const Val& x, ir::DType dtype, std::span<const int64_t> dims, std::span<const int64_t> permutation);

// Rows laid out in consecutive blocks, the layout of ragged_all_to_all and grouped matmul:
// per leading index, block g holds sizes[.., g] rows after block g-1; negative sizes count as
// 0 and blocks are cut at `rows`. `sizes` is s32 [lead.., G] (`dims`); begin and end are s32
// of the same shape, block g being rows [begin, end). Exact in s32 (sizes are clamped to
// [0, rows] before the running sum, which does not change the cut blocks; G * rows must fit).
struct RaggedBounds {
  Val begin, end;
};
Result<RaggedBounds> ragged_bounds(Writer& w, const Val& sizes, std::span<const int64_t> dims, int64_t rows);

// ragged_all_to_all and its async start (lower_collectives_ragged.cc).
Result<Vals> lower_ragged_all_to_all(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands);

}  // namespace kiln::backend::pjrt
