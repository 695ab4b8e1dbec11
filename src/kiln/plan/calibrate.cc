#include "kiln/plan/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/backend/buffer.h"
#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/registry.h"
#include "kiln/plan/attention_cost.h"
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

// Times every instruction every local device runs.
class InstructionTimer : public backend::InstructionObserver {
 public:
  struct Sample {
    const ir::Instr* instr;
    int64_t device;
    double seconds;
  };
  void on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) override {
    const int64_t device = ops::current_device().device;
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back({&instr, device, 1e-9 * static_cast<double>(end_ns - begin_ns)});
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
  std::string opcode;
  std::string signature;  // a fused kernel's fusion_signature; "" otherwise
  bool bf16 = false;
  std::string out_dtype;  // the result's ("f32", "bf16")
  double seconds = 0;
  std::optional<AttentionWork> attention;  // an attention kernel's work on the CPU's tiles
};

// The tiles the CPU backend's flash kernels walk (query rows, key columns).
backend::AttentionTiles cpu_tiles() { return backend::cpu_backend().attention_tiles(); }

struct StepTiming {
  std::vector<TimedKernel> kernels;  // device 0's compute kernels, over the measured steps
  int64_t instructions = 0;          // every instruction device 0 ran in them
  double inside_s = 0;               // their time inside instructions
  double wall_s = 0;                 // the measured steps' wall time
  CollectiveSplit collectives;       // per step, over every local device
  double link_collective_s = 0;      // per step: the same collectives by the link figures alone
  int64_t steps = 0;
};

// The device's own time in a collective: an async start or done, or a collective run
// synchronously (what the attribution report's collective rows count).
bool waits_for_collective(const ir::Instr& instr) {
  return !ops::op_def(instr.opcode()).plumbing && !train::describe_instruction(instr).collective.empty();
}

// Gives every instruction of `samples` (one device's, `steps` steps in the order it ran them)
// its median time over the steps, when every step ran the same instructions: on a shared
// machine a step in which the OS took the device's core away, or the machine slowed for a
// moment, then moves the fitted rates far less than in a sum (the calibration step's own time
// moved by up to two thirds between calibrations a few minutes apart).
void use_median_over_steps(std::vector<InstructionTimer::Sample>& samples, int steps) {
  const size_t n = static_cast<size_t>(std::max(1, steps));
  const size_t per_step = samples.size() / n;
  if (n < 3 || per_step == 0 || per_step * n != samples.size()) return;
  for (size_t i = 0; i < per_step; ++i) {
    for (size_t k = 1; k < n; ++k) {
      if (samples[k * per_step + i].instr != samples[i].instr) return;  // the steps differ
    }
  }
  std::vector<double> times(n);
  for (size_t i = 0; i < per_step; ++i) {
    for (size_t k = 0; k < n; ++k) times[k] = samples[k * per_step + i].seconds;
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(n / 2), times.end());
    const double median = times[n / 2];
    for (size_t k = 0; k < n; ++k) samples[k * per_step + i].seconds = median;
  }
}

// How split_collective_time sees an instruction (seconds unset).
TimedInstruction timed_instruction(const ir::Instr& instr) {
  const ops::OpDef& def = ops::op_def(instr.opcode());
  TimedInstruction t;
  t.collective = waits_for_collective(instr);
  t.issues = t.collective && def.async_role != ops::AsyncRole::kDone;
  t.kernel = !t.collective && !def.plumbing && !def.aliases_operand;
  return t;
}

