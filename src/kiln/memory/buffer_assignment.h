// Buffer assignment: where every logical buffer of a scheduled computation lives at run
// time. Computed buffers share ONE arena, each at an offset, reused by buffers whose
// lifetimes do not overlap (greedy by size, best fit, as XLA's heap simulator); an
// elementwise fusion may write its output over an operand it is the last reader of
// (in place); outputs the caller donates (the training state) are written into the
// argument's own storage, so the state is updated in place; other outputs get storage of
// their own, since the caller keeps them after the run.
//
// Invariant (checked by tests/memory): two buffers whose storage overlaps never have
// overlapping lifetimes, except an in-place pair where the writer reads the reader's
// element i only before writing element i.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"
#include "kiln/sched/logical_buffers.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::memory {

enum class Placement {
  kArgument,  // the caller's argument (parameters not donated, batch)
  kConstant,  // compile-time constant storage
  kArena,     // arena + offset
  kDonated,   // the storage of argument `argument` (an output the caller donated it to)
  kOutput,    // storage of its own per run: an output the caller keeps
};
const char* placement_name(Placement p);

struct Slot {
  Placement placement = Placement::kArena;
  int64_t offset = 0;     // kArena
  int argument = -1;      // kArgument, kDonated
  int start = 0, end = 0; // lifetime in schedule steps: written at start, last read at end
  int in_place_of = -1;   // buffer whose storage it takes over at `start` (-1: none)
};

struct AssignmentOptions {
  // (output index, argument index): the caller gives up the argument, and the output may be
  // written into its storage (XLA's input_output_alias; the train step donates its state).
  std::vector<std::pair<int64_t, int64_t>> donated;
  bool in_place = true;  // allow fusion outputs over dying operands
};

struct BufferAssignment {
  sched::Schedule schedule;
  std::vector<Slot> slots;  // per logical buffer id of `model`
  int64_t arena_bytes = 0;        // the one allocation computed buffers live in
  int64_t output_bytes = 0;       // outputs with storage of their own
  int64_t argument_bytes = 0;
  int64_t constant_bytes = 0;
  int64_t max_live_arena_bytes = 0;  // lower bound on arena_bytes (the schedule's peak)
  int in_place_reuses = 0;
  int donated_in_place = 0;       // donated outputs written into their argument's storage
  int donated_requested = 0;
  // Activations: the most arena bytes alive at one step among buffers that the backward pass
  // (gradient instructions, named "*.grad", and what is computed from them) reads and that
  // something else wrote: the forward pass, or the backward's recomputation (remat). Where the
  // backward starts every saved value is alive; later a layer's recomputed values join those
  // still waiting. Micro-batches' values are alive at different times. 0 without a backward pass.
  int64_t saved_activation_bytes = 0;

  // One line per buffer in schedule order: instruction, element, shape, placement, offset
  // or argument, lifetime; then the totals. What dump_ir=DIR writes as buffer_assignment.txt.
  std::string to_string(const sched::BufferModel& model) const;
};

// Whether `fusion` may write its result (output `element` of a multi-output fusion) over
// operand `operand`'s storage: a loop fusion (no reduction) whose fused parameter is read
// only at the output's own index (same dims as the output, read by elementwise ops), so
// element i is read before element i is written and nothing else of the operand is read
// later in the kernel.
bool can_write_in_place(const ir::Instr& instr, int operand, int element = 0);

Result<BufferAssignment> assign_buffers(const ir::Computation& computation, const sched::BufferModel& model,
                                        sched::Schedule schedule, const AssignmentOptions& options);

}  // namespace kiln::memory
