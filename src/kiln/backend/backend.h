// The backend interface: compile a module once into an Executable, then run it step after
// step. Free of CPU assumptions so a CUDA backend can implement it too.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/backend/buffer.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/ir/instr.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/passes/compile_pipeline.h"

namespace kiln::backend {

struct CompileOptions {
  std::string dump_dir;        // "" = none: else the optimized IR and kernel sources go here
  std::string cache_dir;       // "" = $KILN_CACHE_DIR or ~/.cache/kiln
  bool verify_each = false;    // verify the module after every pass
  bool fuse = true;            // turn off to run every op as its own kernel (debugging)
  // (output index, argument index) pairs: the caller donates the argument, so the output may
  // be written into its storage (the train step's state is updated in place). The donated
  // argument's contents are undefined after run().
  std::vector<std::pair<int64_t, int64_t>> donated;
  std::string remat_policy = "none";  // MaxText's remat_policy (passes/remat.h); "none": save everything
  // Collectives as start/done pairs moved apart by the latency-hiding scheduler, with at most
  // overlap_limit_bytes held by pairs in flight (< 0: sched/latency_hiding.h's default).
  // KILN_ASYNC_COLLECTIVES=0 and KILN_OVERLAP_LIMIT_MB override them.
  bool async_collectives = true;
  int64_t overlap_limit_bytes = -1;

  // What a run's config says (dump_ir, verify_each, remat_policy): the one place these keys
  // are read for compiling. Callers add what is theirs (the step's donations, ...).
  static CompileOptions from_config(const config::Config& config);
  // What of these the compile pipeline needs (passes/compile_pipeline.h).
  passes::CompileChoices choices() const { return {remat_policy, fuse}; }
};

// What compilation made of the module, for `kiln compile` and tests.
struct CompileReport {
  int64_t instructions_before = 0;
  int64_t instructions_after = 0;
  // The collectives after the pipeline's cleanups, before combining and async pairs: on a
  // partitioned module, the ones the partitioner's layouts require.
  std::map<std::string, ops::CollectiveStats> collectives;
  int64_t fused_kernels = 0;     // generated loop kernels (after deduplication: unique_kernels)
  int64_t unique_kernels = 0;
  int64_t gemms = 0;
  int64_t attention_kernels = 0;  // fused attention forward and backward
  int64_t grouped_matmuls = 0;    // grouped matmuls and their weight-gradient kernels (MoE)
  int64_t library_kernels = 0;   // hand-written native kernels (gather, sort, ...)
  int64_t fallback_kernels = 0;  // ops run through the reference evaluation (slow path)
  std::map<std::string, int64_t> fallback_by_op;  // which ops those are
  int64_t kernels_compiled = 0;  // kernels the system compiler built this time (0 when cached)
  double compile_seconds = 0;

  // Memory the executable needs, from its buffer assignment (memory/). One run needs at
  // most planned_peak_bytes = argument_bytes + constant_bytes + arena_bytes + output_bytes
  // + kernel_scratch_bytes.
  int64_t argument_bytes = 0;      // all inputs (parameters, optimizer state, batch)
  int64_t constant_bytes = 0;      // constants materialized once
  int64_t peak_value_bytes = 0;    // peak of intermediate values live at once (schedule peak + outputs)
  int64_t arena_bytes = 0;         // the one allocation every intermediate value lives in
  int64_t output_bytes = 0;        // outputs with storage of their own (not donated in place)
  int64_t kernel_scratch_bytes = 0;  // the most scratch one kernel allocates for itself
  int64_t planned_peak_bytes = 0;
  int64_t in_place_reuses = 0;     // fusion outputs written over a dying operand
  int64_t donated_in_place = 0;    // donated outputs written into their argument's storage
  std::string schedule;            // the order chosen: "list" (memory-aware) or "program_order"
  int64_t async_collectives = 0;   // start/done pairs, and how many have compute between them
  int64_t overlapped_collectives = 0;
  int64_t overlap_limit_bytes = 0;  // the latency-hiding scheduler's limit on bytes in flight
  std::map<std::string, int64_t> async_by_kind;  // "all_gather_start" -> pairs of that kind
  std::map<std::string, int64_t> async_bytes_by_kind;  // bytes per step: gathered, or summed
  // Arena bytes the forward pass writes and the backward pass reads (the backward pass
  // starts at the first instruction named "*.grad" in program order): what the forward
  // pass keeps for the backward pass. 0 when the program has no gradients.
  int64_t saved_activation_bytes = 0;
};

// Sees every instruction an executable runs, with its wall-clock interval (steady_clock
// nanoseconds), on the thread that ran it: the generic hook that profiles and traces build
// on, so kernels, GEMMs and collective start/done pairs all show up without backend code
// knowing about traces. Called from the running thread; must be cheap.
class InstructionObserver {
 public:
  virtual ~InstructionObserver() = default;
  virtual void on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Observer for the instructions of later run() calls (nullptr: none). Not owned.
  void set_observer(InstructionObserver* observer) { observer_ = observer; }
  // Runs the entry computation; a tuple root gives one Buffer per element.
  virtual Result<std::vector<Buffer>> run(std::span<const Buffer> args) = 0;
  virtual const CompileReport& report() const = 0;
  // Every instruction of the optimized entry computation in the order run() executes them
  // (parameters, plumbing and async start/done pairs included), owned by the executable:
  // what a cost model (kiln plan) walks to predict the step.
  virtual std::vector<const ir::Instr*> schedule() const = 0;

 protected:
  InstructionObserver* observer_ = nullptr;
};

// What every backend does first: a copy of `source` through the compile pipeline with the
// backend's `policy` (dumps and verification from `options`), filling `report`'s
// instructions_before and the collectives at the pipeline's `cleaned` checkpoint.
Result<std::unique_ptr<ir::Module>> run_compile_pipeline(const ir::Module& source, const CompileOptions& options,
                                                         const passes::BackendPolicy& policy, CompileReport& report);

// A backend turns a module into an executable: it runs the compile pipeline
// (passes/compile_pipeline.h) with the policy of what it can run, then lowers what is left.
// Nothing here assumes a CPU: a CUDA backend implements the same two calls.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const = 0;
};

// This machine's CPU: generated loop kernels, library GEMMs, hand-written attention and
// grouped matmuls (backend/cpu/).
const Backend& cpu_backend();
// The reference interpreter behind the same interface (backend/interpreter/): the pipeline
// without loop fusion or async collectives, then every instruction by its reference
// evaluation. Slow and exact; it proves the interface carries no CPU assumption.
const Backend& interpreter_backend();
// By name: "cpu" or "interpreter" (an unknown name is an error listing both).
Result<const Backend*> backend_named(std::string_view name);

// cpu_backend().compile(module, options).
Result<std::unique_ptr<Executable>> compile_cpu(const ir::Module& module, const CompileOptions& options);

}  // namespace kiln::backend
