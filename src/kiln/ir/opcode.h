// The Opcode enum, generated from ir/opcodes.def (the single opcode list).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::ir {

enum class Opcode : uint16_t {
#define KILN_OPCODE(enum_name, text) k##enum_name,
#include "kiln/ir/opcodes.def"
#undef KILN_OPCODE
};

inline constexpr int kNumOpcodes = 0
#define KILN_OPCODE(enum_name, text) +1
#include "kiln/ir/opcodes.def"
#undef KILN_OPCODE
    ;

std::string_view opcode_name(Opcode opcode);
std::optional<Opcode> parse_opcode(std::string_view name);

}  // namespace kiln::ir
