#include "kiln/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/config/mesh.h"
#include "kiln/report/goodput.h"
#include "kiln/report/report.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/train/data_source.h"
#include "kiln/train/memory_budget.h"
#include "kiln/train/preemption.h"
#include "kiln/train/step/state_init.h"
#include "kiln/train/step/weight_copies.h"

namespace kiln::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t to_ns(Clock::time_point t) {  // the clock of the observability spans
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// "kiln_20261129_171502": a default run name from the local time.
std::string timestamped_run_name() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "kiln_%Y%m%d_%H%M%S", &tm);
  return text;
}

// 9081664 -> "9,081,664".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

std::vector<std::string> startup_report(const config::Config& config, const models::Model& model) {
  std::vector<std::string> lines;
  models::ParamCounts counts = model.counts();
  lines.push_back(fmt::format("number parameters: {:.3f} billion", static_cast<double>(counts.total) / 1e9));
  lines.push_back(fmt::format("active parameters per token: {:.3f} billion ({} total, {} active per token, input "
                              "embedding not counted as active)",
                              static_cast<double>(counts.active_per_token) / 1e9, grouped(counts.total),
                              grouped(counts.active_per_token)));
  TrainingFlops flops = training_tflops_per_device(FlopInputs::from_config(config), FlopFormula::kMaxText2602);
  double total = flops.total_tflops();
  lines.push_back(fmt::format("Per train step: Total TFLOPs: {:.2f}, split as {:.2f}% learnable weight flops and "
                              "{:.2f}% attention flops",
                              total, total > 0 ? 100.0 * flops.learnable_tflops / total : 0.0,
                              total > 0 ? 100.0 * flops.attention_tflops / total : 0.0));
  lines.push_back(fmt::format("  per device per step: {:.6g} learnable + {:.6g} attention TFLOPs (formula: {})",
                              flops.learnable_tflops, flops.attention_tflops,
                              flop_formula_name(FlopFormula::kMaxText2602)));
  return lines;
}

void Trainer::print(const std::string& line) const {
  if (options_.console == nullptr) return;
  fmt::print(options_.console, "{}\n", line);
  std::fflush(options_.console);
}