// The config's step with `extra` settings, run quietly for warm-up + measured steps; its
// collectives costed on `links` (the target as far as its links are measured).
Result<StepTiming> time_steps(const std::vector<std::string>& settings, const std::vector<std::string>& extra,
                              const CalibrateOptions& options, const Target& links) {
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
  std::unordered_map<const ir::Instr*, std::optional<train::InstrInfo>> infos;
  std::map<int64_t, std::vector<TimedInstruction>> by_device;  // every device, in the order it ran them
  std::vector<InstructionTimer::Sample> samples;                // device 0's (the kernel rates')
  std::unordered_map<const ir::Instr*, TimedInstruction> classified;  // once per instruction, not per run
  for (const InstructionTimer::Sample& s : timer.take()) {
    auto it = classified.find(s.instr);
    if (it == classified.end()) it = classified.emplace(s.instr, timed_instruction(*s.instr)).first;
    TimedInstruction t = it->second;
    t.seconds = s.seconds;
    by_device[s.device].push_back(t);
    if (s.device == 0) samples.push_back(s);
  }
  std::vector<std::vector<TimedInstruction>> per_device;
  for (auto& [device, instrs] : by_device) per_device.push_back(std::move(instrs));
  timing.collectives = split_collective_time(per_device, options.measured_steps);
  const size_t per_step = samples.size() / static_cast<size_t>(std::max(1, options.measured_steps));
  std::vector<const ir::Instr*> last_step;  // in the order device 0 ran them
  for (size_t i = samples.size() - per_step; i < samples.size(); ++i) last_step.push_back(samples[i].instr);
  for (const InstructionTimer::Sample& s : samples) {
    ++timing.instructions;
    timing.inside_s += s.seconds;
  }
  use_median_over_steps(samples, options.measured_steps);
  for (const InstructionTimer::Sample& s : samples) {
    auto it = infos.find(s.instr);
    if (it == infos.end()) it = infos.emplace(s.instr, describe_kernel(*s.instr)).first;
    if (it->second) {
      timing.kernels.push_back(
          {*it->second, std::string(ir::opcode_name(s.instr->opcode())),
           it->second->kind == KernelKind::kFused ? fusion_signature(*s.instr) : std::string(),
           computes_in_bf16(*s.instr), result_dtype(*s.instr), s.seconds,
           attention_work(*s.instr, cpu_tiles().queries, cpu_tiles().keys)});
    }
  }
  timing.link_collective_s = predict_step(last_step, cfg.derived().mesh, links).collective_s;
  trainer.reset();
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
  return timing;
}

// One attention (or attention_grad) kernel alone, as a step's layer runs it: q [B,T,H,Dh],
// k and v [B,T,K,Dh] in `dtype`, sinks [H], one segment id per token, causal, `window` keys
// (0: all). The program's text.
std::string attention_program(const AttentionShape& s, bool grad) {
  const char* dt = s.bf16 ? "bf16" : "f32";
  const std::string q = fmt::format("{}[{},{},{},{}]", dt, s.batch, s.length, s.heads, s.head_dim);
  const std::string kv = fmt::format("{}[{},{},{},{}]", dt, s.batch, s.length, s.kv_heads, s.head_dim);
  const std::string lse = fmt::format("f32[{},{},{}]", s.batch, s.heads, s.length);
  std::string text = "module @attention_sweep\nENTRY computation @main {\n";
  text += fmt::format("  %q = {} parameter(), index=0\n  %k = {} parameter(), index=1\n", q, kv);
  text += fmt::format("  %v = {} parameter(), index=2\n  %s = f32[{}] parameter(), index=3\n", kv, s.heads);
  text += fmt::format("  %seg = s32[{},{}] parameter(), index=4\n", s.batch, s.length);
  const std::string attrs = fmt::format("causal=1, scale={}{}", 1.0 / std::sqrt(static_cast<double>(s.head_dim)),
                                        s.window > 0 ? fmt::format(", window={}", s.window) : "");
  if (!grad) {
    text += fmt::format("  ROOT %a = ({}, {}) attention(%q, %k, %v, %s, %seg, %seg), {}\n}}\n", q, lse, attrs);
    return text;
  }
  text += fmt::format("  %o = {} parameter(), index=5\n  %l = {} parameter(), index=6\n", q, lse);
  text += fmt::format("  %do = {} parameter(), index=7\n  %dl = {} parameter(), index=8\n", q, lse);
  text += fmt::format(
      "  ROOT %g = ({}, {}, {}, f32[{}]) attention_grad(%q, %k, %v, %s, %seg, %seg, %o, %l, %do, %dl), {}\n}}\n", q, kv,
      kv, s.heads, attrs);
  return text;
}

// A buffer of `shape` holding small values (a kernel's time does not depend on them, but
// the softmax's must stay finite).
backend::Buffer filled(const ir::Shape& shape, double scale) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37 * static_cast<double>(i));
  return backend::Buffer::from_literal(ir::Literal(shape, std::move(v)));
}

