#include "kiln/plan/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/backend/cpu/codegen/compile_cache.h"
#include "kiln/backend/cpu/gemm/cpu_peak.h"
#include "kiln/ops/device_context.h"
#include "kiln/plan/cost_model.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/train/trainer.h"

namespace kiln::plan {
namespace {

using Clock = std::chrono::steady_clock;
using train::KernelKind;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Ordinary least squares of t = a + b x; returns {a, b}.
std::pair<double, double> linear_fit(const std::vector<std::pair<double, double>>& s) {
  const double n = static_cast<double>(s.size());
  double sx = 0, st = 0, sxx = 0, sxt = 0;
  for (const auto& [x, t] : s) {
    sx += x, st += t, sxx += x * x, sxt += x * t;
  }
  const double det = n * sxx - sx * sx;
  if (n < 2 || det <= 0) return {0, sx > 0 ? st / sx : 0};
  const double b = (n * sxt - sx * st) / det;
  return {(st - b * sx) / n, b};
}

// Each local device at once runs a triad (a = b + s c) over arrays far larger than the
// caches on its own threads; the best of 5 passes, per device, averaged over devices.
double measure_bandwidth_gbs(int64_t devices) {
  constexpr size_t kFloats = size_t{24} << 20;  // 96 MiB per array
  std::vector<double> gbs(static_cast<size_t>(devices), 0);
  Status s = runtime::run_on_devices(devices, [&](int64_t d) -> Status {
    std::vector<float> a(kFloats), b(kFloats), c(kFloats);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < kFloats; ++i) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 1e30;
    for (int pass = 0; pass < 5; ++pass) {
      const auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < kFloats; ++i) a[i] = b[i] + 0.5f * c[i];
      best = std::min(best, seconds_since(t0));
    }
    // STREAM's convention: two arrays read and one written.
    gbs[static_cast<size_t>(d)] = 3.0 * kFloats * sizeof(float) / best / 1e9 + 0 * a[kFloats / 2];
    return ok_status();
  });
  KILN_CHECK(s.ok()) << s.to_string();
  double sum = 0;
  for (double g : gbs) sum += g;
  return sum / static_cast<double>(devices);
}

Result<Link> measure_local_link(int64_t devices) {
  runtime::LocalWorld world(devices);
  return measure_link(world, fmt::format("shared memory between {} virtual devices", devices));
}

// Times every instruction device 0 runs (the others run the same program).
class InstructionTimer : public backend::InstructionObserver {
 public:
  struct Sample {
    const ir::Instr* instr;
    double seconds;
  };
  void on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) override {
    if (ops::current_device().device != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back({&instr, 1e-9 * static_cast<double>(end_ns - begin_ns)});
  }
  std::vector<Sample> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(samples_);
  }

 private:
  std::mutex mu_;
  std::vector<Sample> samples_;
};

// One timed kernel, described while its executable is alive.
struct TimedKernel {
  train::InstrInfo info;
  bool bf16 = false;
  double seconds = 0;
};

struct StepTiming {
  std::vector<TimedKernel> kernels;  // device 0's compute kernels, over the measured steps
  int64_t instructions = 0;          // every instruction device 0 ran in them
  double inside_s = 0;               // their time inside instructions
  double wall_s = 0;                 // the measured steps' wall time
  int64_t steps = 0;
};

// The config's step with `extra` settings, run quietly for warm-up + measured steps.
Result<StepTiming> time_steps(const std::vector<std::string>& settings, const std::vector<std::string>& extra,
                              const CalibrateOptions& options) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / fmt::format("kiln_calibrate_{}", getpid());
  std::vector<std::string> all = settings;
  all.insert(all.end(), extra.begin(), extra.end());
  for (const std::string& s :
       {fmt::format("steps={}", options.warmup_steps + options.measured_steps), std::string("enable_checkpointing=false"),
        std::string("run_name=calibrate"), "base_output_directory=" + out.string(), std::string("dataset_type=synthetic"),
        std::string("profiler="), std::string("report=false"), std::string("eval_interval=-1")}) {
    all.push_back(s);
  }
  KILN_ASSIGN_OR_RETURN(config::Config cfg, config::load(all));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model, models::make_model(cfg));
  train::TrainerOptions topts;
  topts.console = nullptr;
  topts.write_metrics_file = false;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer, train::Trainer::create(cfg, std::move(model), topts));
  for (int i = 0; i < options.warmup_steps; ++i) KILN_RETURN_IF_ERROR(trainer->run_step().status());
  InstructionTimer timer;
  trainer->set_instruction_observer(&timer);
  StepTiming timing;
  const auto t0 = Clock::now();
  for (int i = 0; i < options.measured_steps; ++i) KILN_RETURN_IF_ERROR(trainer->run_step().status());
  timing.wall_s = seconds_since(t0);
  trainer->set_instruction_observer(nullptr);
  timing.steps = options.measured_steps;
  // Described before the trainer (and the instructions with it) goes.
  std::unordered_map<const ir::Instr*, std::optional<train::InstrInfo>> infos;
  for (const InstructionTimer::Sample& s : timer.take()) {
    ++timing.instructions;
    timing.inside_s += s.seconds;
    auto it = infos.find(s.instr);
    if (it == infos.end()) it = infos.emplace(s.instr, describe_kernel(*s.instr)).first;
    if (it->second) timing.kernels.push_back({*it->second, computes_in_bf16(*s.instr), s.seconds});
  }
  trainer.reset();
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
  return timing;
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

}  // namespace

