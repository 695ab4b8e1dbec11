// THE compile pipeline: every pass a module goes through between the partitioner (or the
// traced step, on one device) and a backend's lowering, in order, written in one place
// (compile_pipeline.cc, with the reason each pass sits where it does). A backend does not
// add passes; it states what it can run (BackendPolicy) and the pipeline leaves out what it
// cannot. The pipeline's last stages, the schedule, latency hiding and buffer assignment,
// work on its output and live above this module: memory::run_memory_stages
// (memory/memory_stages.h), which a backend that plans its own memory runs before lowering.
//
//   passes::Pipeline p = passes::compile_pipeline(choices, policy, pipeline_options).value();
//   p.run(module, [&](std::string_view checkpoint, const ir::Module& m) { ... });
#pragma once

#include <string>

#include "kiln/base/status.h"
#include "kiln/passes/pipeline.h"

namespace kiln::passes {

// What a backend can run; the passes that would make something it cannot are left out.
struct BackendPolicy {
  bool loop_fusion = true;          // generated kernels for chains of elementwise ops (fusion)
  bool multi_output_fusion = true;  // such a kernel may write several outputs
  bool async_collectives = true;    // a collective can be issued and waited for later (start/done pairs)
};

// What the run asks of the compiler (backend::CompileOptions, from the config).
struct CompileChoices {
  std::string remat_policy = "none";  // MaxText's remat_policy (remat.h)
  bool fuse = true;                   // false: every elementwise op its own kernel (debugging)
  std::string grad_reduce_dtype;      // "float32" | "bfloat16" | "" (grad_reduce_dtype.h)
};

// The checkpoint compile_pipeline passes after the cleanups, when the module's collectives
// are the ones that will run (what `kiln compile` reports as the partitioner's).
inline constexpr std::string_view kCleanedCheckpoint = "cleaned";

// The target-independent head of the pipeline (`kiln ir-opt --passes=default`): the
// cleanups every module gets, partitioned or not.
Pipeline default_pipeline(PipelineOptions options = {});

// The whole ordered pipeline for a backend. Errors: an unknown remat policy or gradient
// reduction dtype.
Result<Pipeline> compile_pipeline(const CompileChoices& choices, const BackendPolicy& policy,
                                  PipelineOptions options = {});

}  // namespace kiln::passes
