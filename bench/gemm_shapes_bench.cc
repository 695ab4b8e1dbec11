// The GEMMs of a real run, timed with oneDNN alone: checks the "gemm" row of the MFU
// attribution table (train/observability/attribution.h) against a separate measurement of the same shapes.
//
//   build/kiln train model_name=gpt-oss-small steps=6 report=true run_name=attr ...
//   build/bench/gemm_shapes_bench out/attr/profile/gemm_shapes.jsonl
//
// Input: gemm_shapes.jsonl from a run with report=true or profiler=trace (one line per
// distinct shape: dtype, batch, m, n, k, trans_a, trans_b, count_per_step and the
// seconds_per_step the run measured). For each f32 shape this calls dnnl_sgemm exactly as
// backend/cpu/gemm/gemm.cc does (same transposes; batched small products one per OpenMP thread)
// on seeded random operands, and prints per shape and in total the run's time per step next
// to the benchmark's, and both rates. bf16 shapes are listed but not timed (the bf16 path
// is a oneDNN matmul primitive; see bench/attention_bench and docs/backend.md).
// Operand copies the kernel makes for non-transposable layouts are not modelled: a run time
// well above the benchmark's for one shape points at them.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct Shape {
  std::string dtype;
  int64_t batch, m, n, k;
  bool ta, tb;
  double count_per_step, run_s_per_step;
};

// Seconds per call of one (batched) GEMM, median of `reps` after a warm-up.
double time_gemm(const Shape& s, int reps) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(s.batch * s.m * s.k), b(s.batch * s.k * s.n), c(s.batch * s.m * s.n);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  const char ta = s.ta ? 'T' : 'N', tb = s.tb ? 'T' : 'N';
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  auto one = [&](int64_t i) {
    dnnl_sgemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data() + i * s.m * s.k, lda, b.data() + i * s.k * s.n, ldb, 0.0f,
               c.data() + i * s.m * s.n, s.n);
  };
  auto call = [&] {
    if (s.batch > 1 && s.m * s.n * s.k < (1 << 21)) {
#pragma omp parallel for schedule(dynamic)
      for (int64_t i = 0; i < s.batch; ++i) one(i);
    } else {
      for (int64_t i = 0; i < s.batch; ++i) one(i);
    }
  };
  call();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gemm_shapes_bench RUN_DIR/profile/gemm_shapes.jsonl [reps=7]\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "gemm_shapes_bench: cannot open %s\n", argv[1]);
    return 2;
  }
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
  std::vector<Shape> shapes;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    shapes.push_back({j["dtype"], j["batch"], j["m"], j["n"], j["k"], j["trans_a"], j["trans_b"],
                      j["count_per_step"], j["seconds_per_step"]});
  }
  std::sort(shapes.begin(), shapes.end(),
            [](const Shape& x, const Shape& y) { return x.run_s_per_step > y.run_s_per_step; });
  std::printf("GEMMs of the run vs oneDNN dnnl_sgemm alone (%d threads, median of %d)\n", omp_get_max_threads(), reps);
  std::printf("%-5s %-26s %6s %12s %12s %7s %10s %10s\n", "dtype", "batch x MxNxK (trans)", "calls", "run s/step",
              "bench s/step", "ratio", "run GF/s", "bench GF/s");
  double run_total = 0, bench_total = 0, flops_total = 0, run_timed = 0;
  for (const Shape& s : shapes) {
    const double flops = 2.0 * s.batch * s.m * s.n * s.k * s.count_per_step;
    const std::string dims = std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                             std::to_string(s.k) + " (" + (s.ta ? "T" : "N") + (s.tb ? "T" : "N") + ")";
    run_total += s.run_s_per_step;
    if (s.dtype != "f32") {
      std::printf("%-5s %-26s %6.0f %12.6f %12s\n", s.dtype.c_str(), dims.c_str(), s.count_per_step,
                  s.run_s_per_step, "not timed");
      continue;
    }
    const double bench = time_gemm(s, reps) * s.count_per_step;
    bench_total += bench;
    run_timed += s.run_s_per_step;
    flops_total += flops;
    std::printf("%-5s %-26s %6.0f %12.6f %12.6f %7.2f %10.1f %10.1f\n", s.dtype.c_str(), dims.c_str(),
                s.count_per_step, s.run_s_per_step, bench, s.run_s_per_step / bench, flops / s.run_s_per_step / 1e9,
                flops / bench / 1e9);
  }
  std::printf("total f32: run %.6f s/step, oneDNN alone %.6f s/step, ratio %.2f; %.1f vs %.1f GFLOP/s "
              "(all GEMMs in the run: %.6f s/step)\n",
              run_timed, bench_total, bench_total > 0 ? run_timed / bench_total : 0.0,
              run_timed > 0 ? flops_total / run_timed / 1e9 : 0.0,
              bench_total > 0 ? flops_total / bench_total / 1e9 : 0.0, run_total);
  std::printf("reproduce: build/kiln train model_name=gpt-oss-small steps=6 report=true run_name=attr && "
              "build/bench/gemm_shapes_bench out/attr/profile/gemm_shapes.jsonl\n");
  return 0;
}