// Runs `module` alone on `devices` local devices at once (each on its share of the threads,
// as a step's devices run it), every parameter filled() at the scale `scale` gives it: one
// warm-up run, then device 0's best of `repeats`.
Result<double> time_alone(const ir::Module& module, int64_t devices, int repeats,
                          const std::function<double(const ir::Instr& param)>& scale) {
  std::vector<double> best(static_cast<size_t>(devices), 1e30);
  KILN_RETURN_IF_ERROR(runtime::run_on_devices(devices, [&](int64_t d) -> Status {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Executable> exe, backend::cpu_backend().compile(module, {}));
    std::vector<backend::Buffer> args;
    for (const ir::Instr* p : module.entry()->params()) args.push_back(filled(p->shape(), scale(*p)));
    for (int rep = 0; rep <= repeats; ++rep) {
      const auto t0 = Clock::now();
      KILN_RETURN_IF_ERROR(exe->run(args).status());
      if (rep > 0) best[static_cast<size_t>(d)] = std::min(best[static_cast<size_t>(d)], seconds_since(t0));
    }
    return ok_status();
  }));
  return best[0];
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

// The sweep's shapes: head widths 32, 64, 128 and the config's; 128 to 1024 tokens; causal
// over every key and with windows of 64 and 128 keys (windows and lengths that are not
// multiples of the tiles pay for partly masked tiles); f32 and bf16; batch 2, 8 query heads
// over 2 kv heads (GPT-OSS's grouping is 8 too).
std::vector<AttentionShape> attention_sweep_shapes(int64_t config_head_dim) {
  std::vector<int64_t> widths = {32, 64, 128};
  if (std::find(widths.begin(), widths.end(), config_head_dim) == widths.end()) widths.push_back(config_head_dim);
  std::vector<AttentionShape> shapes;
  for (const bool bf16 : {false, true}) {
    for (const int64_t dh : widths) {
      for (const int64_t length : {128, 256, 512, 1024}) {
        for (const int64_t window : {0, 64, 128}) {
          if (window >= length) continue;
          shapes.push_back({.batch = 2, .length = length, .heads = 8, .kv_heads = 2, .head_dim = dh, .window = window,
                            .bf16 = bf16});
        }
      }
    }
  }
  return shapes;
}

// One GEMM alone: [M, K] (stored [K, M] when trans_a) x [K, N] (stored [N, K] when trans_b),
// batch 1, operands in dtype, the result in out_dtype (dtype when unset). The program's text.
std::string gemm_program(const GemmShapeRate& g) {
  const char* dt = g.dtype == "bf16" ? "bf16" : "f32";
  const std::string out = g.out_dtype.empty() ? dt : g.out_dtype;
  const std::string lhs = g.trans_a ? fmt::format("{}[{},{}]", dt, g.k, g.m) : fmt::format("{}[{},{}]", dt, g.m, g.k);
  const std::string rhs = g.trans_b ? fmt::format("{}[{},{}]", dt, g.n, g.k) : fmt::format("{}[{},{}]", dt, g.k, g.n);
  return fmt::format(
      "module @gemm_sweep\nENTRY computation @main {{\n  %a = {} parameter(), index=0\n  %b = {} parameter(), index=1\n"
      "  ROOT %d = {}[{},{}] dot_general(%a, %b), lhs_batch={{}}, lhs_contract={{{}}}, rhs_batch={{}}, "
      "rhs_contract={{{}}}\n}}\n",
      lhs, rhs, out, g.m, g.n, g.trans_a ? 0 : 1, g.trans_b ? 1 : 0);
}

