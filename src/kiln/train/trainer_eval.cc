// The trainer's evaluation: the forward-only eval program (eval_program.h) on the held-out
// split, every eval_interval steps. Kept apart from trainer.cc, which is the step loop.
#include <cmath>

#include <fmt/format.h>

#include "kiln/train/data_source.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

Status Trainer::build_eval(const config::Config& config) {
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(EvalProgram program, build_eval_program(*model_, config.derived().micro_batch_size,
                                                                config.get_int("max_target_length")));
  backend::CompileOptions options = backend::CompileOptions::from_config(config);
  options.remat_policy = "none";  // forward only: no backward pass to recompute for
  KILN_ASSIGN_OR_RETURN(const backend::Backend* backend, backend::backend_for(config));
  KILN_ASSIGN_OR_RETURN(eval_runner_, EvalRunner::create(std::move(program), *runner_, program_, config, *backend,
                                                         options));
  // The eval batches never change: build them once, so an evaluation never waits for data.
  for (int64_t k = 0; k < eval_batches_; ++k) eval_data_.push_back(to_host_batch(eval_tokens_->batch(k)));
  KILN_RETURN_IF_ERROR(eval_tokens_->status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!eval_runner_->fallback_reason().empty()) {
    print(fmt::format("note: backend={}: the backend could not compile the eval program ({}); it runs on "
                      "the reference interpreter",
                      backend->name(),
                      eval_runner_->fallback_reason()));
  }
  print(fmt::format("built the forward-only eval program in {:.3f} s ({}); {} eval batches ready", seconds,
                    eval_runner_->name(), eval_data_.size()));
  return ok_status();
}

Result<double> Trainer::evaluate() {
  if (!eval_runner_) {
    return failed_precondition("no eval split: evaluation needs dataset_type=tokens or text and eval_interval > 0");
  }
  double xent = 0, weights = 0;
  for (const HostBatch& b : eval_data_) {
    KILN_ASSIGN_OR_RETURN(EvalSums sums, eval_runner_->run(*runner_, {b.inputs, b.targets, b.positions, b.segmentation}));
    xent += sums.xent_sum;
    weights += sums.total_weights;
  }
  const double loss = weights > 0 ? xent / weights : 0.0;
  print(fmt::format("eval after step {}: eval loss {:.3f}, perplexity {:.3f} ({} batches, {} target tokens)", step_,
                    loss, std::exp(loss), eval_data_.size(), static_cast<int64_t>(weights)));
  last_step_end_ = std::chrono::steady_clock::now();  // the next step's time excludes the evaluation
  return loss;
}

}  // namespace kiln::train
