#include "kiln/ir/opcode.h"

#include <array>

namespace kiln::ir {

namespace {
constexpr std::array<std::string_view, kNumOpcodes> kNames = {
#define KILN_OPCODE(enum_name, text) text,
#include "kiln/ir/opcodes.def"
#undef KILN_OPCODE
};
}  // namespace

std::string_view opcode_name(Opcode opcode) { return kNames[static_cast<int>(opcode)]; }

std::optional<Opcode> parse_opcode(std::string_view name) {
  for (int i = 0; i < kNumOpcodes; ++i) {
    if (kNames[i] == name) return static_cast<Opcode>(i);
  }
  return std::nullopt;
}

}  // namespace kiln::ir