// gemm_sizes (target.h): square products alone, sides 512 to 4096 doubling, for every operand
// and result dtype and layout among the steps' GEMMs (a layout's doubling stops after a
// product that took over 0.25 s: the 4096 ones take 0.35-0.7 s on 2 threads of a Zen 4
// EPYC), each its efficiency; then per operand dtype how much slower the steps' own largest
// GEMMs (those within 4x of the largest's FLOPs) ran than the sweep gives for their sizes.
Status calibrate_gemm_sizes(Target& t, int64_t devices, const StepTiming (&steps)[2],
                            const std::function<void(const std::string&)>& log) {
  GemmSizeModel& m = t.gemm_sizes;
  m = {};
  std::set<std::tuple<std::string, std::string, bool, bool>> layouts;
  for (const GemmShapeRate& g : t.gemm_shapes) layouts.insert({g.dtype, g.out_dtype, g.trans_a, g.trans_b});
  for (const auto& [dtype, out_dtype, trans_a, trans_b] : layouts) {
    for (int64_t side = 512; side <= 4096; side *= 2) {
      GemmShapeRate g{dtype, out_dtype, 1, side, side, side, trans_a, trans_b, 1.0};
      KILN_ASSIGN_OR_RETURN(std::vector<GemmSample> timed, time_gemms(devices, {g}, side < 4096 ? 3 : 1));
      g.efficiency = roofline_seconds(t, KernelKind::kGemm, g.flops(), 0, dtype == "bf16") / timed[0].seconds;
      m.products.push_back(g);
      if (timed[0].seconds > 0.25) break;
    }
  }
  for (const char* dtype : {"f32", "bf16"}) {
    double largest = 0;
    for (const StepTiming& s : steps) {
      for (const TimedKernel& k : s.kernels) {
        if (k.info.kind == KernelKind::kGemm && k.info.dtype == dtype) largest = std::max(largest, k.info.flops);
      }
    }
    double measured = 0, by_sweep = 0;
    for (const StepTiming& s : steps) {
      for (const TimedKernel& k : s.kernels) {
        if (k.info.kind != KernelKind::kGemm || k.info.dtype != dtype || k.info.flops * 4 < largest) continue;
        const std::optional<double> e = m.alone(dtype, k.out_dtype, k.info.trans_a, k.info.trans_b, k.info.flops);
        if (!e) continue;
        measured += k.seconds;
        by_sweep += roofline_seconds(t, KernelKind::kGemm, k.info.flops, k.info.bytes, k.bf16) / *e;
      }
    }
    double& factor = std::string(dtype) == "bf16" ? m.in_step_bf16 : m.in_step_f32;
    factor = by_sweep > 0 ? measured / by_sweep : 1.0;
    if (by_sweep > 0) {
      log(fmt::format("{} gemms of {:.2f} to {:.2f} GFLOP in the steps: {:.3f} s measured, {:.3f} s by the size sweep: x{:.2f}",
                      dtype, largest / 4e9, largest / 1e9, measured, by_sweep, factor));
    }
  }
  for (const GemmShapeRate& g : m.products) {
    log(fmt::format("gemm size sweep: {} -> {} {}{} {}^3: efficiency {:.3f}", g.dtype, g.out_dtype, g.trans_a ? 'T' : 'N',
                    g.trans_b ? 'T' : 'N', g.m, g.efficiency));
  }
  return ok_status();
}

// Sweeps the attention kernels alone, fits a rate per (op, dtype, head width), and sets how
// much slower the config's steps ran theirs (in_step) than the fit says.
Status calibrate_attention(Target& t, int64_t config_head_dim, int64_t devices,
                           const std::vector<TimedKernel> (&in_step)[2],
                           const std::function<void(const std::string&)>& log) {
  KILN_ASSIGN_OR_RETURN(std::vector<AttentionSample> sweep,
                        sweep_attention(devices, attention_sweep_shapes(config_head_dim)));
  AttentionModel& m = t.attention;
  m = {};
  m.tile_q = cpu_tiles().queries, m.tile_k = cpu_tiles().keys;
  std::map<std::tuple<std::string, bool, int64_t>, std::vector<AttentionSample>> groups;
  for (const AttentionSample& s : sweep) groups[{s.work.op, s.work.bf16, s.work.head_dim}].push_back(s);
  for (const auto& [key, samples] : groups) {
    AttentionRate r = fit_attention_rate(samples);
    r.op = std::get<0>(key), r.bf16 = std::get<1>(key), r.head_dim = std::get<2>(key);
    m.rates.push_back(r);
    log(fmt::format("{} {} head width {}: {} shapes, {:.1f} us + {:.2f} ns per row + {:.3f} ns per visited pair",
                    r.op, r.bf16 ? "bf16" : "f32", r.head_dim, samples.size(), r.fixed_us, r.row_ns, r.pair_ns));
  }
  for (const bool bf16_step : {false, true}) {
    double measured = 0, alone = 0;
    for (const TimedKernel& k : in_step[bf16_step]) {
      const AttentionWork& w = *k.attention;
      // The fit alone: in_step is still 1 here.
      const std::optional<double> fit = m.seconds(w.op, w.bf16, w.head_dim, w.rows, w.visited_pairs, bf16_step);
      if (!fit) continue;
      measured += k.seconds, alone += *fit;
    }
    double& factor = bf16_step ? m.in_step_bf16 : m.in_step_f32;
    factor = alone > 0 ? measured / alone : 1.0;
    log(fmt::format("attention in the {} step: {:.3f} s measured, {:.3f} s by the sweep's rates: x{:.2f}",
                    bf16_step ? "bf16" : "f32", measured, alone, factor));
  }
  return ok_status();
}

