// The bytes one device moves for a collective instruction, counted one way everywhere
// (`kiln compile`'s report, the partitioner's statistics, `kiln plan`'s cost model): what
// arrives for an all-gather, what is summed for a reduce-scatter or an all-reduce, the
// larger buffer of a ragged exchange (its worst case). An async start counts as the
// collective it begins.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/ir/instr.h"

namespace kiln::ops {

// nullopt for an instruction that moves nothing between devices (async dones included).
std::optional<int64_t> collective_bytes(const ir::Instr& instr);

struct CollectiveStats {
  int64_t count = 0;
  int64_t bytes = 0;  // per device per run: collective_bytes summed
};

// The collectives of a (per-device) module's entry computation by opcode name.
std::map<std::string, CollectiveStats> count_collectives(const ir::Module& module);

}  // namespace kiln::ops
