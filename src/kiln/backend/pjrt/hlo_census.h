// XLA's own census of an optimized program: what `kiln compile` prints beside Kiln's plan for an
// ahead-of-time compile (how many kernels XLA made, which collectives it runs and how many as
// async start/done pairs, which library calls). It reads the serialized xla.HloModuleProto that
// PJRT_Executable_OptimizedProgram returns: a protobuf wire-format reader for the few fields it
// needs (module: computations; computation: id, instructions, is_fusion_computation;
// instruction: opcode, fusion_kind, custom_call_target, called_computation_ids), written here
// instead of linking protobuf with XLA's .proto files for five fields.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::backend::pjrt {

struct HloCensus {
  // What runs, counted from the entry computation through control flow (while, conditional,
  // call) and async wrappers, not inside fusions or reducers: each fusion is one kernel.
  int64_t instructions = 0;
  int64_t fusions = 0;
  std::map<std::string, int64_t> fusion_kinds;  // "kLoop", "kInput", "kOutput", "kCustom" -> count
  int64_t gemms = 0;          // kernels with a dot or convolution inside (fusions, library GEMM calls)
  int64_t grouped_matmuls = 0;  // kernels with a ragged-dot inside
  int64_t attention = 0;      // fused attention library calls (cuDNN's fMHA)
  // Collective operations by XLA's name ("all-gather", "reduce-scatter", "all-reduce",
  // "all-to-all", "ragged-all-to-all", "collective-permute"), a start/done pair counted once.
  std::map<std::string, int64_t> collectives;
  std::map<std::string, int64_t> async_collectives;  // of those, run as async start/done pairs
  std::map<std::string, int64_t> custom_calls;       // by target
  int64_t while_loops = 0;
};

// The xla.HloModuleProto inside a serialized xla.HloModuleProtoWithConfig (its field 1): what
// some plugins return as the optimized program ("hlo_with_config").
Result<std::string> hlo_module_of(std::string_view serialized_module_with_config);

// The census of a serialized xla.HloModuleProto. Errors: not a protobuf of that shape, or no
// entry computation.
Result<HloCensus> hlo_census(std::string_view serialized_module);

}  // namespace kiln::backend::pjrt
