#include "kiln/train/observability/observability.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace kiln::train {

Result<std::unique_ptr<RunObserver>> RunObserver::create(const config::Config& config, Options options) {
  std::unique_ptr<RunObserver> o(new RunObserver());
  o->options_ = std::move(options);
  o->log_period_ = std::max<int64_t>(1, config.get_int("log_period"));
  if (config.get_bool("enable_tensorboard")) {
    const std::string dir = (std::filesystem::path(o->options_.output_dir) / "tensorboard").string();
    Status st = o->tensorboard_.open(dir);
    if (!st.ok()) return st.with_context("enable_tensorboard=true");
    // A restart of this run: events of an interrupted attempt past first_step are dropped by
    // TensorBoard's readers, so steps before it keep the values logged then.
    if (o->tensorboard_.continues_earlier_files()) {
      st = o->tensorboard_.add_session_start(o->options_.first_step);
      if (st.ok()) st = o->tensorboard_.flush();
      if (!st.ok()) return st.with_context("enable_tensorboard=true");
    }
  }
  o->trace_ = config.get_string("profiler") == "trace";
  o->report_ = config.get_bool("report");
  const int64_t skip = config.get_int("skip_first_n_steps_for_profiler");
  if (o->trace_) {
    o->first_step_ = skip;
    o->last_step_ = skip + config.get_int("profiler_steps") - 1;
    o->trace_path_ = (std::filesystem::path(o->options_.output_dir) / "profile" / "trace.json").string();
  } else if (o->report_) {
    // Skip warm-up steps only when there are steps left to observe afterwards.
    o->first_step_ = skip < config.derived().steps ? skip : 0;
  }
  if (o->trace_ || o->report_) o->recorder_ = std::make_unique<TraceRecorder>(o->trace_);
  return o;
}

bool RunObserver::observed(int64_t step) const {
  return recorder_ != nullptr && step >= first_step_ && (last_step_ < 0 || step <= last_step_);
}

void RunObserver::step_begin(int64_t step) {
  current_step_ = step;
  in_step_ = true;
  if (observed(step)) recorder_->begin_step(step);
}

void RunObserver::span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns) {
  // Between steps (logging, checkpoint saves) a span belongs to the next step: its wall
  // time runs from the end of this one.
  const int64_t owner = in_step_ ? current_step_ : current_step_ + 1;
  if (observed(owner)) recorder_->host_span(name, category, begin_ns, end_ns);
}

Status RunObserver::step_end(const StepRecord& r, int64_t begin_ns, int64_t end_ns) {
  in_step_ = false;
  if (observed(r.step)) {
    recorder_->end_step(r.step, begin_ns, end_ns);
    if (r.step == last_step_) KILN_RETURN_IF_ERROR(write_profile());
  }
  KILN_RETURN_IF_ERROR(write_tensorboard(r));
  // The console line, metrics files and TensorBoard, written after the step's clock stopped.
  span("log metrics", "host", end_ns, now_ns());
  return ok_status();
}