// collective_in_step and collective_wait (target.h), per step dtype: the step's collective
// time split into the transfer (the least any device spent in each collective) over what the
// link figures say for it, and the rest, the devices' wait for the slowest, over what
// collective_wait = 1 gives for the compute spans before the collectives.
void fit_collectives(Target& t, const StepTiming (&steps)[2], const std::function<void(const std::string&)>& log) {
  for (const bool bf16_step : {false, true}) {
    double& factor = bf16_step ? t.collective_in_step_bf16 : t.collective_in_step_f32;
    double& wait = bf16_step ? t.collective_wait_bf16 : t.collective_wait_f32;
    const StepTiming& s = steps[bf16_step];
    const CollectiveSplit& c = s.collectives;
    factor = s.link_collective_s > 0 && c.transfer_s > 0 ? c.transfer_s / s.link_collective_s : 1;
    const double waited = std::max(0.0, c.in_collectives_s - c.transfer_s);
    wait = c.wait_basis_s > 0 ? waited / c.wait_basis_s : 0;
    log(fmt::format("collectives in the {} step: {:.4f} s per device, of it {:.4f} s moving data ({:.4f} s by the link "
                    "figures: x{:.2f}) and {:.4f} s waiting for the slowest device ({:.1f}% of the {:.3f} s of compute "
                    "before them; collective_wait {:.3f})",
                    bf16_step ? "bf16" : "f32", c.in_collectives_s, c.transfer_s, s.link_collective_s, factor, waited,
                    c.compute_before_s > 0 ? 100 * waited / c.compute_before_s : 0.0, c.compute_before_s, wait));
  }
}

// A class's rate from its kernels: the "other" class mixes opcodes (broadcasts, gathers,
// slices, pads, sorts), so each opcode gets its own fixed cost; fused kernels mix bodies
// (an activation's logistic, a norm's reduction, the optimizer's update), so each signature
// gets its own efficiency; the other classes are one kind of kernel each. keys[i] is
// samples[i]'s opcode (other) or fusion signature (fused).
KernelRate fit_rate(KernelKind kind, const std::vector<std::pair<double, double>>& samples,
                    const std::vector<std::string>& keys) {
  if (kind == KernelKind::kOther) return fit_kernel_rate_by_opcode(samples, keys);
  if (kind == KernelKind::kFused) return fit_kernel_rate_by_signature(samples, keys);
  return fit_kernel_rate(samples);
}

std::string describe_refinements(const KernelRate& r) {
  std::string out;
  if (!r.fixed_us_by_opcode.empty()) {
    std::vector<std::string> parts;
    for (const auto& [opcode, us] : r.fixed_us_by_opcode) parts.push_back(fmt::format("{} {:.1f}", opcode, us));
    out += fmt::format(" ({} us per opcode)", fmt::join(parts, ", "));
  }
  if (!r.efficiency_by_signature.empty()) {
    double lo = r.efficiency_by_signature.begin()->second, hi = lo;
    for (const auto& [signature, e] : r.efficiency_by_signature) lo = std::min(lo, e), hi = std::max(hi, e);
    out += fmt::format(" ({} fusion signatures, efficiency {:.3f} .. {:.3f})", r.efficiency_by_signature.size(), lo, hi);
  }
  return out;
}

}  // namespace

CollectiveSplit split_collective_time(const std::vector<std::vector<TimedInstruction>>& per_device, int steps) {
  CollectiveSplit split;
  if (per_device.empty() || steps <= 0) return split;
  const double devices = static_cast<double>(per_device.size());
  std::vector<std::vector<double>> collective_times;  // per device, its collectives in order
  for (const std::vector<TimedInstruction>& instrs : per_device) {
    collective_times.emplace_back();
    const size_t per_step = instrs.size() / static_cast<size_t>(steps);
    double since_issue = 0;
    for (size_t i = 0; i < instrs.size(); ++i) {
      const TimedInstruction& t = instrs[i];
      if (per_step > 0 && i % per_step == 0) since_issue = 0;  // a step starts with the devices together
      if (t.collective) {
        split.in_collectives_s += t.seconds / devices;
        collective_times.back().push_back(t.seconds);
      }
      if (t.kernel) since_issue += t.seconds;
      if (t.issues) {
        split.compute_before_s += since_issue / devices;
        split.wait_basis_s += Target::wait_basis(since_issue) / devices;
        since_issue = 0;
      }
    }
  }
  // The k-th collective instruction of every device is the same collective (one program);
  // the device that came last to it waited least.
  size_t count = collective_times[0].size();
  for (const std::vector<double>& c : collective_times) count = std::min(count, c.size());
  for (size_t k = 0; k < count; ++k) {
    double least = collective_times[0][k];
    for (const std::vector<double>& c : collective_times) least = std::min(least, c[k]);
    split.transfer_s += least;
  }
  const double n = static_cast<double>(steps);
  split.in_collectives_s /= n, split.transfer_s /= n, split.compute_before_s /= n, split.wait_basis_s /= n;
  return split;
}

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