Result<std::unique_ptr<Trainer>> Trainer::create(const config::Config& config, std::unique_ptr<models::Model> model,
                                                 TrainerOptions options) {
  KILN_CHECK(model != nullptr);
  std::unique_ptr<Trainer> t(new Trainer());
  t->attempt_start_ = Clock::now();
  t->model_ = std::move(model);
  t->options_ = options;
  t->steps_ = config.derived().steps;
  t->abort_on_nan_ = config.get_bool("abort_on_nan_loss");
  t->abort_on_inf_ = config.get_bool("abort_on_inf_loss");
  const config::Derived& d = config.derived();
  // MFU's denominator: the peaks of the backend's device on one device's threads, measured
  // (or cached) before anything else loads the cores, unless hardware_peak_tflops sets them.
  auto measure_peaks = [&]() -> Result<backend::DevicePeaks> {
    KILN_ASSIGN_OR_RETURN(const backend::Backend* backend, backend::backend_for(config));
    return backend::peaks_for(*backend, runtime::threads_per_device(d.local_devices));
  };
  KILN_ASSIGN_OR_RETURN(t->peaks_, resolve_peaks(config, measure_peaks));
  t->print(fmt::format("peak: {} (MFU against {})", t->peaks_.log_line, t->peaks_.bf16_compute ? "bf16" : "f32"));

  // The data (dataset_type): opened and checked before tracing or compiling anything.
  {
    KILN_ASSIGN_OR_RETURN(DataSources data, open_data_sources(config));
    for (const std::string& line : data.report) t->print(line);
    t->tokens_ = std::move(data.train);
    t->eval_tokens_ = std::move(data.eval);
    t->eval_interval_ = data.eval_interval;
    t->eval_batches_ = data.eval_batches;
    t->prefetch_depth_ = config.get_int("prefetch_depth");
  }

  // Where the run writes.
  t->run_name_ = config.get_string("run_name");
  if (t->run_name_.empty()) {
    t->run_name_ = timestamped_run_name();
    t->print(fmt::format("run_name is empty: using run_name={}", t->run_name_));
  }
  t->output_dir_ = (std::filesystem::path(config.get_string("base_output_directory")) / t->run_name_).string();
  // One writer per run directory and rank, taken before anything is compiled or written.
  if (options.write_metrics_file) {
    KILN_ASSIGN_OR_RETURN(t->run_lock_, RunLock::acquire(t->output_dir_, launcher_rank()));
  }

  // Start-up report: parameters and FLOPs, as MaxText logs them.
  const std::vector<models::ParamSpec>& specs = t->model_->params();
  for (const std::string& line : startup_report(config, *t->model_)) t->print(line);
  t->flops_ = training_tflops_per_device(FlopInputs::from_config(config), FlopFormula::kMaxText2602);
  // Each device runs its share of the global batch (the SPMD partitioner splits it).
  t->tokens_per_device_ = static_cast<double>(config.get_int("max_target_length")) *
                          config.get_float("per_device_batch_size") *
                          static_cast<double>(config.get_int("gradient_accumulation_steps"));

  // Trace the step: model, gradients, optimizer.
  Clock::time_point trace_start = Clock::now();
  KILN_ASSIGN_OR_RETURN(StepProgramOptions step_options, StepProgramOptions::from_config(config));
  KILN_ASSIGN_OR_RETURN(t->program_, build_step_program(*t->model_, step_options));
  double trace_s = seconds_since(trace_start);
  t->print(fmt::format("traced the training step (loss, gradients, clipping, schedule, AdamW) in {:.3f} s: {} "
                       "instructions",
                       trace_s, t->program_.module->entry()->instructions().size()));

  // The backend, chosen once by the config, and the runner that then holds the state.
  KILN_ASSIGN_OR_RETURN(const backend::Backend* backend, backend::backend_for(config));
  double compile_s = 0;
  if (d.num_devices > 1) {
    KILN_RETURN_IF_ERROR(t->make_sharded_runner(config, &compile_s));
  } else if (backend != &backend::interpreter_backend()) {
    const backend::CompileOptions compile_options = backend::CompileOptions::from_config(config);
    backend::CompileReport report;
    std::string fallback_reason;
    KILN_ASSIGN_OR_RETURN(t->runner_,
                          make_compiled_runner(t->program_, *backend, compile_options, &report, &fallback_reason));
    compile_s = report.compile_seconds;
    t->compile_report_ = report;
    if (!fallback_reason.empty()) {
      t->print(fmt::format("note: backend={}: the backend could not compile the step ({}); running it on the "
                           "reference interpreter instead",
                           backend->name(), fallback_reason));
    } else {
      if (backend == &backend::cpu_backend()) {
        t->print(fmt::format("compiled the step for the CPU in {:.3f} s: {} -> {} instructions, {} fused loop kernels "
                             "({} unique, {} built now, the rest from the kernel cache), {} GEMMs, {} library "
                             "kernels, {} ops on the reference-evaluation fallback",
                             report.compile_seconds, report.instructions_before, report.instructions_after,
                             report.fused_kernels, report.unique_kernels, report.kernels_compiled, report.gemms,
                             report.library_kernels, report.fallback_kernels));
      } else {
        t->print(fmt::format("compiled the step with the {} in {:.3f} s: {} -> {} instructions",
                             backend->description(), report.compile_seconds, report.instructions_before,
                             report.instructions_after));
      }
    }
  }
  if (t->runner_ == nullptr) t->runner_ = make_interpreter_runner(t->program_);
  if (t->eval_tokens_) KILN_RETURN_IF_ERROR(t->build_eval(config));

  // Memory, per device, from the compiled plan: refused here, before the state exists.
  KILN_RETURN_IF_ERROR(t->check_memory(config));

  // Initial state, born sharded: each device computes only its own shard (state_init.h).
  KILN_ASSIGN_OR_RETURN(InitReport init, init_state(*t->runner_, t->program_, specs, config, step_options.adamw.mu_dtype));
  const double init_s = init.seconds;
  t->print(fmt::format("initialised {} parameter tensors in {:.3f} s (init_weights_seed={}; the init program {}, "
                       "each device making only its own shards): {:.3f} GiB of state on this process's {} device(s), "
                       "peak resident memory {:.3f} GiB",
                       t->program_.num_params, init_s, config.get_int("init_weights_seed"),
                       init.compiled ? fmt::format("compiled in {:.3f} s", init.compile_seconds)
                                     : std::string("on the reference interpreter"),
                       static_cast<double>(init.state_bytes) / (1 << 30), t->runner_->layout().local_devices,
                       static_cast<double>(init.peak_rss_bytes) / (1 << 30)));
  t->print(fmt::format("compile/trace time: {:.3f} s (trace {:.3f} s, compile {:.3f} s, init {:.3f} s); backend: {}",
                       trace_s + compile_s + init_s, trace_s, compile_s, init_s, t->runner_->name()));

  t->data_ = SyntheticData::from_config(config);
  {
    const StepRunner::Layout layout = t->runner_->layout();
    KILN_ASSIGN_OR_RETURN(BatchFeed feed, BatchFeed::make(config, layout.first_device, layout.local_devices));
    t->feed_ = std::make_unique<BatchFeed>(std::move(feed));
    if (d.num_devices > 1) {
      t->print(fmt::format("data: this process builds {} of the {} rows of each global batch (its {} device(s)' "
                           "shards)",
                           t->feed_->rows_read(), d.global_batch_size, layout.local_devices));
    }
  }

  // Checkpoints: resume from the run's latest one, else the load paths (MaxText's order).
  t->checkpointing_ = config.get_bool("enable_checkpointing");
  t->async_checkpointing_ = config.get_bool("async_checkpointing");
  t->checkpoint_period_ = config.get_int("checkpoint_period");
  t->save_on_completion_ = config.get_bool("save_checkpoint_on_completion");
  t->preemption_grace_s_ = config.get_float("preemption_grace_s");
  if (config.get_bool("skip_step_on_spikes")) {
    const int64_t interval = config.get_int("skip_step_interval");
    const double factor = config.get_float("skip_step_scaling_factor");
    if (interval < 2 || !(factor > 0)) {
      return invalid_argument("skip_step_interval={} skip_step_scaling_factor={}: the window needs at least 2 steps "
                              "and a positive factor",
                              interval, factor);
    }
    t->spikes_ = std::make_unique<SpikeWindow>(interval, factor);
  }
  t->max_checkpoints_ = config.get_int("max_num_checkpoints_to_keep");
  t->config_yaml_ = config.to_yaml();
  t->mesh_json_ = {{"axes", d.mesh.axes()}, {"ici", d.mesh.ici()}, {"dcn", d.mesh.dcn()}, {"num_devices", d.num_devices}};
  t->data_json_ = {{"type", t->tokens_ ? "tokens" : "synthetic"},
                   {"data_shuffle_seed", config.get_int("data_shuffle_seed")},
                   {"reuse_example_batch", config.get_int("reuse_example_batch")}};
  t->rng_json_ = {{"init_weights_seed", config.get_int("init_weights_seed")}};
  const std::string full_path = config.get_string("load_full_state_path");
  const std::string params_path = config.get_string("load_parameters_path");
  if (!full_path.empty() && !params_path.empty()) {
    return invalid_argument("load_parameters_path={} and load_full_state_path={}: set at most one", params_path,
                            full_path);
  }
  std::optional<std::string> resume =
      t->checkpointing_ ? checkpoint::latest(t->checkpoints_dir()) : std::optional<std::string>();
  if (resume) {
    KILN_RETURN_IF_ERROR(t->restore(*resume, /*full_state=*/true, specs, step_options.adamw.mu_dtype));
  } else if (!full_path.empty()) {
    KILN_RETURN_IF_ERROR(t->restore(full_path, /*full_state=*/true, specs, step_options.adamw.mu_dtype));
  } else if (!params_path.empty() && checkpoint::is_hf_dir(params_path)) {
    KILN_RETURN_IF_ERROR(t->restore_from_hf(params_path, specs));
  } else if (!params_path.empty()) {
    KILN_RETURN_IF_ERROR(t->restore(params_path, /*full_state=*/false, specs, step_options.adamw.mu_dtype));
  }
  // The bf16 weight copies are derived state: one cast of the parameters, fresh or restored.
  KILN_RETURN_IF_ERROR(refresh_weight_copies(*t->runner_, t->program_));
  t->log_period_ = std::max<int64_t>(1, config.get_int("log_period"));
  if (options.write_metrics_file) {
    // Every earlier record of the run stays: steps before the one resumed at are kept, those
    // of an attempt past it (and a line torn by a kill) move to PATH.discarded.
    auto open = [&](JsonlWriter& writer, const std::string& path) -> Status {
      KILN_ASSIGN_OR_RETURN(JsonlWriter::History h, writer.open_continuing(path, config.get_int("log_period"), t->step_));
      if (&writer == &t->metrics_) t->redone_s_ = h.dropped_step_s;
      if (h.kept + h.dropped + h.torn == 0) {
        t->print(fmt::format("writing per-step metrics to {}", path));
      } else {
        t->print(fmt::format("continuing per-step metrics in {}: kept the {} records before step {}{}", path, h.kept,
                             t->step_,
                             h.discarded_path.empty()
                                 ? std::string()
                                 : fmt::format("; moved {} records of steps >= {} and {} torn lines to {}", h.dropped,
                                               t->step_, h.torn, h.discarded_path)));
      }
      return ok_status();
    };
    KILN_RETURN_IF_ERROR(open(t->metrics_, (std::filesystem::path(t->output_dir_) / "metrics.jsonl").string()));
    if (!config.get_string("metrics_file").empty()) {
      KILN_RETURN_IF_ERROR(open(t->extra_metrics_, config.get_string("metrics_file")));
    }
    KILN_ASSIGN_OR_RETURN(int64_t attempts,
                          t->events_.open((std::filesystem::path(t->output_dir_) / "events.jsonl").string()));
    KILN_RETURN_IF_ERROR(t->events_.write(
        "start", t->step_,
        {{"attempt", attempts + 1},
         {"config_diff", config_diff(config)},
         {"config_sources", config_sources(config)},
         {"peaks",
          {{"f32_tflops", t->peaks_.f32_tflops},
           {"bf16_tflops", t->peaks_.bf16_tflops},
           {"compute", t->peaks_.bf16_compute ? "bf16" : "f32"},
           {"source", t->peaks_.source}}},
         {"num_devices", d.num_devices},
         {"mesh", t->mesh_json_}}));
    KILN_RETURN_IF_ERROR(t->events_.write("compile", t->step_,
                                          {{"census", compile_census(t->compile_report_)},
                                           {"trace_s", trace_s},
                                           {"compile_s", compile_s},
                                           {"init_s", init_s},
                                           {"init_compile_s", init.compile_seconds},
                                           {"init_state_bytes", init.state_bytes},
                                           {"init_peak_rss_bytes", init.peak_rss_bytes}}));
    if (!t->restored_from_.empty()) {
      KILN_RETURN_IF_ERROR(t->events_.write("checkpoint_restore", t->step_, {{"path", t->restored_from_}}));
    }
    // Started again by `kiln supervise` after a failure: say so where the run's history is.
    if (const char* previous = std::getenv("KILN_PREVIOUS_EXIT"); previous != nullptr && *previous != '\0') {
      const char* attempt = std::getenv("KILN_ATTEMPT");
      KILN_RETURN_IF_ERROR(t->events_.write(
          "restart", t->step_,
          {{"supervisor_attempt", attempt != nullptr ? std::atoll(attempt) : 0}, {"previous", previous}}));
    }
  }
  KILN_ASSIGN_OR_RETURN(t->observer_, RunObserver::create(config, {t->output_dir_, t->flops_.total_tflops(),
                                                                 t->peaks_,
                                                                 [p = t.get()](const std::string& l) { p->print(l); },
                                                                 t->step_}));
  t->runner_->set_observer(t->observer_->instruction_observer());
  t->last_step_end_ = Clock::now();
  t->startup_s_ = seconds_since(t->attempt_start_);
  return t;
}