Result<Link> measure_link(runtime::World& world, const std::string& name) {
  Link link;
  link.name = name;
  const int64_t devices = world.num_devices(), local = world.local_devices();
  runtime::Group group;
  for (int64_t d = 0; d < devices; ++d) group.push_back(d);
  const std::vector<size_t> chunks = {size_t{4} << 10, size_t{256} << 10, size_t{4} << 20, size_t{32} << 20};
  std::vector<std::vector<double>> best(static_cast<size_t>(local), std::vector<double>(chunks.size(), 1e30));
  KILN_RETURN_IF_ERROR(runtime::run_on_devices(world, [&](int64_t d) -> Status {
    runtime::Collectives& c = world.device(d);
    for (size_t k = 0; k < chunks.size(); ++k) {
      std::vector<char> in(chunks[k], static_cast<char>(d)), out(chunks[k] * static_cast<size_t>(devices));
      for (int rep = 0; rep < 7; ++rep) {
        KILN_RETURN_IF_ERROR(c.barrier(group));
        const auto t0 = Clock::now();
        KILN_RETURN_IF_ERROR(c.all_gather(group, in.data(), in.size(), out.data())->wait());
        best[static_cast<size_t>(d)][k] = std::min(best[static_cast<size_t>(d)][k], seconds_since(t0));
      }
    }
    return ok_status();
  }));
  const double g = static_cast<double>(devices);
  std::vector<std::pair<double, double>> samples;  // (ring bytes, seconds), the slowest member here
  for (size_t k = 0; k < chunks.size(); ++k) {
    double t = 0;
    for (int64_t d = 0; d < local; ++d) t = std::max(t, best[static_cast<size_t>(d)][k]);
    samples.push_back({(g - 1) / g * static_cast<double>(chunks[k]) * g, t});
  }
  auto [a, b] = linear_fit(samples);
  if (b <= 0) b = samples.back().second / samples.back().first;
  link.bandwidth_gbs = 1.0 / b / 1e9;
  link.latency_us = std::max(0.0, a) / (g - 1) * 1e6;
  return link;
}

KernelRate fit_kernel_rate(const std::vector<std::pair<double, double>>& samples) {
  KernelRate r;
  if (samples.empty()) return r;
  double lo = samples.front().first, hi = lo;
  for (const auto& [x, t] : samples) lo = std::min(lo, x), hi = std::max(hi, x);
  auto [a, b] = linear_fit(samples);
  // Kernels of (nearly) one size cannot tell a fixed cost from a rate: proportional then.
  if (b <= 0 || a < 0 || hi < 4 * lo) {
    // Through the origin when the intercept comes out negative (or the slope does).
    double sxt = 0, sxx = 0, st = 0, sx = 0;
    for (const auto& [x, t] : samples) sxt += x * t, sxx += x * x, st += t, sx += x;
    a = 0;
    b = sxx > 0 ? sxt / sxx : 0;
    if (b <= 0) b = sx > 0 ? st / sx : 1;
  }
  r.fixed_us = a * 1e6;
  r.efficiency = b > 0 ? 1.0 / b : 1.0;
  return r;
}

