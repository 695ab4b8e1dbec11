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
  AssignmentOptions aopts;
  aopts.donated = options.donated;
  auto total = [](const BufferAssignment& a) {
    return a.argument_bytes + a.constant_bytes + a.arena_bytes + a.output_bytes;
  };

  // A larger limit, a fraction of the device's memory, where the whole plan still fits it.
  const int64_t capacity = options.device_memory_bytes;
  if (options.overlap_limit_bytes < 0 && capacity > 0) {
    const int64_t one_weight = sched::default_overlap_limit(computation);
    for (int fraction : {8, 16, 32}) {
      lopts.limit_bytes = capacity / fraction;
      if (lopts.limit_bytes <= one_weight) break;
      sched::Schedule tried = schedule;
      sched::LatencyHidingStats hiding = sched::hide_latency(tried, *out.model, lopts);
      if (hiding.pairs == 0) break;  // nothing to overlap: any limit gives the same plan
      KILN_ASSIGN_OR_RETURN(BufferAssignment a, assign_buffers(computation, *out.model, std::move(tried), aopts));
      if (total(a) > capacity) continue;
      out.hiding = hiding;
      out.assignment = std::move(a);
      out.overlap_limit_fraction = fraction;
      KILN_VLOG(1) << "memory stages: overlap limit 1/" << fraction << " of the device's " << capacity
                   << " bytes: " << out.hiding.to_string();
      return out;
    }
  }

  lopts.limit_bytes = options.overlap_limit_bytes;
  out.hiding = sched::hide_latency(schedule, *out.model, lopts);
  if (out.hiding.pairs > 0) {
    KILN_VLOG(1) << "memory stages: " << out.hiding.to_string();
  }
  KILN_ASSIGN_OR_RETURN(out.assignment, assign_buffers(computation, *out.model, std::move(schedule), aopts));
  return out;
}

}  // namespace kiln::memory