Result<std::vector<AttentionSample>> sweep_attention(int64_t devices, const std::vector<AttentionShape>& shapes,
                                                    int repeats) {
  std::vector<AttentionSample> samples;
  for (const AttentionShape& shape : shapes) {
    for (const bool grad : {false, true}) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, ir::parse_module(attention_program(shape, grad)));
      AttentionSample sample;
      sample.shape = shape;
      sample.work = *attention_work(*module->entry()->root(), cpu_tiles().queries, cpu_tiles().keys);
      // Parameters: q, k, v, sinks, segment ids [, out, lse, dout, dlse]. lse 0 keeps
      // p = exp(s - lse) finite in the backward.
      KILN_ASSIGN_OR_RETURN(sample.seconds, time_alone(*module, devices, repeats, [](const ir::Instr& p) {
                              return p.shape().dtype() == ir::DType::kS32 || p.attrs().get_int("index") == 6 ? 0.0 : 1.0;
                            }));
      samples.push_back(sample);
    }
  }
  return samples;
}

Result<std::vector<GemmSample>> time_gemms(int64_t devices, const std::vector<GemmShapeRate>& shapes, int repeats) {
  std::vector<GemmSample> samples;
  for (const GemmShapeRate& shape : shapes) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, ir::parse_module(gemm_program(shape)));
    KILN_ASSIGN_OR_RETURN(double seconds, time_alone(*module, devices, repeats, [](const ir::Instr&) { return 1.0; }));
    samples.push_back({shape, seconds});
  }
  return samples;
}

AttentionRate fit_attention_rate(const std::vector<AttentionSample>& samples) {
  // Non-negative least squares of t = fixed + rows row + visited pair, each sample weighted
  // by 1 / t (relative errors: the sweep spans 100x in time): the best of the feature
  // subsets whose unconstrained fit is non-negative (three features: seven subsets).
  constexpr int kF = 3;
  auto features = [](const AttentionSample& s) {
    return std::array<double, kF>{1.0, s.work.rows, s.work.visited_pairs};
  };
  std::array<double, kF> best_c{};
  double best_sse = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < (1 << kF); ++mask) {
    std::vector<int> cols;
    for (int f = 0; f < kF; ++f) {
      if (mask & (1 << f)) cols.push_back(f);
    }
    const size_t n = cols.size();
    // Normal equations A c = b over the chosen columns, solved by Gaussian elimination.
    std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
    for (const AttentionSample& s : samples) {
      if (s.seconds <= 0) continue;
      const auto x = features(s);
      const double w = 1.0 / s.seconds;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) a[i][j] += w * w * x[cols[i]] * x[cols[j]];
        a[i][n] += w * w * x[cols[i]] * s.seconds;
      }
    }
    bool singular = false;
    for (size_t i = 0; i < n && !singular; ++i) {
      size_t pivot = i;
      for (size_t r = i + 1; r < n; ++r) {
        if (std::abs(a[r][i]) > std::abs(a[pivot][i])) pivot = r;
      }
      std::swap(a[i], a[pivot]);
      if (std::abs(a[i][i]) < 1e-300) {
        singular = true;
        break;
      }
      for (size_t r = 0; r < n; ++r) {
        if (r == i) continue;
        const double f = a[r][i] / a[i][i];
        for (size_t c = i; c <= n; ++c) a[r][c] -= f * a[i][c];
      }
    }
    if (singular) continue;
    std::array<double, kF> c{};
    bool negative = false;
    for (size_t i = 0; i < n; ++i) {
      c[cols[i]] = a[i][n] / a[i][i];
      negative = negative || c[cols[i]] < 0;
    }
    if (negative) continue;
    double sse = 0;
    for (const AttentionSample& s : samples) {
      if (s.seconds <= 0) continue;
      const auto x = features(s);
      double t = 0;
      for (int f = 0; f < kF; ++f) t += c[f] * x[f];
      sse += (t - s.seconds) * (t - s.seconds) / (s.seconds * s.seconds);
    }
    if (sse < best_sse) best_sse = sse, best_c = c;
  }
  AttentionRate r;
  r.fixed_us = best_c[0] * 1e6;
  r.row_ns = best_c[1] * 1e9;
  r.pair_ns = best_c[2] * 1e9;
  return r;
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
  // No kernel takes less than the fixed cost, so it is at most what the class's smallest
  // kernels took: the median time of the tenth with the least roofline work. A line fitted
  // on absolute times follows the large kernels, and their spread (a transpose at a sixth
  // of the bandwidth beside a slice at all of it) put its intercept at 40-60 us for byte
  // kernels whose smallest took 4-25 us; a model of 212 such kernels then paid 10 ms it
  // never spent. Capped, the slope is refitted with the intercept held.
  if (a > 0) {
    std::vector<std::pair<double, double>> by_work = samples;
    std::sort(by_work.begin(), by_work.end());
    std::vector<double> smallest;
    for (size_t i = 0; i < std::max<size_t>(1, by_work.size() / 10); ++i) smallest.push_back(by_work[i].second);
    std::nth_element(smallest.begin(), smallest.begin() + static_cast<std::ptrdiff_t>(smallest.size() / 2), smallest.end());
    const double cap = std::max(0.0, smallest[smallest.size() / 2]);
    if (a > cap) {
      double sx_rest = 0, sxx = 0;
      for (const auto& [x, t] : samples) sx_rest += x * (t - cap), sxx += x * x;
      if (sxx > 0 && sx_rest > 0) {
        a = cap;
        b = sx_rest / sxx;
      }
    }
  }
  r.fixed_us = a * 1e6;
  r.efficiency = b > 0 ? 1.0 / b : 1.0;
  return r;
}

