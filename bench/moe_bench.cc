// MoE benchmarks on the CPU backend:
//   1. grouped_matmul (and its weight gradient) on balanced random group sizes vs ONE sgemm
//      of the same total shape [M, K] x [K, N] (the GEMM library's rate): GFLOP/s and ratio.
//   2. A GPT-OSS MoE layer (router, top-k, clamped-SwiGLU experts with biases, weighted
//      combine), forward + backward (gradients of every parameter and of the input),
//      compiled by the CPU backend: sparse dispatch (sort, gather, grouped matmuls,
//      scatter_add) vs dense one-hot dispatch (every expert on every token), 8/16/32
//      experts, top-2/top-4.
// Prints a table of medians and ratios after the Google Benchmark output.
//
//   build-bench/bench/moe_bench                      (all)
//   build-bench/bench/moe_bench --benchmark_filter=gmm
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/gpt_oss/layers.h"
#include "kiln/models/model.h"

namespace kiln {
namespace {

using backend::Buffer;
using frontend::Tensor;

// Medians (seconds) by benchmark name, for the table.
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}

Buffer random_buffer(const ir::Shape& shape, std::mt19937_64& rng, double scale) {
  Buffer b(shape);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  if (shape.dtype() == ir::DType::kF32) {
    float* p = b.as<float>();
    for (int64_t i = 0; i < b.num_elements(); ++i) p[i] = dist(rng);
  } else {
    for (int64_t i = 0; i < b.num_elements(); ++i) b.set(i, dist(rng));
  }
  return b;
}

std::unique_ptr<backend::Executable> compile(const ir::Module& m) {
  backend::CompileOptions options;
  auto exe = backend::compile_cpu(m, options);
  KILN_CHECK_OK(exe);
  return std::move(*exe);
}

// Times exe on args; records the median of the iterations under `name`.
void time_runs(benchmark::State& state, backend::Executable& exe, const std::vector<Buffer>& args,
               const std::string& name, double flops) {
  std::vector<double> times;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = exe.run(args);
    KILN_CHECK_OK(out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  results()[name] = median;
  if (flops > 0) state.counters["GFLOP/s"] = flops / median * 1e-9;
}

// ---- 1. grouped matmul vs one sgemm ----

constexpr int64_t kTokens = 2048, kD = 768, kI = 768;

// Tokens per expert of random top-k routing (each token picks k distinct experts).
std::vector<int32_t> balanced_random_sizes(int64_t tokens, int64_t e, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> sizes(e, 0);
  std::vector<int> experts(e);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < e; ++i) experts[i] = i;
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t j = 0; j < k; ++j) ++sizes[experts[j]];
  }
  return sizes;
}

// kind: 0 = grouped_matmul x[M,K] w[E,K,N], 1 = grouped_matmul_weight_grad x[M,K] dy[M,N],
// 2 = one dot_general [M,K] x [K,N].
void bm_gmm(benchmark::State& state, int kind, int64_t e, int64_t k) {
  const int64_t m = kTokens * k;
  frontend::Graph g("gmm");
  ops::Builder& b = g.builder();
  std::mt19937_64 rng(1);
  std::vector<Buffer> args;
  if (kind == 2) {
    Tensor x = g.parameter("x", frontend::f32({m, kD}));
    Tensor w = g.parameter("w", frontend::f32({kD, kI}));
    g.set_outputs({frontend::matmul(x, w)});
    args = {random_buffer(x.shape(), rng, 1.0), random_buffer(w.shape(), rng, 0.05)};
  } else {
    Tensor x = g.parameter("x", frontend::f32({m, kD}));
    Tensor rhs = kind == 0 ? g.parameter("w", frontend::f32({e, kD, kI})) : g.parameter("dy", frontend::f32({m, kI}));
    Tensor sizes = g.parameter("sizes", frontend::s32({e}));
    ir::Instr* y = kind == 0 ? b.grouped_matmul(x.instr(), rhs.instr(), sizes.instr())
                             : b.grouped_matmul_weight_grad(x.instr(), rhs.instr(), sizes.instr());
    g.set_outputs({Tensor(&g, y)});
    Buffer s(sizes.shape());
    std::vector<int32_t> counts = balanced_random_sizes(kTokens, e, k, 7);
    std::copy(counts.begin(), counts.end(), s.as<int32_t>());
    args = {random_buffer(x.shape(), rng, 1.0), random_buffer(rhs.shape(), rng, 0.05), s};
  }
  auto module = g.release();
  auto exe = compile(*module);
  static const char* kKinds[] = {"gmm", "tgmm", "sgemm"};
  time_runs(state, *exe, args, std::string(kKinds[kind]) + "/E" + std::to_string(e) + "/k" + std::to_string(k),
            2.0 * static_cast<double>(m) * kD * kI);
}

// ---- 2. MoE layer forward + backward ----

constexpr int64_t kLayerB = 2, kLayerT = 512, kLayerD = 512, kLayerI = 512;

std::unique_ptr<models::gpt_oss::GptOss> moe_model(int64_t e, int64_t k, bool sparse) {
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = {"model_name=gpt-oss-tiny",
                       "override_model_config=true",
                       "base_emb_dim=" + std::to_string(kLayerD),
                       "base_num_query_heads=4",
                       "base_num_kv_heads=2",
                       "head_dim=64",
                       "base_num_decoder_layers=2",
                       "base_moe_mlp_dim=" + std::to_string(kLayerI),
                       "num_experts=" + std::to_string(e),
                       "num_experts_per_tok=" + std::to_string(k),
                       "vocab_size=256",
                       "max_target_length=" + std::to_string(kLayerT),
                       "per_device_batch_size=" + std::to_string(kLayerB),
                       std::string("sparse_matmul=") + (sparse ? "true" : "false")};
  auto config = config::load(options);
  KILN_CHECK_OK(config);
  auto c = models::gpt_oss::GptOssConfig::from(*config);
  KILN_CHECK_OK(c);
  return std::make_unique<models::gpt_oss::GptOss>(*c);
}