Status Trainer::check_memory(const config::Config& config) {
  const StepRunner::Layout layout = runner_->layout();
  const config::Mesh& mesh = layout.mesh;
  const ir::Computation& entry = *program_.module->entry();
  const bool interpreted = compile_report_.planned_peak_bytes == 0;
  int64_t local_state = 0, global_state = 0;
  for (int64_t arg = 0; arg < program_.num_state(); ++arg) {
    const ir::Shape& shape = entry.param(static_cast<int>(arg))->shape();
    const ir::Sharding sharding = runner_->arg_sharding(arg);
    int64_t shards = 1;
    for (const auto& axes : sharding.dims) shards *= mesh.size(axes);
    // The reference interpreter holds every value as a double.
    const int64_t bytes = interpreted ? shape.num_elements() * 8 : shape.byte_size();
    global_state += bytes;
    local_state += bytes / shards;
  }
  MemoryCheckInput in;
  in.per_device = interpreted ? DeviceNeed{local_state, 0, 0}
                              : device_need(compile_report_, local_state,
                                            runtime::threads_per_device(config.derived().local_devices));
  in.per_device.runtime_bytes = runner_->runtime_scratch_bytes();
  in.local_devices = layout.local_devices;
  in.global_state_bytes = global_state;
  in.fsdp = mesh.size("fsdp");
  in.remat_policy = config.get_string("remat_policy");
  in.saved_activation_bytes = compile_report_.saved_activation_bytes;
  const MemoryLimit limit = process_memory_limit();
  print(fmt::format("memory per device: {:.3f} GiB planned (state {:.3f} GiB, activations and temporaries {:.3f} GiB, "
                    "thread stacks {:.3f} GiB, collective buffers {:.3f} GiB) × {} local device(s), on top of the "
                    "{:.3f} GiB this process holds now; it may use {:.2f} GiB more ({})",
                    static_cast<double>(in.per_device.total()) / (1 << 30),
                    static_cast<double>(in.per_device.state_bytes) / (1 << 30),
                    static_cast<double>(in.per_device.other_bytes) / (1 << 30),
                    static_cast<double>(in.per_device.thread_bytes) / (1 << 30),
                    static_cast<double>(in.per_device.runtime_bytes) / (1 << 30), in.local_devices,
                    static_cast<double>(current_resident_bytes()) / (1 << 30),
                    static_cast<double>(limit.bytes) / (1 << 30), limit.what));
  // What the process will hold at its peak: what it holds now (code, libraries, the traced
  // and compiled programs, MPI's buffers) plus what its devices need.
  const int64_t resident = current_resident_bytes();
  planned_process_bytes_ = resident + in.per_device.total() * in.local_devices;
  return train::check_memory(in, limit);
}

