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
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"

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

const std::vector<int64_t> kLengths = {1024, 2048, 4096};

void register_all() {
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
  return 0;
}
