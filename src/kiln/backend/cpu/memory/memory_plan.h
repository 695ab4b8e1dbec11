// The executable's memory at run time, from the pipeline's memory stages (schedule, latency
// hiding, buffer assignment: memory/memory_stages.h): the schedule its steps run in, ONE
// arena per executable (allocated on the first run, reused by every run after) holding every
// intermediate value at its planned offset, donated state written into the caller's argument
// storage, and outputs the caller keeps in storage of their own. Kernel scratch (attention
// packing, per-thread accumulators, bf16 widening, reference fallbacks) is not in the arena;
// it is estimated per instruction and counted as planned temporaries.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/memory/buffer_assignment.h"
#include "kiln/sched/logical_buffers.h"

namespace kiln::backend::cpu {

class MemoryPlan {
 public:
  // Runs the memory stages on `computation` (the fused entry) and fills the memory fields of
  // `report`, with the CPU kernels' own scratch. `fallback(instr)` says which instructions
  // run the reference evaluation (their scratch is larger).
  Status build(const ir::Computation& computation, const CompileOptions& options,
               const std::function<bool(const ir::Instr*)>& fallback, CompileReport& report);

  const sched::Schedule& schedule() const { return assignment_.schedule; }
  std::string to_string() const { return assignment_.to_string(*model_); }

  // Checks the arguments against the plan (donated storage must not be shared with another
  // argument) and allocates the arena on the first call.
  Status begin_run(std::span<const Buffer> args);
  // The output Value of `instr` before its kernel runs: planned storage per leaf (views get
  // one empty Buffer for the kernel to fill).
  void prepare(const ir::Instr* instr, std::span<const Buffer> args, Value& out);
  // After the kernel: a kernel that made its own storage (the reference fallback, tuple
  // kernels) has its result copied into the planned storage, which the plan relies on.
  void settle(const ir::Instr* instr, std::span<const Buffer> args, Value& out);

 private:
  Buffer planned(int buffer, std::span<const Buffer> args);

  std::unique_ptr<sched::BufferModel> model_;
  memory::BufferAssignment assignment_;
  std::vector<std::pair<int64_t, int64_t>> donated_;
  std::vector<const void*> prepared_;  // the storage the last prepare() gave, per leaf
  std::shared_ptr<std::byte[]> arena_;  // per executable: no process-global state
  std::shared_ptr<BufferPool> pool_ = BufferPool::create();  // outputs of their own, reused run after run
};

// The async collective settings after the environment's overrides (backend.h).
bool async_collectives_enabled(const CompileOptions& options);
int64_t overlap_limit_bytes(const CompileOptions& options);

// Bytes of scratch a CPU kernel allocates for itself while it runs, outside the plan.
int64_t kernel_scratch_bytes(const ir::Instr& instr, bool fallback);

}  // namespace kiln::backend::cpu
