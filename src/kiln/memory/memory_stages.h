// The compile pipeline's last stages: after the passes (passes/compile_pipeline.h) have made
// the optimized entry, these fix the order its instructions run in and the place of every
// value. They are target-independent; a backend that plans its memory runs them on the entry
// it is about to lower (the CPU executable does, backend/cpu/memory/memory_plan.h).
//
//   1. schedule      sched::choose_schedule: of the list scheduler, program order and post
//                    order, the order with the lowest peak of live bytes (donations kept in
//                    place)
//   2. hide latency  sched::hide_latency: each async collective's start earlier and its done
//                    later, within the overlap limit (before assignment, which sees the
//                    longer lifetimes the overlap costs). With the device's memory known and
//                    the default limit (one weight ahead), the plan also tries limits of
//                    1/8, 1/16 and 1/32 of that memory, larger first, and keeps the first
//                    whose whole plan (arguments, arena, outputs) still fits it: spare memory
//                    buys overlap, a device that is nearly full gets one weight ahead.
//   3. assign        memory::assign_buffers: an arena offset, a donated argument or storage
//                    of its own for every value, in the final order
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/memory/buffer_assignment.h"
#include "kiln/sched/latency_hiding.h"
#include "kiln/sched/logical_buffers.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::memory {

struct MemoryStageOptions {
  // (output index, argument index) pairs the caller donates, as AssignmentOptions::donated.
  std::vector<std::pair<int64_t, int64_t>> donated;
  // Bytes async collectives may hold in flight: < 0 the default (sched/latency_hiding.h),
  // 0 keeps every pair synchronous.
  int64_t overlap_limit_bytes = -1;
  // The memory one device has for this program (0: unknown): see stage 2.
  int64_t device_memory_bytes = 0;
};

struct MemoryStages {
  std::unique_ptr<sched::BufferModel> model;  // the logical buffers the slots are indexed by
  // Stage 1: the chosen order's name and the peaks of the candidates (its `schedule` is
  // empty here: the final order is assignment.schedule).
  sched::ScheduleChoice choice;
  sched::LatencyHidingStats hiding;  // stage 2
  // The fraction of device_memory_bytes the overlap limit was chosen as (8 for 1/8), or 0
  // when the limit is the default or the caller's.
  int overlap_limit_fraction = 0;
  BufferAssignment assignment;       // stage 3, with the final order
};

Result<MemoryStages> run_memory_stages(const ir::Computation& computation, const MemoryStageOptions& options);

}  // namespace kiln::memory
