// Pipeline: an ordered list of passes and fixed-point groups, run over a module.
//
//   passes::Pipeline p(options);
//   p.add<DcePass>();                                        // once
//   p.add_fixed_point("cleanup", make_passes(std::make_unique<SimplifyPass>(),
//                                             std::make_unique<CsePass>()));  // until nothing changes
//   KILN_ASSIGN_OR_RETURN(bool changed, p.run(module));
//
// After every pass that reports a change, the pipeline restores topological order in every
// computation (pass.h). With `verify_each` (on by default in debug builds) it then runs
// ops::verify, and a failure names the pass and prints the offending instruction. With
// `dump_ir` it writes the module to DIR/00_input.ir before the first pass and to
// DIR/NN_<pass>.ir after every pass run (numbered in run order; a fixed-point group's passes
// appear once per iteration). With `verbose` (or KILN_VLOG>=1) it logs each pass run, whether
// it changed the module, the instruction count and the time taken.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/passes/pass.h"

namespace kiln::passes {

struct PipelineOptions {
#ifdef NDEBUG
  bool verify_each = false;
#else
  bool verify_each = true;
#endif
  std::string dump_ir;   // directory for NN_<pass>.ir files; empty: no dumps
  bool verbose = false;  // log every pass run at INFO (otherwise at KILN_VLOG(1))
  // A fixed-point group runs at most this many iterations. Reaching the cap while passes
  // still change the module means they undo each other; it is a warning, or an error when
  // `fixed_point_cap_is_error` (tests set it).
  int max_fixed_point_iterations = 16;
  bool fixed_point_cap_is_error = false;
};

class Pipeline {
 public:
  explicit Pipeline(PipelineOptions options = {}) : options_(std::move(options)) {}
  Pipeline(Pipeline&&) = default;
  Pipeline& operator=(Pipeline&&) = default;

  // Appends a pass that runs once.
  Pipeline& add(std::unique_ptr<Pass> pass);
  template <typename P, typename... Args>
  Pipeline& add(Args&&... args) {
    return add(std::make_unique<P>(std::forward<Args>(args)...));
  }
  // Appends a group whose passes run in order, again and again, until one whole iteration
  // changes nothing (or the iteration cap is reached). `only_after_change`: the group runs
  // only when the stage right before it changed the module (a cleanup after a rewrite that
  // usually has nothing to do).
  Pipeline& add_fixed_point(std::string name, std::vector<std::unique_ptr<Pass>> passes,
                            bool only_after_change = false);
  // Appends a named point between stages where run()'s caller may look at the module as it
  // is there (compile_pipeline's "cleaned": the collectives that will run). With
  // `compact_from` >= 0: when run() was given the module's owner, passes changed the module
  // and it still has at least that many instructions, it is replaced there by its deep copy
  // (the survivors of many removals in program order in fresh memory).
  Pipeline& add_checkpoint(std::string name, int64_t compact_from = -1);

  using CheckpointFn = std::function<void(std::string_view checkpoint, const ir::Module& module)>;
  // Runs every stage; true when any pass changed the module. `at_checkpoint` (if set) is
  // called at each checkpoint. Errors: a pass's own error (prefixed with its name), a
  // verification failure after a pass, an unwritable dump directory, or a fixed-point group
  // that did not converge (when that is an error).
  Result<bool> run(ir::Module& module, const CheckpointFn& at_checkpoint = {});
  // The same, compacting at the checkpoints that ask for it (`module` may be replaced).
  Result<bool> run(std::unique_ptr<ir::Module>& module, const CheckpointFn& at_checkpoint = {});

  // "dce, fix(simplify, cse, dce)": the shape of the pipeline, for logs and --help.
  std::string to_string() const;

  const PipelineOptions& options() const { return options_; }
  PipelineOptions& mutable_options() { return options_; }

 private:
  struct Stage {
    std::string name;  // the group's name (fixed-point groups), the checkpoint's name
    std::vector<std::unique_ptr<Pass>> passes;  // none for a checkpoint
    bool fixed_point = false;
    bool only_after_change = false;  // fixed-point groups
    int64_t compact_from = -1;       // checkpoints: compact a module at least this large
  };
  Result<bool> run_stages(ir::Module* module, std::unique_ptr<ir::Module>* owner, const CheckpointFn& at_checkpoint);
  // Runs one pass with sorting, verification, dumping and logging around it.
  Result<bool> run_pass(Pass& pass, ir::Module& module);
  Status dump(const ir::Module& module, std::string_view label);

  PipelineOptions options_;
  std::vector<Stage> stages_;
  int dump_index_ = 0;
};

// Builds the vector add_fixed_point takes: make_passes(std::make_unique<A>(), ...).
template <typename... P>
std::vector<std::unique_ptr<Pass>> make_passes(std::unique_ptr<P>... passes) {
  std::vector<std::unique_ptr<Pass>> out;
  (out.push_back(std::move(passes)), ...);
  return out;
}

}  // namespace kiln::passes
