// C++ source for loop fusions. The elemental expression comes from each op's registry
// snippet; the loop plan (here: one flat loop over the result, split across threads by
// OpenMP, vectorized by the compiler) is chosen separately and never changes the
// expression (CONVENTIONS example 7).
//
// Generated function, for a fusion with n operands (count: the result's elements):
//   extern "C" void <name>(const void* const* in, void* out, int64_t count);
// A multi-output fusion (tuple root) gets `out` as an array of output pointers, and count
// is the first output's elements (all outputs of a loop fusion share the loop's dims).
#pragma once

#include <string>

#include "kiln/ir/instr.h"

namespace kiln::backend::cpu {

// The helpers every kernel source starts with (bf16 loads/stores, saturating converts).
const std::string& kernel_prelude();

// The body of one loop fusion as a C++ function named `name`.
std::string loop_kernel_source(const ir::Computation& body, const std::string& name);
// An input fusion (elementwise ops ending in a reduction over a contiguous block of dims):
// the loop nest reads the input as [outer, reduced, inner] and never materializes it;
// cut into work items as reduce_plan.h says; extra outputs are stored at each index.
std::string input_kernel_source(const ir::Computation& body, const std::string& name);
// Either of the two, by the body's root.
std::string fusion_kernel_source(const ir::Computation& body, const std::string& name);

// Name derived from the source itself, so identical fusions (the same code in every layer)
// share one kernel.
std::string kernel_name_for(const ir::Computation& body);

}  // namespace kiln::backend::cpu
