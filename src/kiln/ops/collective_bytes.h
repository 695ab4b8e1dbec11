// The bytes one device moves for a collective instruction, counted one way everywhere
// (`kiln compile`'s report, the partitioner's statistics, `kiln plan`'s cost model): what
// arrives for an all-gather, what is summed for a reduce-scatter or an all-reduce, the
// larger buffer of a ragged exchange (its worst case). An async start counts as the
// collective it begins.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/ir/instr.h"

namespace kiln::ops {

// nullopt for an instruction that moves nothing between devices (async dones included).
std::optional<int64_t> collective_bytes(const ir::Instr& instr);

}  // namespace kiln::ops
