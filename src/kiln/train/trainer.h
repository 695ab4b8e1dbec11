// The trainer: builds the step program and the initial state once, then loops
// next batch -> step -> metrics, as MaxText's train loop does.
//
//   KILN_ASSIGN_OR_RETURN(auto model, models::make_model(config));
//   KILN_ASSIGN_OR_RETURN(auto trainer, train::Trainer::create(config, std::move(model)));
//   KILN_RETURN_IF_ERROR(trainer->run());   // all `steps`; NaN/Inf loss -> failed_precondition
//
// State: parameters, Adam moments, the step counter and, with dtype=bfloat16, the bf16
// weight copies (derived: train/step/weight_copies.h), held by the StepRunner of the
// configured executor (backend=cpu: the CPU backend's executable, compiled once;
// backend=interpreter: the reference interpreter) and replaced by the step's outputs.
// Same config and seeds give bitwise-identical losses: the data, the initialisation and
// both executors are deterministic.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/config/config.h"
#include "kiln/data/pipeline.h"
#include "kiln/data/prefetch.h"
#include "kiln/ir/literal.h"
#include "kiln/models/model.h"
#include "kiln/train/batch_feed.h"
#include "kiln/train/observability/flops.h"
#include "kiln/train/observability/metrics.h"
#include "kiln/train/observability/observability.h"
#include "kiln/train/observability/peaks.h"
#include "kiln/train/observability/run_events.h"
#include "kiln/train/run_lock.h"
#include "kiln/train/spike_window.h"
#include "kiln/train/step/eval_program.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/step/step_runner.h"
#include "kiln/train/synthetic_data.h"

namespace kiln::runtime {
class World;
}

namespace kiln::train {

// What MaxText logs at start-up, as lines: "number parameters: X.XXX billion", the active
// parameters per token, and "Per train step: Total TFLOPs: ..., split as ...% learnable
// weight flops and ...% attention flops" (the 2026-02 formula, per device per step).
std::vector<std::string> startup_report(const config::Config& config, const models::Model& model);

struct TrainerOptions {
  std::FILE* console = stdout;  // start-up report and per-step lines (nullptr: silent)
  bool write_metrics_file = true;  // {base_output_directory}/{run_name}/metrics.jsonl
  // Test hook passed to checkpoint::SaveOptions::after_file (called after each file of a save).
  std::function<void(const std::string&)> checkpoint_after_file;
  // The devices of a multi-device mesh (null: runtime::make_world(config)). Under MPI the
  // application makes the MpiWorld (to end the job on errors); every rank runs the same steps
  // and writes its own devices' checkpoint shards (rank 0 the manifest); the caller turns
  // the other ranks' console and metrics off.
  std::shared_ptr<runtime::World> world;
};

class Trainer {
 public:
  // Checks the config keys the trainer supports (bad ones are invalid_argument), builds the
  // step and init programs, initialises the state and prints the start-up report.
  static Result<std::unique_ptr<Trainer>> create(const config::Config& config, std::unique_ptr<models::Model> model,
                                                 TrainerOptions options = {});

  // Runs the remaining steps up to `steps`. A NaN or Inf loss (with abort_on_nan_loss /
  // abort_on_inf_loss) stops the run with failed_precondition after logging that step.
  Status run();
  // One step: its record (already printed and written).
  Result<StepRecord> run_step();

  int64_t step() const { return step_; }
  // The stop signal (SIGTERM, SIGINT) run() stopped for after saving the state, 0 when the
  // run ended otherwise (preemption.h; `kiln train` then exits with kExitPreempted).
  int preempted_by() const { return preempted_by_; }
  const std::vector<StepRecord>& history() const { return history_; }
  const std::string& run_name() const { return run_name_; }
  const std::string& output_dir() const { return output_dir_; }
  std::string metrics_path() const { return metrics_.path(); }
  const TrainingFlops& flops() const { return flops_; }
  // Current parameters, in model.params() order.
  std::vector<ir::Literal> params() const;
  const StepProgram& program() const { return program_; }
  const char* executor_name() const { return runner_->name(); }
  // Sees every instruction of the later steps on every device, in place of the profiler's
  // observer (kiln plan --calibrate times the kernels with it). Not owned; nullptr: none.
  void set_instruction_observer(backend::InstructionObserver* observer) { runner_->set_observer(observer); }
  // dataset_type=tokens, text or hf: the input pipeline (its state() is what a checkpoint
  // saves); else null.
  data::BatchSource* batch_source() const { return tokens_.get(); }
  // Eval loss and perplexity of the current parameters on the eval split (also printed);
  // failed_precondition without an eval split (eval_interval <= 0 or synthetic data).
  Result<double> evaluate();
  const EvalRunner* eval_runner() const { return eval_runner_.get(); }  // null without an eval split

  // Checkpoints (docs/checkpoints.md), in {output_dir}/checkpoints/<step>/. With
  // enable_checkpointing, run() saves every checkpoint_period steps and, with
  // save_checkpoint_on_completion, after the last step; create() resumes from the latest
  // complete checkpoint there, else loads load_full_state_path or load_parameters_path.
  std::string checkpoints_dir() const;
  // Saves the current state as checkpoint <step()> (async_checkpointing: copies the state
  // and writes it in the background; the status of an earlier background save is returned).
  Status save_checkpoint();
  Status wait_for_checkpoint();  // waits for a background save; its status
  int64_t restored_step() const { return restored_step_; }  // -1: started fresh
  double last_checkpoint_blocked_s() const { return checkpoint_blocked_s_; }

