// Memory-aware scheduling of a computation: the order its instructions run in. A list
// scheduler (as XLA's ListMemoryScheduler) repeatedly runs, among the ready instructions
// (all operands done), the one that lowers the live size most: bytes its last reads free
// minus bytes it allocates; ties go to program order, so the result is deterministic.
// `choose_schedule` also simulates program order and a depth-first post order from the root
// (each value computed right before its first user) and keeps whichever peaks lowest (a
// greedy choice can lose), as XLA tries several schedulers and keeps the best.
//
// An instruction that makes one argument or constant ready for use (an FSDP weight's cast
// and all-gather, a zero accumulator; not one combining several arrays) runs on demand: right before the first instruction picked
// that reads it, which pays for it in its score. A greedy choice among them would run the
// smallest first, all of a model's expert-weight gathers before the embedding's.
//
// Two constraints keep the list scheduler from undoing other decisions:
//   - recomputation (RematPass's clones "<name>.remat", RegatherPass's all-gathers of FSDP
//     weights for the backward pass "<name>.regather") is scheduled lazily: a clone is
//     never ready on its own; when an instruction that reads one is picked, the clones not
//     run yet up to that one in program order (where the topological sort put them: right
//     before their first backward use, so the last layer's first) run right before it, and
//     such instructions are picked only when nothing else is ready (then the most recently
//     ready first: the one the gradient just reached). Otherwise a clone is "ready" as soon
//     as its saved inputs exist, i.e. in the forward pass, and the recomputed values live as
//     long as the saved ones would have (XLA avoids this by running remat after scheduling);
//   - a donated output (the training state, written into its argument's storage) waits for
//     every other reader of that argument, so the donation can happen in place: the step
//     counter's step + 1 no longer runs before the learning-rate schedule reads the old step.
//
// Chunks of a layer's expert dispatch (the model's num_moe_chunks, scope "chunks.K":
// passes/recompute_names.h's chunk_unit) run one at a time: a recomputation group takes
// another chunk's clones only when it reads them, and once a chunk's instruction has run,
// the best candidate of that chunk goes before a better-scored one of another chunk.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/sched/logical_buffers.h"

namespace kiln::sched {

// Every instruction of a computation exactly once, each after its operands.
using Schedule = std::vector<const ir::Instr*>;

struct ScheduleOptions {
  // (output index, argument index): outputs the caller lets overwrite an argument, as
  // memory::AssignmentOptions::donated.
  std::vector<std::pair<int64_t, int64_t>> donated;
};

// Whether `instr` recomputes a forward value for the backward pass (RematPass's clones carry
// the name suffix ".remat", RegatherPass's ".regather"); a fusion only when all its members do.
bool is_recomputation(const ir::Instr& instr);

// Whether `instr` recomputes a value of a loss tile ("vocab_tiles.N", the model's
// num_vocab_tiling). Not lazy: its inputs (the decoder's output, the unembedding) exist only
// at the end of the forward pass, where the backward pass starts anyway, and each tile's
// logits are large enough that the list scheduler finishes one tile before it starts the
// next; held back as a group until a gradient needs it, every tile's logits would be made
// before any tile's gradient (the groups run in program order).
bool recomputes_loss_tile(const ir::Instr& instr);

// The (output buffer, argument buffer) pairs of `donated` that buffer assignment can alias:
// an array argument, a computed output of the same size that is not also another output.
std::vector<std::pair<int, int>> donated_buffers(const BufferModel& model,
                                                 const std::vector<std::pair<int64_t, int64_t>>& donated);

Schedule program_order(const ir::Computation& computation);
Schedule list_schedule(const ir::Computation& computation, const BufferModel& model,
                       const ScheduleOptions& options = {});
// Depth-first post order from the root, operands in order; unreachable instructions last.
Schedule post_order_schedule(const ir::Computation& computation);
// Moves each donated output's instruction, with what depends on it up to there, right after
// the last other reader of its argument, so the output can take the argument's storage
// (what the list scheduler does by construction; choose_schedule applies it to the others).
void delay_donated_outputs(Schedule& schedule, const BufferModel& model, const ScheduleOptions& options);

// Peak bytes of computed (non-argument, non-constant) buffers live at once when the
// computation runs in `schedule` order: a buffer is live from the instruction that defines
// it through its last reader; outputs live to the end, except a donated output written
// after its argument's last read (it takes the argument's storage). The lower bound an
// arena plus the outputs of their own can reach.
int64_t peak_live_bytes(const BufferModel& model, const Schedule& schedule, const ScheduleOptions& options = {});

struct ScheduleChoice {
  Schedule schedule;
  std::string name;          // "list", "program_order" or "post_order"
  int64_t peak_bytes = 0;    // peak_live_bytes of the chosen order
  int64_t program_order_peak = 0;
  int64_t list_peak = 0;
  int64_t post_order_peak = 0;
};
ScheduleChoice choose_schedule(const ir::Computation& computation, const BufferModel& model,
                               const ScheduleOptions& options = {});

}  // namespace kiln::sched
