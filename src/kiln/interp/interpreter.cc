#include "kiln/interp/interpreter.h"
#include "kiln/interp/instruction_hook.h"

#include <chrono>
#include <unordered_map>

#include "kiln/base/check.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/registry.h"

namespace kiln::interp {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<ir::Literal> evaluate_hooked(const ir::Computation& computation, std::span<const ir::Literal> args,
                                    const InstructionHook& hook) {
  if (static_cast<int>(args.size()) != computation.num_params()) {
    return invalid_argument("@{} takes {} arguments, got {}", computation.name(), computation.num_params(), args.size());
  }
  for (int i = 0; i < computation.num_params(); ++i) {
    const ir::Shape& want = computation.param(i)->shape();
    if (args[i].shape() != want) {
      return invalid_argument("argument {} of @{} has shape {}, expected {}", i, computation.name(),
                              args[i].shape().to_string(), want.to_string());
    }
  }
  // Values die after their last use, so peak memory follows the program's live set.
  const auto& instrs = computation.instructions();
  std::unordered_map<const ir::Instr*, size_t> last_use;
  for (size_t i = 0; i < instrs.size(); ++i) {
    for (const ir::Instr* o : instrs[i]->operands()) last_use[o] = i;
  }
  std::unordered_map<const ir::Instr*, ir::Literal> values;
  std::vector<const ir::Literal*> operand_values;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const ir::Instr& instr = *instrs[i];
    switch (instr.opcode()) {
      case ir::Opcode::kParameter:
        values[&instr] = args[instr.attrs().get_int("index")];
        break;
      case ir::Opcode::kConstant:
        values[&instr] = instr.literal();
        break;
      default: {
        const ops::OpDef& def = ops::op_def(instr.opcode());
        if (def.device_dependent) KILN_RETURN_IF_ERROR(ops::check_collective_group(instr));
        operand_values.clear();
        for (const ir::Instr* o : instr.operands()) operand_values.push_back(&values.at(o));
        const int64_t begin_ns = hook ? now_ns() : 0;
        ir::Literal result = def.eval(instr, operand_values);
        if (hook) hook(instr, begin_ns, now_ns());
        KILN_CHECK(result.shape() == instr.shape())
            << "evaluation produced " << result.shape().to_string() << " for " << instr.to_string();
        values[&instr] = std::move(result);
      }
    }
    for (const ir::Instr* o : instr.operands()) {
      if (last_use.at(o) == i && o != computation.root()) values.erase(o);
    }
  }
  return std::move(values.at(computation.root()));
}

}  // namespace

Result<ir::Literal> evaluate(const ir::Computation& computation, std::span<const ir::Literal> args) {
  return evaluate_hooked(computation, args, nullptr);
}

Result<std::vector<ir::Literal>> run_with_hook(const ir::Module& module, std::span<const ir::Literal> args,
                                               const InstructionHook& hook) {
  KILN_ASSIGN_OR_RETURN(ir::Literal root, evaluate_hooked(*module.entry(), args, hook));
  if (!root.shape().is_tuple()) return std::vector<ir::Literal>{std::move(root)};
  return root.elements();
}

Result<std::vector<ir::Literal>> run(const ir::Module& module, std::span<const ir::Literal> args) {
  return run_with_hook(module, args, nullptr);
}

}  // namespace kiln::interp
