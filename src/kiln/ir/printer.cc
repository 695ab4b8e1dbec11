#include "kiln/ir/printer.h"

#include "kiln/base/check.h"

namespace kiln::ir {

namespace {

std::string axes_to_string(const std::vector<std::string>& axes) {
  std::string out = "{";
  for (size_t i = 0; i < axes.size(); ++i) out += (i ? "," : "") + (axes[i].empty() ? std::string("_") : axes[i]);
  return out + "}";
}

}  // namespace

std::string print_instr(const Instr& instr) {
  std::string out = "%" + instr.id() + " = " + instr.shape().to_string() + " " +
                    std::string(opcode_name(instr.opcode())) + "(";
  if (instr.has_literal()) {
    out += instr.literal().values_to_string();
  } else {
    for (int i = 0; i < instr.num_operands(); ++i) out += (i ? ", %" : "%") + instr.operand(i)->id();
  }
  out += ")";
  for (const auto& [key, value] : instr.attrs().map()) out += ", " + key + "=" + attr_value_to_string(value);
  const Metadata& meta = instr.meta();
  if (!instr.called().empty()) {
    out += ", calls={";
    for (size_t i = 0; i < instr.called().size(); ++i) out += (i ? ",@" : "@") + instr.called()[i]->name();
    out += "}";
  }
  if (!meta.name.empty()) out += ", name=" + quote_string(meta.name);
  if (!meta.loc.empty()) out += ", loc=" + quote_string(meta.loc);
  if (!meta.axes.empty()) out += ", axes=" + axes_to_string(meta.axes);
  if (meta.sharding) out += ", sharding=" + meta.sharding->to_string();
  if (meta.stage != 0) out += ", stage=" + std::to_string(meta.stage);
  return out;
}

std::string print_computation(const Computation& computation) {
  bool is_entry = computation.parent() && computation.parent()->entry() == &computation;
  std::string out = (is_entry ? "ENTRY computation @" : "computation @") + computation.name() + " {\n";
  for (const auto& instr : computation.instructions()) {
    out += instr.get() == computation.root() ? "  ROOT " : "  ";
    out += print_instr(*instr) + "\n";
  }
  return out + "}\n";
}

std::string print_module(const Module& module) {
  std::string out = "module @" + module.name() + "\n";
  // Called computations first, the entry last, so the text reads bottom-up like HLO.
  for (const auto& c : module.computations()) {
    if (c.get() != module.entry()) out += "\n" + print_computation(*c);
  }
  if (module.entry()) out += "\n" + print_computation(*module.entry());
  return out;
}

}  // namespace kiln::ir
