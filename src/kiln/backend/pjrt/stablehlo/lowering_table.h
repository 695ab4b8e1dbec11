// How each Kiln opcode becomes StableHLO: one entry per opcode, filled by one register
// function per op family (lower_*.cc), like the op registry itself (ops/registry.h). An
// opcode that has no lowering says why (`no_lowering_reason`), and the every-op test walks
// the opcode list and fails on one that has neither.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/ir/opcode.h"

namespace kiln::backend::pjrt {

using Vals = std::vector<Val>;  // one per tuple element (one for an array)

struct LowerContext {
  Writer& w;
  const EmitOptions& options;
  // Emits `computation` inline on `args` (one Vals per parameter), returning its root's
  // values: fusions are their bodies inlined.
  std::function<Result<Vals>(const ir::Computation& computation, std::span<const Vals> args)> inline_computation;
};

// Writes the instruction's ops with ctx.w and returns its values (one per tuple element).
// `operands[i]` are operand i's values. An error is user-facing (an op the plugin cannot run
// in this form); the emitter adds the op and its source line.
using LowerFn = std::function<Result<Vals>(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands)>;

struct Lowering {
  LowerFn lower;                   // null when the op has no lowering
  std::string no_lowering_reason;  // why not (non-empty exactly when lower is null)
};

class LoweringTable {
 public:
  void add(ir::Opcode opcode, LowerFn lower);
  void add_none(ir::Opcode opcode, std::string reason);
  // The entry of `opcode`, or null when nobody registered one (a bug the every-op test catches).
  const Lowering* find(ir::Opcode opcode) const;

 private:
  std::vector<Lowering> entries_ = std::vector<Lowering>(ir::kNumOpcodes);
  std::vector<bool> present_ = std::vector<bool>(ir::kNumOpcodes, false);
};

// The table, built on first use from every family's register function.
const LoweringTable& lowerings();

// Operand i's array value (checked to be one value).
const Val& array_operand(std::span<const Vals> operands, int i);

// Families (one file each).
void register_structural_lowerings(LoweringTable& table);
void register_elementwise_lowerings(LoweringTable& table);
void register_shape_lowerings(LoweringTable& table);
void register_reduce_lowerings(LoweringTable& table);
void register_dot_lowerings(LoweringTable& table);
void register_index_lowerings(LoweringTable& table);
void register_sort_lowerings(LoweringTable& table);
void register_rng_lowerings(LoweringTable& table);
void register_attention_lowerings(LoweringTable& table);
void register_grouped_matmul_lowerings(LoweringTable& table);
void register_collective_lowerings(LoweringTable& table);

}  // namespace kiln::backend::pjrt