void bm_moe_layer(benchmark::State& state, int64_t e, int64_t k, bool sparse) {
  auto model = moe_model(e, k, sparse);
  frontend::Graph g("moe_layer");
  std::vector<Tensor> params;
  for (const auto& p : model->params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  Tensor x = g.parameter("x", frontend::f32({kLayerB, kLayerT, kLayerD}));
  Tensor r = g.parameter("r", frontend::f32({kLayerB, kLayerT, kLayerD}));
  models::gpt_oss::ParamTable table(*model, params);
  Tensor out = models::gpt_oss::mlp(model->config(), table, "layers.0.mlp", x).out;
  Tensor loss = (out * r).sum();
  std::vector<ir::Instr*> wrt = {x.instr()};
  for (const auto& name : {"gate.kernel", "gate.bias", "wi_0", "wi_1", "wi_0_bias", "wi_1_bias", "wo", "wo_bias"}) {
    wrt.push_back(params[model->index(std::string("layers.0.mlp.") + name)].instr());
  }
  auto grads = autodiff::gradients(g.computation(), loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);
  auto module = g.release();
  auto exe = compile(*module);
  std::mt19937_64 rng(3);
  std::vector<Buffer> args;
  for (const auto& p : model->params()) args.push_back(random_buffer(p.shape, rng, 0.05));
  args.push_back(random_buffer(x.shape(), rng, 1.0));
  args.push_back(random_buffer(r.shape(), rng, 1.0));
  // Useful FLOPs: 3 expert matmuls per routed pair, forward + 2 backward products each.
  double flops = 3.0 * 2.0 * kLayerB * kLayerT * k * kLayerD * kLayerI * 3.0;
  time_runs(state, *exe, args,
            std::string(sparse ? "sparse" : "dense") + "/E" + std::to_string(e) + "/k" + std::to_string(k), flops);
  state.counters["fallback_kernels"] = static_cast<double>(exe->report().fallback_kernels);
}

void register_all() {
  for (int64_t e : {8, 16, 32}) {
    for (int64_t k : {2, 4}) {
      std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k);
      for (int kind : {0, 1, 2}) {
        static const char* kKinds[] = {"gmm", "tgmm", "sgemm"};
        benchmark::RegisterBenchmark((std::string(kKinds[kind]) + tag).c_str(),
                                     [=](benchmark::State& s) { bm_gmm(s, kind, e, k); })
            ->UseManualTime()
            ->Iterations(7)
            ->Unit(benchmark::kMillisecond);
      }
      for (bool sparse : {true, false}) {
        benchmark::RegisterBenchmark((std::string(sparse ? "moe_layer_sparse" : "moe_layer_dense") + tag).c_str(),
                                     [=](benchmark::State& s) { bm_moe_layer(s, e, k, sparse); })
            ->UseManualTime()
            ->Iterations(sparse ? 5 : 3)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

void print_table() {
  auto& r = results();
  auto get = [&](const std::string& n) { return r.count(n) ? r[n] : 0.0; };
  std::printf("\nGrouped matmul vs one sgemm of the same total shape (M = %lld tokens x k, K = %lld, N = %lld;\n"
              "balanced random routing), f32, medians:\n",
              static_cast<long long>(kTokens), static_cast<long long>(kD), static_cast<long long>(kI));
  std::printf("%-8s %8s %10s %10s %10s %8s %8s\n", "config", "M", "gmm GF/s", "tgmm GF/s", "sgemm GF/s", "gmm/ref",
              "tgmm/ref");
  for (int64_t e : {8, 16, 32}) {
    for (int64_t k : {2, 4}) {
      std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k);
      double flops = 2.0 * kTokens * k * kD * kI * 1e-9;
      double a = get("gmm" + tag), b = get("tgmm" + tag), c = get("sgemm" + tag);
      if (a == 0 || b == 0 || c == 0) continue;
      std::printf("%-8s %8lld %10.1f %10.1f %10.1f %7.0f%% %7.0f%%\n", tag.substr(1).c_str(),
                  static_cast<long long>(kTokens * k), flops / a, flops / b, flops / c, 100 * c / a, 100 * c / b);
    }
  }
  std::printf("\nMoE layer forward+backward (B=%lld, T=%lld, D=%lld, expert width %lld), CPU backend, medians:\n",
              static_cast<long long>(kLayerB), static_cast<long long>(kLayerT), static_cast<long long>(kLayerD),
              static_cast<long long>(kLayerI));
  std::printf("%-8s %11s %11s %14s\n", "config", "sparse ms", "dense ms", "dense/sparse");
  for (int64_t e : {8, 16, 32}) {
    for (int64_t k : {2, 4}) {
      std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k);
      double s = get("sparse" + tag), d = get("dense" + tag);
      if (s == 0 || d == 0) continue;
      std::printf("%-8s %11.1f %11.1f %13.2fx\n", tag.substr(1).c_str(), 1e3 * s, 1e3 * d, d / s);
    }
  }
  std::printf("\nReproduce: cmake -S . -B build-bench -G Ninja && ninja -C build-bench moe_bench && "
              "build-bench/bench/moe_bench\n");
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