std::vector<ir::Literal> Trainer::params() const {
  std::vector<ir::Literal> out;
  for (int64_t i = 0; i < program_.num_params; ++i) out.push_back(runner_->arg(program_.param_arg(i)));
  return out;
}

std::string Trainer::checkpoints_dir() const {
  return (std::filesystem::path(output_dir_) / "checkpoints").string();
}

Result<StepRecord> Trainer::run_step() {
  const Clock::time_point step_begin = last_step_end_, feed_begin = Clock::now();
  observer_->step_begin(step_);
  if (!prefetch_) start_prefetch();
  double data_wait_s = 0;
  // Each local device's rows of the global batch, as its batch arguments.
  std::vector<HostBatch> batches = prefetch_->next(&data_wait_s);
  std::optional<uint64_t> batch_hash;
  if (tokens_) {
    // A stream that met a corrupt file stops the run here, before the step: the last
    // checkpoint and every record stay as they are.
    KILN_RETURN_IF_ERROR(tokens_->status());
    batch_hash = tokens_->batch_hash(tokens_->next_batch_index());
    tokens_->advance();
  }
  for (int64_t d = 0; d < static_cast<int64_t>(batches.size()); ++d) {
    KILN_RETURN_IF_ERROR(runner_->set_local_arg(program_.batch_arg(0), batches[d].inputs, d));
    KILN_RETURN_IF_ERROR(runner_->set_local_arg(program_.batch_arg(1), batches[d].targets, d));
    KILN_RETURN_IF_ERROR(runner_->set_local_arg(program_.batch_arg(2), batches[d].positions, d));
    KILN_RETURN_IF_ERROR(runner_->set_local_arg(program_.batch_arg(3), batches[d].segmentation, d));
  }
  runner_->set_arg(program_.step_arg(), ir::Literal::scalar(ir::DType::kS32, static_cast<double>(step_)));
  SpikeWindow::Limits limits{};
  if (spikes_) {
    limits = spikes_->limits();
    ir::Literal arg(ir::Shape(ir::DType::kF32, {2}));
    arg.mutable_values() = {limits.loss, limits.grad_norm};
    runner_->set_arg(program_.spike_limits_arg(), arg);
  }
  observer_->span("data wait + feed", "data", to_ns(feed_begin), RunObserver::now_ns());
  KILN_RETURN_IF_ERROR(runner_->run());
  auto metric = [&](StepMetric m) { return runner_->metric(m); };

  StepRecord r;
  r.step = step_;
  r.step_time_s = seconds_since(last_step_end_);
  r.data_wait_s = data_wait_s;
  r.collective_wait_s = runner_->collective_wait_s();
  last_step_end_ = Clock::now();
  productive_s_ += std::max(0.0, r.step_time_s - data_wait_s - pending_stall_s_);
  data_wait_total_s_ += data_wait_s;
  pending_stall_s_ = 0;
  r.goodput = productive_s_ / std::max(1e-9, seconds_since(attempt_start_));
  r.loss = metric(StepMetric::kLoss);
  r.total_weights = metric(StepMetric::kTotalWeights);
  r.lm_loss = r.total_weights > 0 ? metric(StepMetric::kXentSum) / r.total_weights : 0.0;
  r.moe_lb_loss = metric(StepMetric::kMoeLbLoss);
  r.z_loss = metric(StepMetric::kZLoss);
  r.grad_norm = metric(StepMetric::kGradNorm);
  r.raw_grad_norm = metric(StepMetric::kRawGradNorm);
  r.param_norm = metric(StepMetric::kParamNorm);
  r.learning_rate = metric(StepMetric::kLearningRate);
  if (r.step_time_s > 0) {
    r.tokens_per_s_per_device = tokens_per_device_ / r.step_time_s;
    r.tflops_per_s_per_device = flops_.total_tflops() / r.step_time_s;
  }
  r.mfu = mfu_or_nan(r.tflops_per_s_per_device, peaks_.compute_tflops());
  if (std::isnan(r.mfu) && !above_peak_reported_) {
    above_peak_reported_ = true;
    print(above_peak_message(r.step, r.tflops_per_s_per_device, peaks_));
    KILN_RETURN_IF_ERROR(events_.write("peak_exceeded", r.step,
                                       {{"tflops_per_s_per_device", r.tflops_per_s_per_device},
                                        {"peak_tflops", peaks_.compute_tflops()},
                                        {"peak", peaks_.source}}));
  }
  if (spikes_) {
    r.skipped = SpikeWindow::above(limits, r.loss, r.raw_grad_norm);
    spikes_->record(r.loss, r.raw_grad_norm);
  }
  if (step_ % log_period_ == 0) r.expert_load = runner_->expert_load();
  if (tokens_) r.data_tokens = tokens_->consumed_tokens();
  if (batch_hash) r.batch_hash = fmt::format("{:016x}", *batch_hash);

  print(console_line(r));
  if (metrics_.is_open()) KILN_RETURN_IF_ERROR(metrics_.write(r));
  if (extra_metrics_.is_open()) KILN_RETURN_IF_ERROR(extra_metrics_.write(r));
  KILN_RETURN_IF_ERROR(observer_->step_end(r, to_ns(step_begin), to_ns(last_step_end_)));
  history_.push_back(r);
  if (r.skipped) {
    ++skipped_steps_;
    print(fmt::format("step {} skipped (skip_step_on_spikes): loss {:.4g} (limit {:.4g}), raw gradient norm {:.4g} "
                      "(limit {:.4g}); the parameters and optimizer state are those of the step before",
                      r.step, r.loss, limits.loss, r.raw_grad_norm, limits.grad_norm));
    KILN_RETURN_IF_ERROR(events_.write("spike_skipped", r.step,
                                       {{"loss", r.loss},
                                        {"loss_limit", limits.loss},
                                        {"raw_grad_norm", r.raw_grad_norm},
                                        {"grad_norm_limit", limits.grad_norm}}));
  }
  if (r.data_wait_s > kDataStallSeconds) {
    KILN_RETURN_IF_ERROR(events_.write("data_stall", r.step, {{"wait_s", r.data_wait_s}}));
  }
  ++step_;
  Status loss_ok = check_loss(r);
  if (!loss_ok.ok()) {
    (void)metrics_.flush();
    (void)extra_metrics_.flush();
    return loss_ok;
  }
  if (eval_tokens_ && step_ % eval_interval_ == 0) {
    const Clock::time_point eval_begin = Clock::now();
    KILN_ASSIGN_OR_RETURN(double eval_loss, evaluate());
    eval_total_s_ += seconds_since(eval_begin);
    pending_stall_s_ += seconds_since(eval_begin);
    KILN_RETURN_IF_ERROR(observer_->eval(step_, eval_loss));
    KILN_RETURN_IF_ERROR(events_.write("eval", step_, {{"eval_loss", eval_loss}}));
  }
  return r;
}