KernelRate fit_kernel_rate_by_opcode(const std::vector<std::pair<double, double>>& samples,
                                     const std::vector<std::string>& opcodes) {
  KILN_CHECK_EQ(samples.size(), opcodes.size());
  KernelRate r = fit_kernel_rate(samples);
  std::map<std::string, std::pair<int, double>> least;  // opcode -> (kernels, least seconds)
  for (size_t i = 0; i < samples.size(); ++i) {
    auto it = least.try_emplace(opcodes[i], 0, samples[i].second).first;
    ++it->second.first;
    it->second.second = std::min(it->second.second, samples[i].second);
  }
  for (const auto& [opcode, entry] : least) {
    if (entry.first >= 3) r.fixed_us_by_opcode[opcode] = std::max(0.0, entry.second) * 1e6;
  }
  double sxt = 0, sxx = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& [x, t] = samples[i];
    sxt += x * (t - r.fixed_us_of(opcodes[i]) * 1e-6);
    sxx += x * x;
  }
  if (sxx > 0 && sxt > 0) r.efficiency = sxx / sxt;
  return r;
}

KernelRate fit_kernel_rate_by_signature(const std::vector<std::pair<double, double>>& samples,
                                        const std::vector<std::string>& signatures) {
  KILN_CHECK_EQ(samples.size(), signatures.size());
  KernelRate r = fit_kernel_rate(samples);
  std::map<std::string, std::tuple<int, double, double>> sums;  // signature -> (kernels, roofline s, s over fixed)
  for (size_t i = 0; i < samples.size(); ++i) {
    auto& [count, roofline, over_fixed] = sums[signatures[i]];
    ++count;
    roofline += samples[i].first;
    over_fixed += samples[i].second - r.fixed_us * 1e-6;
  }
  for (const auto& [signature, entry] : sums) {
    const auto& [count, roofline, over_fixed] = entry;
    if (count >= 2 && roofline > 0 && over_fixed > 0) r.efficiency_by_signature[signature] = roofline / over_fixed;
  }
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
  KILN_ASSIGN_OR_RETURN(const backend::DevicePeaks peak, backend::cpu_backend().measure_peaks(threads));
  t.peak_tflops_f32 = peak.f32_tflops;
  t.peak_tflops_bf16 = peak.bf16_tflops;
  log("peaks: " + peak.description);
  t.description = fmt::format("{}, {} thread(s) per device, {} virtual device(s) per process", peak.device,
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
  // Per step dtype, each sample's key for fit_rate: its fusion signature (fused) or opcode.
  std::vector<std::string> keys[2][static_cast<int>(KernelKind::kCount)];
  double gap_s = 0;
  int64_t gap_instructions = 0;
  std::vector<TimedKernel> attention_in_step[2];  // the f32 and the bf16 step's attention kernels
  StepTiming timings[2];                          // the f32 and the bf16 step
  std::map<std::string, std::pair<GemmShapeRate, std::pair<double, double>>> gemm_shapes;  // -> (roofline, measured) s
  Target unit = t;  // efficiency 1 and no fixed cost: the roofline alone
  for (const bool bf16_step : {false, true}) {
    const char* dtype = bf16_step ? "bfloat16" : "float32";
    KILN_ASSIGN_OR_RETURN(timings[bf16_step], time_steps(settings, {std::string("dtype=") + dtype}, options, t));
    const StepTiming& timing = timings[bf16_step];
    for (const TimedKernel& k : timing.kernels) {
      if (k.attention) attention_in_step[bf16_step].push_back(k);
      if (k.info.kind == KernelKind::kGemm) {
        const train::InstrInfo& g = k.info;
        auto& [rate, times] = gemm_shapes[fmt::format("{} {} {} {} {} {} {} {}", g.dtype, k.out_dtype, g.batch, g.m, g.n,
                                                      g.k, g.trans_a, g.trans_b)];
        rate = {g.dtype, k.out_dtype, g.batch, g.m, g.n, g.k, g.trans_a, g.trans_b, 1.0};
        times.first += roofline_seconds(unit, k.info.kind, k.info.flops, k.info.bytes, k.bf16);
        times.second += k.seconds;
      }
      auto& samples = bf16_step ? per_class_bf16 : per_class;
      samples[static_cast<int>(k.info.kind)].push_back(
          {roofline_seconds(unit, k.info.kind, k.info.flops, k.info.bytes, k.bf16), k.seconds});
      keys[bf16_step][static_cast<int>(k.info.kind)].push_back(k.info.kind == KernelKind::kFused ? k.signature
                                                                                               : k.opcode);
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
    r = fit_rate(kind, s, keys[0][static_cast<int>(kind)]);
    log(fmt::format("{}: {} kernels timed, efficiency {:.3f}, fixed {:.1f} us{}", kernel_class_key(kind), s.size(),
                    r.efficiency, r.fixed_us, describe_refinements(r)));
  }
  // The bf16 step's kernels: their own rates (they convert, and on a CPU without bf16
  // instructions the products widen).
  t.bf16_rates = true;
  for (KernelKind kind : kKernelClasses) {
    const auto& s = per_class_bf16[static_cast<int>(kind)];
    KernelRate& r = t.kernels_bf16[static_cast<int>(kind)];
    r = s.empty() ? t.rate(kind) : fit_rate(kind, s, keys[1][static_cast<int>(kind)]);
    if (!s.empty()) {
      log(fmt::format("{} (bf16 step): {} kernels timed, efficiency {:.3f}, fixed {:.1f} us{}", kernel_class_key(kind),
                      s.size(), r.efficiency, r.fixed_us, describe_refinements(r)));
    }
  }
  for (auto& [key, entry] : gemm_shapes) {
    GemmShapeRate rate = entry.first;
    rate.efficiency = entry.second.first / entry.second.second;
    t.gemm_shapes.push_back(rate);
  }
  log(fmt::format("gemm shapes: {} timed in the steps, each its own efficiency", t.gemm_shapes.size()));
  KILN_RETURN_IF_ERROR(calibrate_gemm_sizes(t, devices, timings, log));
  KILN_RETURN_IF_ERROR(calibrate_attention(t, cfg.derived().head_dim, devices, attention_in_step, log));
  t.host_us_per_kernel = gap_instructions > 0 ? 1e6 * gap_s / static_cast<double>(gap_instructions) : 0;
  log(fmt::format("host: {:.1f} us between instructions", t.host_us_per_kernel));
  // The device threads move the collectives' data themselves (runtime/local_world.cc, and MPI
  // progresses only while polled): no overlap with compute.
  t.collectives_overlap = false;
  if (devices > 1) fit_collectives(t, timings, log);
  t.calibrated = fmt::format("{} by kiln plan --calibrate {}", today(), fmt::join(settings, " "));
  t.sources = {fmt::format("measured on this machine by kiln plan --calibrate on {}: peaks by the FMA and bf16 "
                           "dot-product loops (backend/cpu/gemm/cpu_peak.h), bandwidth by a triad, the links by all-gathers "
                           "between virtual devices and between MPI ranks, kernel classes and host time from the "
                           "config's own step",
                           today())};
  return t;
}

}  // namespace kiln::plan
