#include "kiln/memory/memory_stages.h"

#include "kiln/base/logging.h"

namespace kiln::memory {

Result<MemoryStages> run_memory_stages(const ir::Computation& computation, const MemoryStageOptions& options) {
  MemoryStages out;
  out.model = std::make_unique<sched::BufferModel>(computation);
  // The schedule knows the donations, so it can keep them in place and not count them.
  sched::ScheduleOptions sopts;
  sopts.donated = options.donated;
  out.choice = sched::choose_schedule(computation, *out.model, sopts);
  sched::Schedule schedule = std::move(out.choice.schedule);
  out.choice.schedule.clear();
  KILN_VLOG(1) << "memory stages: " << out.choice.name << " schedule; peak live bytes: list " << out.choice.list_peak
               << ", program order " << out.choice.program_order_peak << ", post order " << out.choice.post_order_peak;

  sched::LatencyHidingOptions lopts;
  lopts.schedule = sopts;
  lopts.limit_bytes = options.overlap_limit_bytes;
  out.hiding = sched::hide_latency(schedule, *out.model, lopts);
  if (out.hiding.pairs > 0) {
    KILN_VLOG(1) << "memory stages: " << out.hiding.to_string();
  }

  AssignmentOptions aopts;
  aopts.donated = options.donated;
  KILN_ASSIGN_OR_RETURN(out.assignment, assign_buffers(computation, *out.model, std::move(schedule), aopts));
  return out;
}

}  // namespace kiln::memory