std::vector<Scalar> tensorboard_scalars(const StepRecord& r) {
  // MaxText's TensorBoard tags (metric_logger), plus Kiln's MFU and expert load.
  std::vector<Scalar> s = {
      {"learning/loss", static_cast<float>(r.loss)},
      {"learning/lm_loss", static_cast<float>(r.lm_loss)},
      {"learning/moe_lb_loss", static_cast<float>(r.moe_lb_loss)},
      {"learning/z_loss", static_cast<float>(r.z_loss)},
      {"learning/grad_norm", static_cast<float>(r.grad_norm)},
      {"learning/raw_grad_norm", static_cast<float>(r.raw_grad_norm)},
      {"learning/param_norm", static_cast<float>(r.param_norm)},
      {"learning/current_learning_rate", static_cast<float>(r.learning_rate)},
      {"learning/total_weights", static_cast<float>(r.total_weights)},
      {"perf/step_time_seconds", static_cast<float>(r.step_time_s)},
      {"perf/data_wait_seconds", static_cast<float>(r.data_wait_s)},
      {"perf/per_device_tokens_per_sec", static_cast<float>(r.tokens_per_s_per_device)},
      {"perf/per_device_tflops_per_sec", static_cast<float>(r.tflops_per_s_per_device)},
  };
  // A rate above the peak has no MFU (peaks.h): no point rather than a NaN in the curve.
  if (!std::isnan(r.mfu)) s.push_back({"perf/mfu", static_cast<float>(r.mfu)});
  // Only where the console line has it (a mesh of several devices): one device has no
  // collectives, and a flat zero curve would read as "perfectly overlapped".
  if (r.collective_wait_s >= 0) s.push_back({"perf/collective_wait_seconds", static_cast<float>(r.collective_wait_s)});
  // Per MoE layer: max and mean (token, expert) pairs per expert, dropped pairs, and the
  // imbalance max/mean (1 = perfectly balanced).
  for (size_t i = 0; i + 2 < r.expert_load.size(); i += 3) {
    const std::string layer = fmt::format("moe/layer_{}/", i / 3);
    const double max = r.expert_load[i], mean = r.expert_load[i + 1];
    s.push_back({layer + "expert_load_max", static_cast<float>(max)});
    s.push_back({layer + "expert_load_mean", static_cast<float>(mean)});
    s.push_back({layer + "dropped", static_cast<float>(r.expert_load[i + 2])});
    s.push_back({layer + "load_imbalance", static_cast<float>(mean > 0 ? max / mean : 0.0)});
  }
  return s;
}

Status RunObserver::write_tensorboard(const StepRecord& r) {
  if (!tensorboard_.is_open()) return ok_status();
  const std::vector<Scalar> s = tensorboard_scalars(r);
  KILN_RETURN_IF_ERROR(tensorboard_.add(r.step, s));
  if (++pending_ >= log_period_) {
    pending_ = 0;
    return tensorboard_.flush();
  }
  return ok_status();
}

Status RunObserver::eval(int64_t step, double eval_loss) {
  if (!tensorboard_.is_open()) return ok_status();
  KILN_RETURN_IF_ERROR(tensorboard_.add(step, {{"eval/avg_loss", static_cast<float>(eval_loss)}}));
  return tensorboard_.flush();
}

Status RunObserver::write_profile() {
  if (profile_written_ || recorder_ == nullptr || recorder_->totals().steps == 0) return ok_status();
  profile_written_ = true;
  const std::filesystem::path dir = std::filesystem::path(options_.output_dir) / "profile";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create {}: {}", dir.string(), ec.message());
  if (trace_) {
    KILN_RETURN_IF_ERROR(recorder_->write_json(trace_path_));
    if (options_.print) {
      options_.print(fmt::format("profiler: wrote {} events of steps {}..{} to {} (open in ui.perfetto.dev or "
                                 "chrome://tracing)",
                                 recorder_->event_count(), first_step_, last_step_, trace_path_));
    }
  }
  std::ofstream(dir / "gemm_shapes.jsonl") << gemm_shapes_jsonl(recorder_->totals());
  return ok_status();
}

Status RunObserver::finish() {
  KILN_RETURN_IF_ERROR(tensorboard_.flush());
  if (recorder_ == nullptr || recorder_->totals().steps == 0) return ok_status();
  KILN_RETURN_IF_ERROR(write_profile());
  const StepTotals& totals = recorder_->totals();
  Attribution a = attribute(totals, options_.model_tflops, options_.peaks);
  const std::string table = attribution_table(a, totals, options_.peaks);
  std::ofstream(std::filesystem::path(options_.output_dir) / "profile" / "attribution.txt") << table << "\n";
  attribution_ = a;
  if (options_.print) options_.print(table);
  return ok_status();
}

}  // namespace kiln::train
