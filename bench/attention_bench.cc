// Attention forward + backward on the CPU backend: the fused flash kernels (the `attention`
// op, attention=flash) vs the composite path (nn::dot_product_attention: T x T scores, a
// masked float32 softmax with the sink column, compiled into fused loops and oneDNN GEMMs).
// One program per case computes out = attention(q, k, v, sinks), the loss sum(out * w) and
// the gradients of q, k, v and the sinks. Causal, GPT-OSS sinks, GQA with GPT-OSS's 8 query
// heads per kv head and head dim 64, but 8 query heads over 1 kv head instead of 64 over 8
// (the same per-head work, 1/8 of the heads: the composite path's T x T score tensors of 64
// heads at T = 4096 would not fit this 24 GiB machine). Also the sliding-window layer
// (W = 128) at every length. Prints a table of medians, the ratio and the peak memory of
// intermediate values from the compile report.
//
//   build-bench/bench/attention_bench
//   build-bench/bench/attention_bench --benchmark_filter=flash
//   /usr/bin/python3 bench/attention_vs_torch.py     (PyTorch's eager composite, same shapes)
//
// The step cases (attention_step/...) time the attention and attention_grad kernels alone,
// each in its own program, on gpt-oss-small's exact layer shape (B=2, T=512, 8 query heads
// over 2 kv heads, Dh=64, sinks, one segment id, causal and window 128) in bf16 and f32, and
// print a hash of each kernel's outputs so a kernel change can be checked bit for bit:
//
//   OMP_NUM_THREADS=2 build-bench/bench/attention_bench --benchmark_filter=attention_step
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/ir/parser.h"

namespace kiln {
namespace {

using backend::Buffer;
using frontend::Tensor;

constexpr int64_t kB = 1, kH = 8, kK = 1, kDh = 64, kWindow = 128;

struct Result {
  double seconds = 0;
  int64_t peak_bytes = 0;
};
std::map<std::string, Result>& results() {
  static std::map<std::string, Result> r;
  return r;
}

Buffer random_buffer(const ir::Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  Buffer b(shape);
  std::uniform_real_distribution<float> dist(static_cast<float>(lo), static_cast<float>(hi));
  float* p = b.as<float>();
  for (int64_t i = 0; i < b.num_elements(); ++i) p[i] = dist(rng);
  return b;
}

// Parameters q, k, v, sinks, w; outputs loss, dq, dk, dv, dsinks. With `bf16`, q, k, v
// enter the kernel as bf16 (cast inside the program, as a bf16 model's activations are).
std::unique_ptr<ir::Module> build(int64_t t, bool flash, int64_t window, bool bf16 = false) {
  frontend::Graph g("attention_bench");
  Tensor q = g.parameter("q", frontend::f32({kB, t, kH, kDh}));
  Tensor k = g.parameter("k", frontend::f32({kB, t, kK, kDh}));
  Tensor v = g.parameter("v", frontend::f32({kB, t, kK, kDh}));
  Tensor sinks = g.parameter("sinks", frontend::f32({kH}));
  Tensor w = g.parameter("w", frontend::f32({kB, t, kH, kDh}));
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDh));
  Tensor out;
  if (flash && bf16) {
    out = frontend::nn::flash_attention(q.astype(ir::DType::kBF16), k.astype(ir::DType::kBF16),
                                        v.astype(ir::DType::kBF16), scale, sinks, Tensor(), Tensor(), true, window)
              .astype(ir::DType::kF32);
  } else if (flash) {
    out = frontend::nn::flash_attention(q, k, v, scale, sinks, Tensor(), Tensor(), true, window);
  } else {
    Tensor query = g.iota({t, t}, 0), key = g.iota({t, t}, 1);
    Tensor allowed = key <= query;
    if (window > 0) allowed = allowed && (key > query - static_cast<double>(window));
    out = frontend::nn::dot_product_attention(q, k, v, allowed, scale, sinks);
  }
  Tensor loss = (out * w).sum();
  std::vector<ir::Instr*> wrt = {q.instr(), k.instr(), v.instr(), sinks.instr()};
  auto grads = autodiff::gradients(g.computation(), loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);
  return g.release();
}

