#include "kiln/train/observability/attribution.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kiln/train/observability/flops.h"

namespace kiln::train {

namespace {
// "12.34%", or "n/a" above the peak (peaks.h mfu_or_nan; the notes say why).
std::string percent_text(double mfu) { return std::isnan(mfu) ? "n/a" : fmt::format("{:.2f}%", 100.0 * mfu); }
}  // namespace

Attribution attribute(const StepTotals& t, double model_tflops, const Peaks& peaks) {
  Attribution a;
  const double steps = std::max<int64_t>(1, t.steps);
  a.step_s = t.wall_s / steps;
  const double peak = peaks.compute_tflops() * 1e12;  // FLOP/s of the compute dtype
  a.mfu = a.step_s > 0 ? mfu_or_nan(model_tflops / a.step_s, peak / 1e12) : 0;
  if (std::isnan(a.mfu)) {
    a.notes.push_back(fmt::format(
        "note: MFU n/a: the run's {:.4g} TFLOP/s per device is above the {} peak ({:.4g} TFLOP/s, {}); the peak misses "
        "a faster unit or the FLOP count is wrong",
        model_tflops / a.step_s, peaks.bf16_compute ? "bf16" : "f32", peaks.compute_tflops(), peaks.source));
  }
  auto kind = [&](KernelKind k) { return t.kinds[static_cast<int>(k)]; };
  auto add = [&](std::string name, double total_s, double ideal_total_s, std::string rate) {
    AttributionRow r;
    r.name = std::move(name);
    r.seconds = total_s / steps;
    r.percent = a.step_s > 0 ? 100.0 * r.seconds / a.step_s : 0;
    r.rate = std::move(rate);
    const double loss = std::max(0.0, (total_s - ideal_total_s) / steps);
    r.mfu_without = a.step_s - loss > 0 ? mfu_or_nan(model_tflops / (a.step_s - loss), peak / 1e12) : 0;
    a.rows.push_back(std::move(r));
  };
  // FLOPs here are the executed kernels' own (ops::cost_of of each instruction timed), so a
  // share of peak above 100% is a peak set too low, never a counting convention.
  auto check_peak = [&](const char* name, double percent_of_peak) {
    if (percent_of_peak <= 100.0) return;
    a.notes.push_back(fmt::format(
        "note: {} ran at {:.0f}% of the peak, so the peak ({}) is below this CPU's; "
        "hardware_peak_tflops=0 measures it (MFU and every rate here scale with it)",
        name, percent_of_peak, peaks.source));
  };
  auto flop_row = [&](const char* name, KernelKind k) {
    KindTotal x = kind(k);
    double peak_rate = peak;
    std::string rate = "-";
    if (x.seconds > 0 && x.flops > 0) {
      rate = fmt::format("{:.1f} GFLOP/s = {:.0f}% of peak", x.flops / x.seconds / 1e9, 100.0 * x.flops / x.seconds / peak_rate);
      check_peak(name, 100.0 * x.flops / x.seconds / peak_rate);
    }
    add(name, x.seconds, x.flops / peak_rate, rate);
    return x;
  };
  // GEMMs: bf16 ones run against the bf16 peak.
  {
    KindTotal g = kind(KernelKind::kGemm);
    double ideal = 0;
    for (const auto& [key, s] : t.gemm_shapes) {
      const double f = 2.0 * s.batch * s.m * s.n * s.k * s.count;
      ideal += f / (peaks.tflops(s.dtype == "bf16") * 1e12);
    }
    a.gemm_gflops = g.seconds > 0 ? g.flops / g.seconds / 1e9 : 0;
    std::string rate = g.seconds > 0 ? fmt::format("{:.1f} GFLOP/s = {:.0f}% of peak", a.gemm_gflops,
                                                   100.0 * ideal / g.seconds)
                                     : "-";
    if (g.seconds > 0) check_peak("gemm", 100.0 * ideal / g.seconds);
    add("gemm", g.seconds, ideal, rate);
  }
  flop_row("grouped matmul", KernelKind::kGroupedMatmul);
  flop_row("attention", KernelKind::kAttention);
  {
    KindTotal f = kind(KernelKind::kFused);
    const double seconds = f.seconds;
    std::string rate = "-";
    if (f.seconds > 0) {
      const double gbs = f.bytes / f.seconds / 1e9;
      // Above 100% the kernels' bytes partly came from the caches, not memory: the triad
      // measures DRAM, and a layer's activations can sit in a large L3.
      rate = peaks.memory_gbs > 0
                 ? fmt::format("{:.1f} GB/s = {:.0f}% of {:.1f} GB/s{}", gbs, 100.0 * gbs / peaks.memory_gbs,
                               peaks.memory_gbs, gbs > peaks.memory_gbs ? " (cached)" : "")
                 : fmt::format("{:.1f} GB/s (bandwidth not measured)", gbs);
    }
    add("fused elementwise", seconds, 0, rate);
  }
  add("other kernels", kind(KernelKind::kOther).seconds, 0, "-");
  std::vector<std::string> kinds;
  for (const auto& [k, v] : t.collectives) kinds.push_back(k);
  std::sort(kinds.begin(), kinds.end());
  for (const std::string& k : kinds) {
    add("collective " + k + " (exposed)", t.collectives.at(k).seconds, 0, "-");
  }
  if (kinds.empty()) add("collectives (exposed)", 0, 0, "none in this program");
  add("rematerialization", t.remat.seconds, 0, t.remat.count ? "-" : "nothing recomputed");
  add("data wait", t.data_wait_s, 0, "-");
  add("checkpoint stall", t.checkpoint_s, 0, "-");
  add("host overhead", t.between_kernels_s, 0, "between kernels, measured");
  double accounted = 0;
  for (const AttributionRow& r : a.rows) accounted += r.seconds * steps;
  add("outside the program", std::max(0.0, t.wall_s - accounted), 0, "-");
  for (const AttributionRow& r : a.rows) a.percent_sum += r.percent;
  return a;
}

std::string attribution_table(const Attribution& a, const StepTotals& t, const Peaks& peaks) {
  std::string out = fmt::format(
      "where the step time went ({} observed steps, {:.3f} s per step, MFU {} against the {} peak; FLOPs: {}; "
      "peaks {:.3f} TFLOP/s f32, {:.3f} bf16 ({}), memory {:.1f} GB/s):",
      t.steps, a.step_s, percent_text(a.mfu), peaks.bf16_compute ? "bf16" : "f32", flop_formula_name(FlopFormula::kMaxText2602),
      peaks.f32_tflops, peaks.bf16_tflops, peaks.source, peaks.memory_gbs);
  out += fmt::format("\n  {:<34} {:>9} {:>7}  {:<36} {:>12}", "", "s/step", "share", "achieved rate", "MFU without");
  for (const AttributionRow& r : a.rows) {
    out += fmt::format("\n  {:<34} {:>9.4f} {:>6.1f}%  {:<36} {:>12}", r.name, r.seconds, r.percent, r.rate,
                       percent_text(r.mfu_without));
  }
  out += fmt::format("\n  {:<34} {:>9.4f} {:>6.1f}%", "total", a.step_s, a.percent_sum);
  for (const std::string& note : a.notes) out += "\n" + note;
  return out;
}

std::string gemm_shapes_jsonl(const StepTotals& t) {
  std::string out;
  const double steps = std::max<int64_t>(1, t.steps);
  for (const auto& [key, s] : t.gemm_shapes) {
    out += fmt::format(
        "{{\"dtype\": \"{}\", \"batch\": {}, \"m\": {}, \"n\": {}, \"k\": {}, \"trans_a\": {}, "
        "\"trans_b\": {}, \"count_per_step\": {}, \"seconds_per_step\": {}}}\n",
        s.dtype, s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b, s.count / steps, s.seconds / steps);
  }
  return out;
}

}  // namespace kiln::train