void Trainer::start_prefetch() {
  // The producer runs on the prefetch thread only; it reads the pipeline's layout (never its
  // position, which this thread advances) or numbers synthetic batches. Either way it makes
  // only this process's rows (batch_feed.h).
  const BatchFeed* feed = feed_.get();
  if (tokens_) {
    data::BatchSource* p = tokens_.get();
    prefetch_ = std::make_unique<data::Prefetcher<std::vector<HostBatch>>>(
        [p, feed](int64_t k) {
          return feed->build([p, k](int64_t first, int64_t count) { return to_host_batch(p->rows(k, first, count)); });
        },
        p->next_batch_index(), prefetch_depth_);
  } else {
    // SyntheticData::take() knows reuse_example_batch; a restore has already skipped ahead.
    SyntheticData* s = &data_;
    prefetch_ = std::make_unique<data::Prefetcher<std::vector<HostBatch>>>(
        [s, feed](int64_t) {
          const int64_t k = s->take();
          return feed->build([s, k](int64_t first, int64_t count) { return s->rows(k, first, count); });
        },
        0, prefetch_depth_);
  }
}

Status Trainer::check_loss(const StepRecord& r) const {
  if (std::isnan(r.loss) && abort_on_nan_) {
    return failed_precondition("loss is NaN at step {}; stopping the run (abort_on_nan_loss=true)", r.step);
  }
  if (std::isinf(r.loss) && abort_on_inf_) {
    return failed_precondition("loss is {} at step {}; stopping the run (abort_on_inf_loss=true)",
                               r.loss > 0 ? "+Inf" : "-Inf", r.step);
  }
  return ok_status();
}