// variant: "flash", "composite", "flash_bf16" (bf16 dot products) or "flash_bf16_f32math"
// (bf16 inputs computed in f32: KILN_ATTENTION_BF16_DOTS=0).
void bm_attention(benchmark::State& state, int64_t t, const std::string& variant, int64_t window) {
  const bool flash = variant != "composite", bf16 = variant.starts_with("flash_bf16");
  setenv("KILN_ATTENTION_BF16_DOTS", variant == "flash_bf16_f32math" ? "0" : "1", 1);
  auto module = build(t, flash, window, bf16);
  backend::CompileOptions options;
  auto exe = backend::compile_cpu(*module, options);
  KILN_CHECK_OK(exe);
  std::mt19937_64 rng(7);
  std::vector<Buffer> args = {random_buffer(ir::Shape(ir::DType::kF32, {kB, t, kH, kDh}), rng, -2, 2),
                              random_buffer(ir::Shape(ir::DType::kF32, {kB, t, kK, kDh}), rng, -2, 2),
                              random_buffer(ir::Shape(ir::DType::kF32, {kB, t, kK, kDh}), rng, -2, 2),
                              random_buffer(ir::Shape(ir::DType::kF32, {kH}), rng, 0, 2),
                              random_buffer(ir::Shape(ir::DType::kF32, {kB, t, kH, kDh}), rng, -1, 1)};
  std::vector<double> times;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = (*exe)->run(args);
    KILN_CHECK_OK(out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  Result r{times[times.size() / 2], (*exe)->report().peak_value_bytes};
  results()[fmt::format("{}/{}/{}", t, window, variant)] = r;
  // Useful work: causal pairs (or T*W for the window), 4 Dh flops forward, 10 backward.
  double pairs = 0;
  for (int64_t i = 0; i < t; ++i) pairs += static_cast<double>(window > 0 ? std::min(i + 1, window) : i + 1);
  state.counters["GFLOP/s"] = 14.0 * kDh * kB * kH * pairs / r.seconds * 1e-9;
  state.counters["peak_MiB"] = static_cast<double>(r.peak_bytes) / (1 << 20);
}

// ---- step cases: attention and attention_grad alone on gpt-oss-small's layer shape ----

constexpr int64_t kStepB = 2, kStepT = 512, kStepH = 8, kStepK = 2;

struct StepResult {
  double fwd_seconds = 0, bwd_seconds = 0;
  double fwd_cpu = 0, bwd_cpu = 0;  // process CPU seconds (all threads, spinning included)
  uint64_t fwd_hash = 0, bwd_hash = 0;
};
std::map<std::string, StepResult>& step_results() {
  static std::map<std::string, StepResult> r;
  return r;
}

// FNV-1a over the bytes of every output buffer.
uint64_t hash_outputs(const std::vector<Buffer>& outs) {
  uint64_t h = 1469598103934665603ull;
  for (const Buffer& b : outs) {
    const auto* p = static_cast<const unsigned char*>(b.data());
    const int64_t n = b.byte_size();
    for (int64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// The forward (grad = false) or backward program: q, k, v in `dt`, f32 sinks, s32 segment
// ids (q's and k's), and for the backward out, lse, dout, dlse.
std::string step_program(const char* dt, int64_t window, bool grad) {
  const std::string q = fmt::format("{}[{},{},{},{}]", dt, kStepB, kStepT, kStepH, kDh);
  const std::string kv = fmt::format("{}[{},{},{},{}]", dt, kStepB, kStepT, kStepK, kDh);
  const std::string lse = fmt::format("f32[{},{},{}]", kStepB, kStepH, kStepT);
  std::string text = "module @m\nENTRY computation @main {\n";
  text += fmt::format("  %q = {} parameter(), index=0\n  %k = {} parameter(), index=1\n", q, kv);
  text += fmt::format("  %v = {} parameter(), index=2\n  %s = f32[{}] parameter(), index=3\n", kv, kStepH);
  text += fmt::format("  %seg = s32[{},{}] parameter(), index=4\n", kStepB, kStepT);
  const std::string attrs =
      fmt::format("causal=1, scale=0.125{}", window > 0 ? fmt::format(", window={}", window) : "");
  if (!grad) {
    text += fmt::format("  ROOT %a = ({}, {}) attention(%q, %k, %v, %s, %seg, %seg), {}\n}}\n", q, lse, attrs);
    return text;
  }
  text += fmt::format("  %o = {} parameter(), index=5\n  %l = {} parameter(), index=6\n", q, lse);
  text += fmt::format("  %do = {} parameter(), index=7\n  %dl = {} parameter(), index=8\n", q, lse);
  text += fmt::format("  ROOT %g = ({}, {}, {}, f32[{}]) attention_grad(%q, %k, %v, %s, %seg, %seg, %o, %l, %do, %dl), {}\n}}\n",
                      q, kv, kv, kStepH, attrs);
  return text;
}

std::unique_ptr<backend::Executable> compile_text(const std::string& text) {
  auto module = ir::parse_module(text);
  KILN_CHECK_OK(module);
  backend::CompileOptions options;
  auto exe = backend::compile_cpu(**module, options);
  KILN_CHECK_OK(exe);
  return std::move(*exe);
}

Buffer random_step_buffer(const ir::Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(shape.num_elements());
  for (double& x : v) x = dist(rng);
  return Buffer::from_literal(ir::Literal(shape, std::move(v)));
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double seconds = 0, cpu_seconds = 0;
  uint64_t hash = 0;
};

// Median wall and CPU seconds of `iters` runs (after one warm-up) and the hash of the last
// outputs. CPU time is the steadier figure on a loaded machine.
Timing time_runs(backend::Executable& exe, const std::vector<Buffer>& args, int iters,
                 std::vector<Buffer>* outputs = nullptr) {
  std::vector<double> times, cpu;
  std::vector<Buffer> out;
  for (int i = 0; i <= iters; ++i) {
    const double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    auto r = exe.run(args);
    KILN_CHECK_OK(r);
    if (i > 0) {
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      cpu.push_back(process_cpu_seconds() - c0);
    }
    out = std::move(*r);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu.begin(), cpu.end());
  if (outputs) *outputs = out;
  return {times[times.size() / 2], cpu[cpu.size() / 2], hash_outputs(out)};
}

void bm_attention_step(benchmark::State& state, bool bf16, int64_t window) {
  const char* dt = bf16 ? "bf16" : "f32";
  const ir::DType dtype = bf16 ? ir::DType::kBF16 : ir::DType::kF32;
  setenv("KILN_ATTENTION_BF16_DOTS", "1", 1);
  auto fwd = compile_text(step_program(dt, window, false));
  auto bwd = compile_text(step_program(dt, window, true));
  std::mt19937_64 rng(11);
  const ir::Shape qs(dtype, {kStepB, kStepT, kStepH, kDh}), kvs(dtype, {kStepB, kStepT, kStepK, kDh});
  const ir::Shape lse(ir::DType::kF32, {kStepB, kStepH, kStepT});
  std::vector<Buffer> args = {random_step_buffer(qs, rng, -2, 2), random_step_buffer(kvs, rng, -2, 2),
                              random_step_buffer(kvs, rng, -2, 2),
                              random_step_buffer(ir::Shape(ir::DType::kF32, {kStepH}), rng, 0, 2),
                              Buffer::from_literal(ir::Literal(ir::Shape(ir::DType::kS32, {kStepB, kStepT}),
                                                               std::vector<double>(kStepB * kStepT, 1.0)))};
  std::vector<Timing> fwd_times, bwd_times;
  std::vector<Buffer> fwd_out;
  for (auto _ : state) {
    const Timing f = time_runs(*fwd, args, 10, &fwd_out);
    // The backward of the forward's own out and lse, a random dout, dlse = 0 (the step's
    // loss does not read lse).
    std::vector<Buffer> bargs = args;
    bargs.push_back(fwd_out[0]);
    bargs.push_back(fwd_out[1]);
    std::mt19937_64 grng(12);
    bargs.push_back(random_step_buffer(qs, grng, -1, 1));
    bargs.push_back(Buffer::zeros(lse));
    const Timing b = time_runs(*bwd, bargs, 10);
    state.SetIterationTime(f.seconds + b.seconds);
    fwd_times.push_back(f), bwd_times.push_back(b);
  }
  auto median = [](std::vector<Timing> v, auto field) {
    std::sort(v.begin(), v.end(), [&](const Timing& x, const Timing& y) { return x.*field < y.*field; });
    return v[v.size() / 2].*field;
  };
  StepResult r;
  r.fwd_seconds = median(fwd_times, &Timing::seconds), r.fwd_cpu = median(fwd_times, &Timing::cpu_seconds);
  r.bwd_seconds = median(bwd_times, &Timing::seconds), r.bwd_cpu = median(bwd_times, &Timing::cpu_seconds);
  r.fwd_hash = fwd_times.back().hash, r.bwd_hash = bwd_times.back().hash;
  step_results()[fmt::format("{}/{}", window, dt)] = r;
  state.counters["fwd_ms"] = 1e3 * r.fwd_seconds;
  state.counters["bwd_ms"] = 1e3 * r.bwd_seconds;
}

void print_step_table() {
  if (step_results().empty()) return;
  std::printf("\nattention / attention_grad kernels alone, gpt-oss-small's layer: B=%lld, T=%lld, %lld query heads over "
              "%lld kv heads, Dh=%lld, sinks, one segment; medians of 10 runs (x3):\n",
              static_cast<long long>(kStepB), static_cast<long long>(kStepT), static_cast<long long>(kStepH),
              static_cast<long long>(kStepK), static_cast<long long>(kDh));
  std::printf("%-10s %6s %10s %10s %10s %12s %12s   %-16s %-16s\n", "mask", "dtype", "fwd ms", "bwd ms", "f32/bf16",
              "fwd cpu ms", "bwd cpu ms", "fwd hash", "bwd hash");
  for (int64_t window : {int64_t{0}, kWindow}) {
    for (const char* dt : {"f32", "bf16"}) {
      auto it = step_results().find(fmt::format("{}/{}", window, dt));
      if (it == step_results().end()) continue;
      const StepResult& r = it->second;
      auto f32 = step_results().find(fmt::format("{}/f32", window));
      const double ratio = f32 == step_results().end()
                               ? 0.0
                               : (f32->second.fwd_seconds + f32->second.bwd_seconds) / (r.fwd_seconds + r.bwd_seconds);
      std::printf("%-10s %6s %10.2f %10.2f %9.2fx %12.2f %12.2f   %016llx %016llx\n", window > 0 ? "window128" : "causal",
                  dt, 1e3 * r.fwd_seconds, 1e3 * r.bwd_seconds, ratio, 1e3 * r.fwd_cpu, 1e3 * r.bwd_cpu,
                  static_cast<unsigned long long>(r.fwd_hash), static_cast<unsigned long long>(r.bwd_hash));
    }
  }
  std::printf("(f32/bf16 = f32 fwd+bwd wall time / this row's; cpu = process CPU time of a run, all threads; the hashes "
              "change only when the kernels' bits do, and the backward's also with the thread count: dk and dv sum "
              "per-thread partial sums)\n");
}

const std::vector<int64_t> kLengths = {1024, 2048, 4096};

void register_all() {
  for (int64_t window : {int64_t{0}, kWindow}) {
    for (bool bf16 : {false, true}) {
      std::string name = fmt::format("attention_step/{}/{}", bf16 ? "bf16" : "f32", window > 0 ? "window128" : "causal");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_attention_step(s, bf16, window); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(3);
    }
  }
  for (int64_t window : {int64_t{0}, kWindow}) {
    for (int64_t t : kLengths) {
      for (const char* variant : {"flash", "composite", "flash_bf16", "flash_bf16_f32math"}) {
        std::string name =
            fmt::format("attention_fwd_bwd/{}/T{}/{}", variant, t, window > 0 ? "window128" : "causal");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_attention(s, t, variant, window); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(3);
      }
    }
  }
}

void print_table() {
  std::printf("\nAttention forward+backward (dq, dk, dv, dsinks), CPU backend, f32, B=%lld, %lld query heads over %lld kv "
              "head, Dh=%lld, sinks, causal; medians of 3:\n",
              static_cast<long long>(kB), static_cast<long long>(kH), static_cast<long long>(kK),
              static_cast<long long>(kDh));
  std::printf("%-10s %6s %12s %14s %10s %14s %16s\n", "mask", "T", "flash ms", "composite ms", "ratio", "flash peak MiB",
              "composite peak MiB");
  for (int64_t window : {int64_t{0}, kWindow}) {
    for (int64_t t : kLengths) {
      auto f = results().find(fmt::format("{}/{}/flash", t, window));
      auto c = results().find(fmt::format("{}/{}/composite", t, window));
      if (f == results().end() || c == results().end()) continue;
      std::printf("%-10s %6lld %12.1f %14.1f %9.2fx %14.1f %16.1f\n", window > 0 ? "window128" : "causal",
                  static_cast<long long>(t), 1e3 * f->second.seconds, 1e3 * c->second.seconds,
                  c->second.seconds / f->second.seconds, f->second.peak_bytes / 1048576.0,
                  c->second.peak_bytes / 1048576.0);
    }
  }
  std::printf("(ratio = composite time / flash time; peak = intermediate values live at once, from the compile "
              "report)\n");
  std::printf("\nbf16 q, k, v (cast in the program): the flash kernels on bf16 dot products vs the same inputs "
              "computed in f32 (KILN_ATTENTION_BF16_DOTS=0), medians of 3:\n");
  std::printf("%-10s %6s %12s %16s %10s\n", "mask", "T", "bf16 dots ms", "f32 math ms", "speed-up");
  for (int64_t window : {int64_t{0}, kWindow}) {
    for (int64_t t : kLengths) {
      auto d = results().find(fmt::format("{}/{}/flash_bf16", t, window));
      auto f = results().find(fmt::format("{}/{}/flash_bf16_f32math", t, window));
      if (d == results().end() || f == results().end()) continue;
      std::printf("%-10s %6lld %12.1f %16.1f %9.2fx\n", window > 0 ? "window128" : "causal", static_cast<long long>(t),
                  1e3 * d->second.seconds, 1e3 * f->second.seconds, f->second.seconds / d->second.seconds);
    }
  }
  std::printf("\nReproduce: cmake -S . -B build-bench -G Ninja && ninja -C build-bench attention_bench && "
              "build-bench/bench/attention_bench\n");
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  kiln::print_table();
  kiln::print_step_table();
  return 0;
}
