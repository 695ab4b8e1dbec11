// CPU kernels: one callable per instruction, built once at compile time (strides, plans
// and library descriptors precomputed) and called every step on the operands' values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "kiln/backend/buffer.h"
#include "kiln/ir/instr.h"

namespace kiln::backend::cpu {

// inputs: the operands' values; output: the storage buffer assignment planned, one Buffer
// per array leaf (one for an array, one per element for a tuple). A kernel writes into it;
// one that replaces a Buffer with storage of its own has the result copied into the plan
// (cpu/memory/memory_plan.h), which costs a copy. Views replace out[0] with the operand's storage.
using Kernel = std::function<void(std::span<const Value* const> inputs, Value& output)>;

// Builds the kernel for one instruction of a given opcode.
using KernelFactory = std::function<Kernel(const ir::Instr&)>;

// Hand-written native kernels by opcode (a table, filled by the files that implement them;
// no switch). Returns null when an opcode has none for this instruction's dtypes: the
// executable then falls back to the op's reference evaluation.
const KernelFactory* find_native_kernel(const ir::Instr& instr);

// The reference-evaluation kernel: converts to literals, runs OpDef::eval, converts back.
// Correct for every op; slow. Counted in the compile report.
Kernel fallback_kernel(const ir::Instr& instr);

// Registration from the kernel files (native_kernels.cc, gemm.cc).
struct NativeKernelEntry {
  ir::Opcode opcode;
  // Whether this kernel handles the instruction (usually a dtype check).
  std::function<bool(const ir::Instr&)> accepts;
  KernelFactory make;
  // Bytes of scratch the kernel allocates for itself while it runs, outside the planned
  // arena (packed tiles, per-thread accumulators, widened copies); empty: none. The memory
  // plan counts the largest as planned temporaries (cpu/memory/memory_plan.h).
  std::function<int64_t(const ir::Instr&)> scratch_bytes;
};
// The table's entry for `instr` (null: none, as find_native_kernel).
const NativeKernelEntry* find_native_entry(const ir::Instr& instr);

// The scratch of a kernel that computes in f32: each bf16 operand widened, and a bf16 result
// computed in f32 first (the GEMM and grouped-matmul kernels).
int64_t widened_f32_bytes(const ir::Instr& instr);
std::vector<NativeKernelEntry> data_movement_kernels();
std::vector<NativeKernelEntry> reduction_kernels();
std::vector<NativeKernelEntry> gemm_kernels();
std::vector<NativeKernelEntry> attention_kernels();
std::vector<NativeKernelEntry> grouped_matmul_kernels();
std::vector<NativeKernelEntry> collective_kernels();
std::vector<NativeKernelEntry> ragged_all_to_all_kernels();
std::vector<NativeKernelEntry> sort_kernels();     // sort, topk
std::vector<NativeKernelEntry> integer_kernels();  // s32 reductions and scatter_add
std::vector<NativeKernelEntry> rng_kernels();

}  // namespace kiln::backend::cpu
