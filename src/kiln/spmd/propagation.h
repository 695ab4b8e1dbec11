// Sharding propagation: chooses a Spec for every array value of a global module, from
// seeds (entry parameters and outputs: from the logical axis rules of the state and the
// batch) and constraints (values whose metadata carries logical axis names). Like GSPMD it
// runs forward and backward over the program until nothing changes:
//   forward   a value takes the split dimensions of its operands through the op's
//             split map (ops::OpDef::split_map, set for the ops whose mapped dimensions
//             are independent: elementwise, broadcast, transpose, reshape, reductions,
//             slices, pads, concatenation, gather, scatter_add, dot_general); a value that would only
//             be a partial sum (a contraction over a split dimension) waits for its users;
//   backward  a value nobody decided takes the most split request of its users, so a
//             weight gradient is produced in the layout of its parameter's optimizer
//             update (reduce-scatter rather than all-reduce).
// Whatever is left is replicated. Tuple-valued ops with independent rows (attention, sort,
// top-k: OpDef::batch_rows) keep a split batch; the collectives and grouped matmuls have
// their own rules; other ops are computed replicated.
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/spmd/logical_rules.h"
#include "kiln/spmd/sharding_spec.h"

namespace kiln::spmd {

struct PropagationSeeds {
  std::vector<std::optional<ir::Sharding>> params;   // by entry parameter index
  std::vector<std::optional<ir::Sharding>> outputs;  // by root tuple element
};

// Whether the op runs per block along its registry split map (OpDef::split_map: elementwise
// and layout ops, reductions, gather, scatter_add, dot_general); the others have their own
// rules or run replicated.
bool has_passthrough(const ir::Instr& instr);

// For each operand, for each of its dimensions, the result dimension whose split it shares
// (-1: none). Only dimensions the op treats independently (equal sizes, element i of the
// result along it reads element i of the operand) are mapped.
std::vector<std::vector<int>> passthrough_map(const ir::Instr& instr);

// A scatter_add into zeros whose updates are split along their index dimensions (an
// embedding's gradient: the hidden-state gradient split over the batch) scatters each
// device's own rows into a zero table: the result is a partial sum over those axes, added up
// where its users want it (a reduce-scatter onto the table's split) instead of the updates
// being all-gathered whole, whose size grows with the device count. Chosen when the table is
// smaller than the whole updates. The (updates dimension, axes) pairs it keeps split; empty
// when the rule does not apply.
std::vector<std::pair<int, Axes>> scatter_add_partial_dims(const ir::Instr& instr, const Spec& updates);

std::unordered_map<const ir::Instr*, Spec> propagate(const ir::Computation& entry, const config::Mesh& mesh,
                                                     const LogicalRules& rules, const PropagationSeeds& seeds,
                                                     std::vector<std::string>* notes);

}  // namespace kiln::spmd
