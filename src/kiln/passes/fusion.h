// FusionPass ("fusion"): groups elementwise ops into loop fusions, and reductions with the
// elementwise ops that feed them into input fusions, each outlined into a
// computation that a backend turns into one generated kernel, so intermediate values never
// travel through memory. Runs after gradients are built and after simplification/CSE (so it
// sees the final graph) and before scheduling and buffer assignment.
//
// A group grows from a root elementwise op backwards through producers that are elementwise
// with the root's dims and whose every user is already in the group (fusion never
// duplicates work), plus broadcasts of scalars, which are free to duplicate. Every
// elementwise op ends up in some fusion (alone if nothing joins it). Each decision not to
// fuse logs its reason at KILN_VLOG(2) ("fusion: %a not into %b: used outside the group").
//
// A group reads at most three results of library kernels (matmuls, grouped matmuls) of the
// loop's size: each is alive until the kernel runs, so a chain of adds over many of them (a
// weight's partial gradients, one per loss tile, summed before one reduce-scatter) becomes
// a chain of kernels that free what they add instead of one kernel that keeps all alive.
//
// An input fusion's root is a floating-point reduction over one contiguous block of dims;
// its group grows the same way over the reduction's input dims (RMSNorm's sum of squares,
// softmax denominators, gradient norms never materialize their input).
//
// A loop fusion also takes transposes, broadcasts, slices and pads (without interior
// padding) of any rank whose operand stays outside (a mapped read: the kernel loads the
// operand at another index, see backend/cpu/codegen/index_map.h; the kind is the op's
// registry field `mapped_read`), decided by the bytes it saves: a broadcast is copied into
// every group that reads it (it reads a smaller array than it writes; one that a non-fused op
// also reads stays for that op), and so is a window, a slice or a pad, when every reader
// takes it (a group reads the same elements from the operand as from the window, and the
// window is not written: RoPE's halves of q and k forward, and their gradients' pads
// backward; when an unfused op or an input fusion also reads it, it is written anyway and
// every reader reads it whole); a transpose joins only when every reader is in the group
// (then its copy is never written or read again: 2x its bytes saved; otherwise the copy is
// written anyway and a strided read saves nothing). An elementwise op whose value a mapped
// read reads does not join (its value would be needed at two indices). Input fusions read
// their operands at the loop index only: no mapped reads there.
//
// An integer iota over a loop fusion's dims joins it too, copied into every group that reads
// it like a scalar broadcast: its value is the loop index along its dim, which the kernel
// has anyway (a one-hot compare against it never materializes the iota).
//
// Multi-output fusion (a producer that others also read, merged into its consumer) is a pass
// of its own, run after this one: passes/multi_output_fusion.h. Not yet: reduction
// epilogues, mapped reads of computed values (index maps through elementwise chains). See
// docs/backend.md.
#pragma once

#include "kiln/ir/instr.h"
#include "kiln/passes/pass.h"

namespace kiln::passes {

// Whether `instr`, inside a loop fusion's body, reads its operand at another index: a
// transpose, a slice, a pad without interior padding, or a broadcast of a non-scalar (a
// scalar broadcast is the scalar itself).
bool is_mapped_read(const ir::Instr& instr);
// Whether `instr` is an iota a loop fusion computes from its loop index (s32 or u32).
bool is_fusible_iota(const ir::Instr& instr);

// The most library kernels' results (matmuls, grouped matmuls: registry kernel_class) of its
// loop's size one loop fusion reads (see above; multi-output fusion keeps to it too).
inline constexpr size_t kMaxLibraryInputs = 3;
bool is_library_result(const ir::Instr& instr);

class FusionPass : public Pass {
 public:
  // single_ops: every elementwise op becomes its own fusion (for debugging a bad fusion).
  explicit FusionPass(bool single_ops = false) : single_ops_(single_ops) {}
  std::string_view name() const override { return "fusion"; }
  Result<bool> run(ir::Module& module) override;

 private:
  bool single_ops_;
};

}  // namespace kiln::passes
