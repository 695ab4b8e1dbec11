// Memory-aware scheduling of a computation: the order its instructions run in. A list
// scheduler (as XLA's ListMemoryScheduler) repeatedly runs, among the ready instructions
// (all operands done), the one that lowers the live size most: bytes its last reads free
// minus bytes it allocates; ties go to program order, so the result is deterministic.
// `choose_schedule` also simulates program order and a depth-first post order from the root
// (each value computed right before its first user: what keeps rematerialized forward
// values next to the backward ops that need them) and keeps whichever peaks lowest (a
// greedy choice can lose), as XLA tries several schedulers and keeps the best.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/sched/logical_buffers.h"

namespace kiln::sched {

// Every instruction of a computation exactly once, each after its operands.
using Schedule = std::vector<const ir::Instr*>;

Schedule program_order(const ir::Computation& computation);
Schedule list_schedule(const ir::Computation& computation, const BufferModel& model);
// Depth-first post order from the root, operands in order; unreachable instructions last.
Schedule post_order_schedule(const ir::Computation& computation);

// Peak bytes of computed (non-argument, non-constant) buffers live at once when the
// computation runs in `schedule` order: a buffer is live from the instruction that defines
// it through its last reader; outputs live to the end. The lower bound an arena can reach.
int64_t peak_live_bytes(const BufferModel& model, const Schedule& schedule);

struct ScheduleChoice {
  Schedule schedule;
  std::string name;          // "list", "program_order" or "post_order"
  int64_t peak_bytes = 0;    // peak_live_bytes of the chosen order
  int64_t program_order_peak = 0;
  int64_t list_peak = 0;
  int64_t post_order_peak = 0;
};
ScheduleChoice choose_schedule(const ir::Computation& computation, const BufferModel& model);

}  // namespace kiln::sched
