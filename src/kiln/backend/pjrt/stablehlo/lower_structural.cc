// Program structure: constants, iotas, tuples (several SSA values, never stablehlo.tuple) and
// fusions (their bodies inlined: XLA makes its own fusions).
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {

void register_structural_lowerings(LoweringTable& table) {
  using ir::Opcode;
  table.add_none(Opcode::kParameter,
                 "not an op: the emitter binds a computation's parameters to the function's arguments "
                 "(or an inlined body's operands)");
  table.add(Opcode::kConstant, [](LowerContext& ctx, const ir::Instr& instr, std::span<const Vals>) -> Result<Vals> {
    return Vals{ctx.w.literal(instr.literal())};
  });
  table.add(Opcode::kIota, [](LowerContext& ctx, const ir::Instr& instr, std::span<const Vals>) -> Result<Vals> {
    return Vals{ctx.w.op("stablehlo.iota", {}, tensor_type(instr.shape()),
                         fmt::format("iota_dimension = {} : i64", instr.attrs().get_int("dim")))};
  });
  table.add(Opcode::kTuple, [](LowerContext&, const ir::Instr& instr, std::span<const Vals> operands) -> Result<Vals> {
    Vals out;
    for (int i = 0; i < instr.num_operands(); ++i) {
      if (operands[i].size() != 1) return unimplemented("a tuple of tuples");
      out.push_back(operands[i][0]);
    }
    return out;
  });
  table.add(Opcode::kGetTupleElement,
            [](LowerContext&, const ir::Instr& instr, std::span<const Vals> operands) -> Result<Vals> {
              return Vals{operands[0].at(instr.attrs().get_int("index"))};
            });
  table.add(Opcode::kFusion, [](LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) -> Result<Vals> {
    return ctx.inline_computation(*instr.called().at(0), operands);
  });
}

}  // namespace kiln::backend::pjrt
