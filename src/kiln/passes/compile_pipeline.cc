#include "kiln/passes/compile_pipeline.h"

#include <memory>

#include "kiln/passes/all_gather_combiner.h"
#include "kiln/passes/all_reduce_combiner.h"
#include "kiln/passes/async_collectives.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/grad_reduce_dtype.h"
#include "kiln/passes/multi_output_fusion.h"
#include "kiln/passes/product_result_dtype.h"
#include "kiln/passes/reduce_scatter_combiner.h"
#include "kiln/passes/reduce_scatter_reassociate.h"
#include "kiln/passes/regather.h"
#include "kiln/passes/remat.h"
#include "kiln/passes/simplify.h"

namespace kiln::passes {

Pipeline default_pipeline(PipelineOptions options) {
  Pipeline p(std::move(options));
  // First, so the fixed-point group never spends time on values nothing uses (autodiff
  // leaves many behind).
  p.add(std::make_unique<DcePass>());
  // Simplification exposes duplicates (two folded chains become equal), merging duplicates
  // lets identities on shared operands match (select(p, a, a)), and both leave dead values
  // behind: repeat the three until none of them changes anything. On a partitioned module
  // this also merges the gathers resharding inserted once per use and drops the slices of
  // values that are replicated anyway.
  p.add_fixed_point("simplify", make_passes(std::make_unique<SimplifyPass>(), std::make_unique<CsePass>(),
                                            std::make_unique<DcePass>()));
  // The cleanups removed about a third of the module: a backend that hands over the module's
  // owner gets it back compacted here when it is large, and every later pass walks it
  // faster (the reference step's 15,000 instructions on 4 devices: the later passes 20%
  // faster, the copy 2% of them). A small module stays in cache anyway and the copy would
  // cost more than it saves (gpt-oss-small's 6,400: +7% compile time).
  p.add_checkpoint("compacted", /*compact_from=*/10000);
  // After the cleanups, which leave only the all-reduces that will run: the step's many
  // scalar all-reduces (each gradient's share of the global norm) meet once. Nothing to do
  // on one device.
  p.add(std::make_unique<AllReduceCombinerPass>());
  // The combined all-reduce's reshapes meet the operands' own (reshape of reshape): fold
  // them. Only when the combiner combined something (never on one device).
  p.add_fixed_point("simplify_combined",
                    make_passes(std::make_unique<SimplifyPass>(), std::make_unique<CsePass>(), std::make_unique<DcePass>()),
                    /*only_after_change=*/true);
  // On the cleaned partitioned program: the partial gradients of a weight used several times
  // (the loss's vocab tiles) are summed before they are scattered, once.
  p.add(std::make_unique<ReduceScatterReassociatePass>());
  p.add_checkpoint(std::string(kCleanedCheckpoint));
  // After simplification (which removes no-op converts first) and before fusion, which would
  // otherwise fuse the widening convert into its readers as a pass of its own.
  p.add(std::make_unique<ProductResultDtypePass>());
  return p;
}

Result<Pipeline> compile_pipeline(const CompileChoices& choices, const BackendPolicy& policy,
                                  PipelineOptions options) {
  Pipeline p = default_pipeline(std::move(options));
  if (!choices.grad_reduce_dtype.empty()) {
    // On the cleaned program, whose reductions are the ones that run (the reassociated sums
    // included); then the products write the wide partials themselves.
    const std::string& name = choices.grad_reduce_dtype;
    if (name != "float32" && name != "bfloat16") {
      return invalid_argument("grad_reduce_dtype={} is not a dtype gradients are reduced in (accepted: float32, "
                              "bfloat16, or empty for the products' own)",
                              name);
    }
    p.add(std::make_unique<GradReduceDtypePass>(name == "float32" ? ir::DType::kF32 : ir::DType::kBF16));
    p.add(std::make_unique<ProductResultDtypePass>());
  }
  // After CSE (which would merge the recomputed values back) and before fusion (which fuses
  // the recomputed elementwise chains into the backward kernels).
  KILN_ASSIGN_OR_RETURN(RematPolicy remat, RematPolicy::from_name(choices.remat_policy));
  const bool regather = remat.enabled;
  p.add(std::make_unique<RematPass>(std::move(remat)));
  // After remat, whose recomputed layers read the gathered weights in the backward pass too.
  if (regather) p.add(std::make_unique<RegatherPass>());
  // After regather (forward gathers and backward re-gathers combine each among their own),
  // before fusion (which sees the copies around a combined collective) and async_collectives
  // (a combined collective becomes one start/done pair).
  p.add(std::make_unique<AllGatherCombinerPass>());
  p.add(std::make_unique<ReduceScatterCombinerPass>());
  if (policy.loop_fusion) {
    // Late: fusion must see the final graph, and the kernels are generated from its output.
    p.add(std::make_unique<FusionPass>(!choices.fuse));
    // After fusion, whose loop fusions it merges into their consumers.
    if (choices.fuse && policy.multi_output_fusion) p.add(std::make_unique<MultiOutputFusionPass>());
    // Fusion leaves the fused instructions' originals behind.
    p.add(std::make_unique<DcePass>());
  }
  // Last: a start/done pair is two instructions no other pass should see.
  if (policy.async_collectives) p.add(std::make_unique<AsyncCollectivesPass>());
  return p;
}

}  // namespace kiln::passes
