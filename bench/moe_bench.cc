// MoE benchmarks on the CPU backend:
//   1. grouped_matmul (and its weight gradient) on balanced random group sizes vs ONE GEMM
//      of the same total shape [M, K] x [K, N] (the GEMM library's rate): GFLOP/s and ratio,
//      in f32 (oneDNN sgemm) and bf16 (oneDNN's bf16 matmul, f32 accumulation).
//   2. A GPT-OSS MoE layer (router, top-k, clamped-SwiGLU experts with biases, weighted
//      combine), forward + backward (gradients of every parameter and of the input),
//      compiled by the CPU backend: sparse dispatch (sort, gather, grouped matmuls,
//      scatter_add) vs dense one-hot dispatch (every expert on every token), 8/16/32
//      experts, top-2/top-4.
// The programs compared run alternately within each iteration (the machine is shared and
// noisy); a table of medians and ratios follows the Google Benchmark output.
//
//   build-bench/bench/moe_bench                      (all)
//   build-bench/bench/moe_bench --benchmark_filter=gmm_vs_sgemm
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

double seconds_of(backend::Executable& exe, const std::vector<Buffer>& args) {
  auto t0 = std::chrono::steady_clock::now();
  auto out = exe.run(args);
  KILN_CHECK_OK(out);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The machine is shared and its load changes from second to second, so the programs being
// compared run alternately, one after the other in every iteration, and each gets the
// median of its times (recorded under its name). The iteration time is the first's.
struct Contender {
  std::string name;
  backend::Executable* exe;
  const std::vector<Buffer>* args;
  double flops;
};

void run_alternately(benchmark::State& state, const std::vector<Contender>& contenders) {
  for (const Contender& c : contenders) seconds_of(*c.exe, *c.args);  // warm-up (pools, caches)
  std::vector<std::vector<double>> times(contenders.size());
  for (auto _ : state) {
    for (size_t i = 0; i < contenders.size(); ++i) times[i].push_back(seconds_of(*contenders[i].exe, *contenders[i].args));
    state.SetIterationTime(times[0].back());
  }
  for (size_t i = 0; i < contenders.size(); ++i) {
    double m = median(times[i]);
    results()[contenders[i].name] = m;
    state.counters[contenders[i].name.substr(0, contenders[i].name.find('/')) + "_GFLOP/s"] = contenders[i].flops / m * 1e-9;
  }
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

struct Program {
  std::unique_ptr<backend::Executable> exe;
  std::vector<Buffer> args;
};

// kind: 0 = grouped_matmul x[M,K] w[E,K,N], 1 = grouped_matmul_weight_grad x[M,K] dy[M,N],
// 2 = one dot_general [M,K] x [K,N]; all operands and results in `dt`.
Program gmm_program(int kind, int64_t e, int64_t k, ir::DType dt) {
  const int64_t m = kTokens * k;
  frontend::Graph g("gmm");
  ops::Builder& b = g.builder();
  std::mt19937_64 rng(1);
  std::vector<Buffer> args;
  if (kind == 2) {
    Tensor x = g.parameter("x", ir::Shape(dt, std::vector<int64_t>{m, kD}));
    Tensor w = g.parameter("w", ir::Shape(dt, std::vector<int64_t>{kD, kI}));
    g.set_outputs({frontend::matmul(x, w)});
    args = {random_buffer(x.shape(), rng, 1.0), random_buffer(w.shape(), rng, 0.05)};
  } else {
    Tensor x = g.parameter("x", ir::Shape(dt, std::vector<int64_t>{m, kD}));
    Tensor rhs = kind == 0 ? g.parameter("w", ir::Shape(dt, std::vector<int64_t>{e, kD, kI}))
                           : g.parameter("dy", ir::Shape(dt, std::vector<int64_t>{m, kI}));
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
  return {compile(*module), std::move(args)};
}

std::string dtype_tag(ir::DType dt) { return dt == ir::DType::kBF16 ? "/bf16" : "/f32"; }

void bm_gmm(benchmark::State& state, int64_t e, int64_t k, ir::DType dt) {
  std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k) + dtype_tag(dt);
  double flops = 2.0 * static_cast<double>(kTokens * k) * kD * kI;
  Program gmm = gmm_program(0, e, k, dt), tgmm = gmm_program(1, e, k, dt), sgemm = gmm_program(2, e, k, dt);
  run_alternately(state, {{"gmm" + tag, gmm.exe.get(), &gmm.args, flops},
                          {"tgmm" + tag, tgmm.exe.get(), &tgmm.args, flops},
                          {"sgemm" + tag, sgemm.exe.get(), &sgemm.args, flops}});
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

Program moe_layer_program(int64_t e, int64_t k, bool sparse) {
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
  return {std::move(exe), std::move(args)};
}

void bm_moe_layer(benchmark::State& state, int64_t e, int64_t k) {
  std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k);
  // Useful FLOPs: 3 expert matmuls per routed pair, forward + 2 backward products each.
  double flops = 3.0 * 2.0 * kLayerB * kLayerT * k * kLayerD * kLayerI * 3.0;
  Program sparse = moe_layer_program(e, k, true), dense = moe_layer_program(e, k, false);
  run_alternately(state, {{"sparse" + tag, sparse.exe.get(), &sparse.args, flops},
                          {"dense" + tag, dense.exe.get(), &dense.args, flops}});
}

void register_all() {
  for (int64_t e : {8, 16, 32}) {
    for (int64_t k : {2, 4}) {
      std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k);
      for (ir::DType dt : {ir::DType::kF32, ir::DType::kBF16}) {
        benchmark::RegisterBenchmark(("gmm_vs_sgemm" + tag + dtype_tag(dt)).c_str(),
                                     [=](benchmark::State& s) { bm_gmm(s, e, k, dt); })
            ->UseManualTime()
            ->Iterations(9)
            ->Unit(benchmark::kMillisecond);
      }
      benchmark::RegisterBenchmark(("moe_layer_sparse_vs_dense" + tag).c_str(),
                                   [=](benchmark::State& s) { bm_moe_layer(s, e, k); })
          ->UseManualTime()
          ->Iterations(3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

void print_table() {
  auto& r = results();
  auto get = [&](const std::string& n) { return r.count(n) ? r[n] : 0.0; };
  std::printf("\nGrouped matmul vs one GEMM of the same total shape (M = %lld tokens x k, K = %lld, N = %lld;\n"
              "balanced random routing; f32: sgemm, bf16: oneDNN bf16 matmul), medians:\n",
              static_cast<long long>(kTokens), static_cast<long long>(kD), static_cast<long long>(kI));
  std::printf("%-13s %8s %10s %10s %10s %8s %8s\n", "config", "M", "gmm GF/s", "tgmm GF/s", "gemm GF/s", "gmm/ref",
              "tgmm/ref");
  for (const char* dt : {"/f32", "/bf16"}) {
    for (int64_t e : {8, 16, 32}) {
      for (int64_t k : {2, 4}) {
        std::string tag = "/E" + std::to_string(e) + "/k" + std::to_string(k) + dt;
        double flops = 2.0 * kTokens * k * kD * kI * 1e-9;
        double a = get("gmm" + tag), b = get("tgmm" + tag), c = get("sgemm" + tag);
        if (a == 0 || b == 0 || c == 0) continue;
        std::printf("%-13s %8lld %10.1f %10.1f %10.1f %7.0f%% %7.0f%%\n", tag.substr(1).c_str(),
                    static_cast<long long>(kTokens * k), flops / a, flops / b, flops / c, 100 * c / a, 100 * c / b);
      }
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
