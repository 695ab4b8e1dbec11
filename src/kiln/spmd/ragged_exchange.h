// The partitioner's rule for ragged_all_to_all (ops/ragged_all_to_all_op.cc): a global
// exchange whose entries (dimension 0 of x and sizes) are split one per device becomes the
// per-device ragged all-to-all over the mesh axes that number the members of each group.
//
// Global entry p = q * G + s is member s of group q. When dimension 0 is split over axes
// A (shard index row-major over A, one entry per device), the devices of group q are
// exactly those that differ only along the trailing axes of A whose sizes multiply to G:
// so the exchange runs over those axes (`mesh_axes`), each device holding its own entry,
// and the result keeps dimension 0 split over A. With the default logical rules the batch
// is split over (data, fsdp, expert), so a group of G = |expert| entries exchanges over
// the expert axis. Any other layout runs the op on replicated operands (correct, slower).
#pragma once

#include <optional>

#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"
#include "kiln/spmd/sharding_spec.h"

namespace kiln::spmd {

// The exchange axes for `instr` (a global ragged_all_to_all) when its entries are split
// over `split`; nullopt when that layout does not give one entry per device or the
// trailing axes do not multiply to group_size.
std::optional<Axes> ragged_exchange_axes(const ir::Instr& instr, const Axes& split, const config::Mesh& mesh);

// The layout of the result (and of both operands): dimension 0 split over `split`.
Spec ragged_exchange_spec(const ir::Instr& instr, const Axes& split);

// The batched grouped matmul and its weight gradient (ops/grouped_matmul_ops.cc: entry p
// uses expert block p mod B, B = E / Gl) with their entries split one per device over
// `split`: a device's block is its coordinate along the trailing axes of `split` whose
// sizes multiply to B, so with the experts (dimension 0 of the weights) split over those
// axes every device holds exactly the weights its entry uses, and the per-device op is the
// same op with B = 1. Returns those axes, or nullopt (then the op runs replicated). The
// weight gradient's per-device result is that block, a partial sum over the other axes of
// `split` (the entries of other devices that share the block).
std::optional<Axes> expert_block_axes(const ir::Instr& instr, const Axes& split, const config::Mesh& mesh);

}  // namespace kiln::spmd