void Trainer::write_run_report(bool announce) {
  if (!events_.is_open()) return;  // not the process that writes the run's files
  const std::string path = (std::filesystem::path(output_dir_) / "report.html").string();
  Status st = report::write_report(output_dir_);
  if (!st.ok()) {
    print(fmt::format("note: report.html not written: {}", st.message()));
  } else if (announce) {
    print(fmt::format("report: {} (kiln report --follow {} keeps one live)", path, output_dir_));
  }
}

int Trainer::stop_requested() const {
  return static_cast<int>(runner_->max_over_ranks(PreemptionGuard::requested()));
}

Status Trainer::stop_for_preemption(int signal) {
  preempted_by_ = signal;
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a stop signal";
  if (checkpointing_ && last_saved_step_ != step_ && restored_step_ != step_) {
    print(fmt::format("preempted ({}): saving the checkpoint of step {} before exiting", name, step_));
    // Synchronous: the process is about to go, a background save would go with it.
    async_checkpointing_ = false;
    KILN_RETURN_IF_ERROR(save_checkpoint());
  }
  KILN_RETURN_IF_ERROR(wait_for_checkpoint());
  KILN_RETURN_IF_ERROR(metrics_.flush());
  KILN_RETURN_IF_ERROR(extra_metrics_.flush());
  KILN_RETURN_IF_ERROR(observer_->finish());
  KILN_RETURN_IF_ERROR(write_goodput(/*final=*/true));
  print_goodput();
  KILN_RETURN_IF_ERROR(events_.write("preempted", step_,
                                     {{"signal", name},
                                      {"checkpoint_step", checkpointing_ ? last_saved_step_ : -1},
                                      {"seconds_after_signal", PreemptionGuard::seconds_since_request()}}));
  print(fmt::format("preempted ({}) after step {}: {}; exiting with code {} (resume: run the same command)", name,
                    step_,
                    checkpointing_ ? fmt::format("the state is in checkpoint {}", last_saved_step_)
                                   : std::string("enable_checkpointing=false, no checkpoint written"),
                    kExitPreempted));
  write_run_report(/*announce=*/false);
  return ok_status();
}