Result<Target> calibrate_cpu(const std::vector<std::string>& settings, const CalibrateOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  KILN_ASSIGN_OR_RETURN(config::Config cfg, config::load(settings));
  const int64_t devices = cfg.derived().local_devices;
  const int threads = runtime::threads_per_device(devices);
  Target t;
  t.name = "cpu";
  const backend::cpu::CpuPeak peak = backend::cpu::cached_cpu_peak(threads, backend::cpu::default_cache_dir());
  t.peak_tflops_f32 = peak.f32_tflops;
  t.peak_tflops_bf16 = peak.bf16_tflops;
  log("peaks: " + backend::cpu::describe(peak));
  t.description = fmt::format("{}, {} thread(s) per device, {} virtual device(s) per process", peak.cpu_model,
                              threads, devices);
  t.memory_bandwidth_gbs = measure_bandwidth_gbs(devices);
  log(fmt::format("memory bandwidth: {:.1f} GB/s per device ({} device(s) at once)", t.memory_bandwidth_gbs, devices));
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  t.memory_gib = ram / static_cast<double>(devices) / (1 << 30);
  t.devices_per_node = devices;
  if (devices > 1) {
    KILN_ASSIGN_OR_RETURN(t.intra, measure_local_link(devices));
  } else {
    t.intra = {"none (one device)", t.memory_bandwidth_gbs, 0};
  }
  log(fmt::format("link: {:.1f} GB/s, {:.1f} us per hop ({})", t.intra.bandwidth_gbs, t.intra.latency_us, t.intra.name));
  t.inter = t.intra;
  t.inter.name = "MPI between ranks (not measured: the intra figures)";
  if (options.inter_link) {
    Result<Link> inter = options.inter_link();
    if (inter.ok()) {
      t.inter = *inter;
      log(fmt::format("inter link: {:.1f} GB/s, {:.1f} us per hop ({})", t.inter.bandwidth_gbs, t.inter.latency_us,
                      t.inter.name));
    } else {
      t.inter.name = "MPI between ranks (not measured: " + inter.status().message() + "; the intra figures)";
      log("inter link not measured: " + inter.status().message());
    }
  }

  // The step's own kernels, f32 and bf16: per class (roofline seconds, measured seconds).
  std::vector<std::pair<double, double>> per_class[static_cast<int>(KernelKind::kCount)];
  std::vector<std::pair<double, double>> per_class_bf16[static_cast<int>(KernelKind::kCount)];  // the bf16 step's
  double gap_s = 0;
  int64_t gap_instructions = 0;
  Target unit = t;  // efficiency 1 and no fixed cost: the roofline alone
  for (const bool bf16_step : {false, true}) {
    const char* dtype = bf16_step ? "bfloat16" : "float32";
    KILN_ASSIGN_OR_RETURN(StepTiming timing, time_steps(settings, {std::string("dtype=") + dtype}, options));
    for (const TimedKernel& k : timing.kernels) {
      auto& samples = bf16_step ? per_class_bf16 : per_class;
      samples[static_cast<int>(k.info.kind)].push_back(
          {roofline_seconds(unit, k.info.kind, k.info.flops, k.info.bytes, k.bf16), k.seconds});
    }
    gap_s += std::max(0.0, timing.wall_s - timing.inside_s);
    gap_instructions += timing.instructions;
    log(fmt::format("{} step: {:.3f} s per step, {} instructions per step, {:.1f}% of the wall time inside them", dtype,
                    timing.wall_s / static_cast<double>(timing.steps), timing.instructions / timing.steps,
                    100.0 * timing.inside_s / timing.wall_s));
  }
  for (KernelKind kind : kKernelClasses) {
    const auto& s = per_class[static_cast<int>(kind)];
    KernelRate& r = t.rate(kind);
    if (s.empty()) {
      // The step has none: the gemm's rate stands in (a model with them gets a rate when
      // calibrated with it).
      r = t.rate(KernelKind::kGemm);
      continue;
    }
    r = fit_kernel_rate(s);
    log(fmt::format("{}: {} kernels timed, efficiency {:.3f}, fixed {:.1f} us", kernel_class_key(kind), s.size(),
                    r.efficiency, r.fixed_us));
  }
  // The bf16 step's kernels: their own rates (they convert, and on a CPU without bf16
  // instructions the products widen).
  t.bf16_rates = true;
  for (KernelKind kind : kKernelClasses) {
    const auto& s = per_class_bf16[static_cast<int>(kind)];
    KernelRate& r = t.kernels_bf16[static_cast<int>(kind)];
    r = s.empty() ? t.rate(kind) : fit_kernel_rate(s);
    if (!s.empty()) {
      log(fmt::format("{} (bf16 step): {} kernels timed, efficiency {:.3f}, fixed {:.1f} us", kernel_class_key(kind), s.size(),
                      r.efficiency, r.fixed_us));
    }
  }
  t.host_us_per_kernel = gap_instructions > 0 ? 1e6 * gap_s / static_cast<double>(gap_instructions) : 0;
  log(fmt::format("host: {:.1f} us between instructions", t.host_us_per_kernel));
  t.calibrated = fmt::format("{} by kiln plan --calibrate {}", today(), fmt::join(settings, " "));
  t.sources = {fmt::format("measured on this machine by kiln plan --calibrate on {}: peaks by the FMA and bf16 "
                           "dot-product loops (backend/cpu/gemm/cpu_peak.h), bandwidth by a triad, the links by all-gathers "
                           "between virtual devices and between MPI ranks, kernel classes and host time from the "
                           "config's own step",
                           today())};
  return t;
}

}  // namespace kiln::plan