 private:
  Trainer() = default;
  Status check_loss(const StepRecord& r) const;
  // Whether any rank has received a stop signal (a collective: every rank calls it after the
  // same step); the signal, 0 when none.
  int stop_requested() const;
  Status stop_for_preemption(int signal);
  // Appends this attempt's goodput snapshot (report/goodput.h) to events.jsonl; `final` for
  // the last one (finish, preempted).
  Status write_goodput(bool final);
  // The console's goodput line, from every attempt's snapshots in events.jsonl.
  void print_goodput();
  // report.html in the run directory (report/), from the files written so far; a page that
  // cannot be written is a note, never a stopped run.
  void write_run_report(bool announce);
  void print(const std::string& line) const;
  void start_prefetch();  // the background batch thread, from the iterator position
  Status build_eval(const config::Config& config);  // the forward-only eval program
  // The step partitioned over the mesh's devices (trainer_sharded.cc); adds the compile time.
  Status make_sharded_runner(const config::Config& config, double* compile_s);
  // The start-up memory check (train/memory_budget.h) against the compiled plan.
  Status check_memory(const config::Config& config);
  checkpoint::CheckpointState snapshot() const;
  // Restores `dir` (a step directory, or a checkpoints directory: its latest) into the state.
  Status restore(const std::string& dir, bool full_state, const std::vector<models::ParamSpec>& specs,
                 ir::DType mu_dtype);
  // load_parameters_path naming a Hugging Face directory: each tensor streamed, cast to the
  // run's dtype and cut to each local device's block (trainer_checkpoint.cc).
  Status restore_from_hf(const std::string& dir, const std::vector<models::ParamSpec>& specs);

  // Held while the trainer lives (run_lock.h); first, so it is released after every writer
  // below has flushed.
  std::unique_ptr<RunLock> run_lock_;
  std::unique_ptr<models::Model> model_;
  TrainerOptions options_;
  StepProgram program_;
  SyntheticData data_{1, 1, 1, 0, true};
  std::unique_ptr<data::BatchSource> tokens_;  // dataset_type=tokens, text or hf (else synthetic data_)
  // eval_interval > 0 with a real dataset: the held-out split (or the eval files), evaluated
  // every eval_interval steps on eval_batches_ batches (eval_steps, or -1: the whole split).
  std::unique_ptr<data::BatchSource> eval_tokens_;
  int64_t eval_interval_ = 0, eval_batches_ = 0;
  std::unique_ptr<EvalRunner> eval_runner_;  // the forward-only program (eval_program.h)
  std::vector<HostBatch> eval_data_;         // the eval batches: always the same, built once
  // Batches are built on a background thread (prefetch_depth ahead) from the first step on,
  // starting at the iterator position (after a restore); data_wait is the time a step waits.
  int64_t prefetch_depth_ = 2;
  // The rows of each global batch this process's devices take; the prefetch thread reads it.
  std::unique_ptr<BatchFeed> feed_;
  // One batch per local device: only the rows its devices consume (batch_feed.h). Declared
  // after everything its thread reads (the pipelines, data_, feed_), so it is destroyed, and
  // its thread stopped, before any of them.
  std::unique_ptr<data::Prefetcher<std::vector<HostBatch>>> prefetch_;
  std::unique_ptr<StepRunner> runner_;  // holds the state; declared after program_, which it reads
  int64_t step_ = 0;
  int64_t steps_ = 0;
  int64_t planned_process_bytes_ = 0;  // this process's devices' planned need (check_memory)
  TrainingFlops flops_;
  double tokens_per_device_ = 0;  // per step
  Peaks peaks_;
  bool above_peak_reported_ = false;  // the one line of peaks.h above_peak_message, printed once
  int64_t log_period_ = 1;  // steps between expert-load reports (and metric file flushes)
  bool abort_on_nan_ = true, abort_on_inf_ = true;
  std::string run_name_, output_dir_;
  JsonlWriter metrics_, extra_metrics_;  // metrics.jsonl and metrics_file
  RunEvents events_;                     // events.jsonl (run_events.h)
  backend::CompileReport compile_report_;
  std::string restored_from_;            // the checkpoint directory restored, if any
  std::vector<StepRecord> history_;
  std::chrono::steady_clock::time_point last_step_end_;
  // Checkpointing.
  bool checkpointing_ = false, save_on_completion_ = false, async_checkpointing_ = false;
  int64_t checkpoint_period_ = 0, max_checkpoints_ = -1, restored_step_ = -1, last_saved_step_ = -1;
  double checkpoint_blocked_s_ = 0;
  double preemption_grace_s_ = 0;
  // Goodput accounting of this attempt (report/goodput.h), in seconds.
  std::chrono::steady_clock::time_point attempt_start_;
  double startup_s_ = 0, productive_s_ = 0, data_wait_total_s_ = 0, checkpoint_total_s_ = 0, eval_total_s_ = 0;
  double redone_s_ = 0;       // earlier attempts' steps past the checkpoint resumed (done again here)
  double pending_stall_s_ = 0;  // checkpoint and eval time since the last step ended (lands in the next step)
  int preempted_by_ = 0;
  std::unique_ptr<SpikeWindow> spikes_;  // skip_step_on_spikes (spike_window.h); null when off
  int64_t skipped_steps_ = 0;
  std::string config_yaml_;
  nlohmann::json mesh_json_, data_json_, rng_json_;
  std::unique_ptr<RunObserver> observer_;  // TensorBoard, profiler trace, attribution report
  checkpoint::AsyncSaver saver_;  // declared last: joins a background save before the state goes
};

}  // namespace kiln::train