Status Trainer::write_goodput(bool final) {
  if (!events_.is_open()) return ok_status();
  const double wall = seconds_since(attempt_start_);
  const double other =
      std::max(0.0, wall - startup_s_ - productive_s_ - data_wait_total_s_ - checkpoint_total_s_ - eval_total_s_);
  return events_.write("goodput", step_,
                       {{"final", final},
                        {"wall_s", wall},
                        {"startup_s", startup_s_},
                        {"productive_s", productive_s_},
                        {"data_wait_s", data_wait_total_s_},
                        {"checkpoint_s", checkpoint_total_s_},
                        {"eval_s", eval_total_s_},
                        {"other_s", other},
                        {"redone_s", redone_s_},
                        {"goodput", wall > 0 ? productive_s_ / wall : 0.0}});
}

void Trainer::print_goodput() {
  if (!events_.is_open()) return;
  std::ifstream in(events_.path());
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) events.push_back(std::move(j));
  }
  const report::RunGoodput run = report::run_goodput(events);
  if (run.attempts.empty()) return;
  print(report::goodput_line(run.attempts.back(), run));
}

Status Trainer::run() {
  const PreemptionGuard guard(preemption_grace_s_);
  while (step_ < steps_) {
    if (const int signal = stop_requested(); signal != 0) return stop_for_preemption(signal);
    Result<StepRecord> r = run_step();
    if (!r.ok()) return r.status();
    if (checkpointing_ && checkpoint_period_ > 0 && step_ % checkpoint_period_ == 0) {
      KILN_RETURN_IF_ERROR(save_checkpoint());
    }
  }
  if (checkpointing_ && save_on_completion_ && last_saved_step_ != step_ && restored_step_ != step_) {
    KILN_RETURN_IF_ERROR(save_checkpoint());
  }
  KILN_RETURN_IF_ERROR(wait_for_checkpoint());
  if (history_.empty() && restored_step_ >= steps_) {
    print(fmt::format("nothing to run: resumed from the checkpoint of step {}, and steps={}", restored_step_, steps_));
  }
  KILN_RETURN_IF_ERROR(metrics_.flush());
  KILN_RETURN_IF_ERROR(extra_metrics_.flush());
  KILN_RETURN_IF_ERROR(observer_->finish());
  if (const std::optional<Attribution>& a = observer_->attribution()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const AttributionRow& row : a->rows) {
      rows.push_back({{"name", row.name},
                      {"seconds", row.seconds},
                      {"percent", row.percent},
                      {"rate", row.rate},
                      {"mfu_without", row.mfu_without}});
    }
    KILN_RETURN_IF_ERROR(events_.write("attribution", step_, {{"step_s", a->step_s}, {"mfu", a->mfu}, {"rows", rows}}));
  }
  // The plan beside what the process really held at its peak (VmHWM).
  const int64_t peak = peak_resident_bytes();
  if (planned_process_bytes_ > 0 && peak > 0) {
    // Every rank's own figure: rank 0 on the console, the others on stderr.
    const StepRunner::Layout layout = runner_->layout();
    const std::string line = fmt::format(
        "memory: rank {}/{}: peak resident {:.3f} GiB, planned {:.3f} GiB (its devices' plan and what it held "
        "before the state) ({:+.1f}%)",
        layout.rank, layout.num_ranks, static_cast<double>(peak) / (1 << 30),
        static_cast<double>(planned_process_bytes_) / (1 << 30),
        100.0 * (static_cast<double>(peak) / static_cast<double>(planned_process_bytes_) - 1.0));
    if (options_.console != nullptr) {
      print(line);
    } else if (layout.rank > 0) {
      fmt::print(stderr, "{}\n", line);
    }
  }
  KILN_RETURN_IF_ERROR(write_goodput(/*final=*/true));
  KILN_RETURN_IF_ERROR(events_.write("finish", step_, {{"peak_rss_bytes", peak}, {"planned_bytes", planned_process_bytes_}}));
  print_goodput();
  if (!history_.empty()) {
    const StepRecord& last = history_.back();
    print(fmt::format("finished {} steps: loss {:.3f} -> {:.3f}", history_.size(), history_.front().loss, last.loss));
  }
  write_run_report(/*announce=*/true);  // last: the line a person looks for
  return ok_status();
}

}  // namespace kiln::train
