// Run directories written by the report tests: metrics.jsonl, events.jsonl, checkpoints and a
// profile, shaped like a gpt-oss-tiny run's (4 MoE layers, expert_load every 4 steps).
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kiln::report::testing {

// A fresh, empty directory under the test's temporary directory (per process: CTest runs
// test cases in parallel).
inline std::string fresh_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "kiln_report_" + std::to_string(getpid()) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline double loss_at(int64_t step) { return 8.75 - 0.4 * std::log1p(static_cast<double>(step)); }

// One metrics.jsonl line, as train/observability/metrics.cc writes it.
inline std::string metrics_line(int64_t step, int layers = 4, int log_period = 4) {
  std::string line = fmt::format(
      "{{\"step\": {}, \"loss\": {}, \"lm_loss\": {}, \"total_weights\": 1024, \"moe_lb_loss\": 0, \"z_loss\": 0, "
      "\"grad_norm\": 1, \"raw_grad_norm\": {}, \"param_norm\": {}, \"learning_rate\": {}, \"step_time_s\": {}, "
      "\"data_wait_s\": 0.001, \"tokens_per_s_per_device\": {}, \"tflops_per_s_per_device\": 0.02, \"mfu\": {}",
      step, loss_at(step), loss_at(step), 4.2 - 0.01 * step, 194.1 - 0.001 * step, 3e-5 * (step + 1) / 12,
      step == 0 ? 1.5 : 0.9 + 0.01 * (step % 3), step == 0 ? 680.0 : 1100.0 + step, step == 0 ? 0.12 : 0.2 + 0.001 * step);
  if (layers > 0 && step % log_period == 0) {
    line += ", \"expert_load\": [";
    for (int l = 0; l < layers; ++l) line += fmt::format("{}[{}, 256, {}]", l ? ", " : "", 300 + 20 * l + step, l == 3 ? 2 : 0);
    line += "]";
  }
  return line + "}";
}

inline std::string event_line(const nlohmann::json& e) { return e.dump(); }

inline nlohmann::json start_event(double time, int64_t step, int attempt = 1) {
  return {{"time", time},
          {"event", "start"},
          {"step", step},
          {"attempt", attempt},
          {"config_diff", {{"model_name", "gpt-oss-tiny"}, {"steps", "12"}, {"base_emb_dim", "256"}}},
          {"config_sources", {{"model_name", "override"}, {"steps", "override"}, {"base_emb_dim", "model"}}},
          {"peaks", {{"f32_tflops", 0.114}, {"bf16_tflops", 0.229}, {"compute", "f32"}, {"source", "measured"}}},
          {"num_devices", 4},
          {"mesh", {{"axes", {"data", "fsdp", "expert"}}, {"ici", {1, 2, 2}}, {"dcn", {1, 1, 1}}}}};
}

inline nlohmann::json compile_event(double time) {
  return {{"time", time},
          {"event", "compile"},
          {"step", 0},
          {"census",
           {{"instructions_before", 5219},
            {"instructions", 1929},
            {"fused_kernels", 469},
            {"unique_kernels", 95},
            {"gemms", 83},
            {"library_kernels", 563},
            {"attention_kernels", 12},
            {"grouped_matmul_kernels", 48},
            {"fallback_kernels", 0},
            {"collectives", {{"all_gather", {{"count", 24}, {"bytes", 3 * 1048576}}}}},
            {"memory_per_device_bytes", 178355072}}},
          {"trace_s", 0.01},
          {"compile_s", 5.4},
          {"init_s", 1.1}};
}

inline nlohmann::json attribution_event(double time, int64_t step, const std::string& gemm_rate = "51.5 GFLOP/s = 45% of peak") {
  return {{"time", time},
          {"event", "attribution"},
          {"step", step},
          {"step_s", 0.897},
          {"mfu", 0.2072},
          {"rows",
           {{{"name", "gemm"}, {"seconds", 0.2042}, {"percent", 22.8}, {"rate", gemm_rate}, {"mfu_without", 0.2367}},
            {{"name", "attention"}, {"seconds", 0.2369}, {"percent", 26.4}, {"rate", "5.7 GFLOP/s"}, {"mfu_without", 0.2766}},
            {{"name", "host overhead"}, {"seconds", 0.4559}, {"percent", 50.8}, {"rate", "-"}, {"mfu_without", 0.4}},
            {{"name", "total"}, {"seconds", 0.897}, {"percent", 100.0}, {"rate", ""}, {"mfu_without", 0.2072}}}}};
}

struct RunFixture {
  int64_t steps = 12;
  bool events = true;
  bool finished = true;
  std::string torn_tail;  // appended to metrics.jsonl without a newline
  std::string gemm_rate = "51.5 GFLOP/s = 45% of peak";
};

// A whole run: steps 0..steps-1, evals at 4, 8, 12, checkpoints at 5, 10, a data stall, a
// restore (the second start), attribution and finish.
inline std::string write_run(const std::string& dir, const RunFixture& f = {}) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream m(dir + "/metrics.jsonl", std::ios::binary);
    for (int64_t s = 0; s < f.steps; ++s) m << metrics_line(s) << "\n";
    m << f.torn_tail;
  }
  if (f.events) {
    std::ofstream e(dir + "/events.jsonl", std::ios::binary);
    const double t0 = 1796162656.0;
    e << event_line(start_event(t0, 0)) << "\n" << event_line(compile_event(t0 + 0.1)) << "\n";
    e << event_line({{"time", t0 + 4}, {"event", "eval"}, {"step", 4}, {"eval_loss", 4.0254}}) << "\n";
    e << event_line({{"time", t0 + 5}, {"event", "checkpoint_save"}, {"step", 5}, {"path", dir + "/checkpoints/5"},
                     {"blocked_s", 0.12}, {"background", true}})
      << "\n";
    e << event_line({{"time", t0 + 6}, {"event", "data_stall"}, {"step", 6}, {"wait_s", 0.25}}) << "\n";
    e << event_line({{"time", t0 + 7}, {"event", "start"}, {"step", 5}, {"attempt", 2}, {"num_devices", 4}}) << "\n";
    e << event_line({{"time", t0 + 7.1}, {"event", "checkpoint_restore"}, {"step", 5}, {"path", dir + "/checkpoints/5"}})
      << "\n";
    e << event_line({{"time", t0 + 8}, {"event", "eval"}, {"step", 8}, {"eval_loss", 3.4669}}) << "\n";
    e << event_line({{"time", t0 + 10}, {"event", "checkpoint_save"}, {"step", 10}, {"path", dir + "/checkpoints/10"},
                     {"blocked_s", 0.02}})
      << "\n";
    if (f.finished) {
      e << event_line({{"time", t0 + 12}, {"event", "eval"}, {"step", 12}, {"eval_loss", 3.4326}}) << "\n";
      e << event_line(attribution_event(t0 + 12.5, 12, f.gemm_rate)) << "\n";
      e << event_line({{"time", t0 + 12.6}, {"event", "finish"}, {"step", 12}}) << "\n";
    }
  }
  for (int step : {5, 10}) {
    std::filesystem::create_directories(fmt::format("{}/checkpoints/{}", dir, step));
    std::ofstream(fmt::format("{}/checkpoints/{}/manifest.json", dir, step)) << "{\"step\": " << step << "}\n";
  }
  std::filesystem::create_directories(dir + "/profile");
  std::ofstream(dir + "/profile/attribution.txt") << "where the step time went (fixture)\n";
  return dir;
}

// A stand-in for chart.min.js: the unit tests check inlining, not Chart.js itself.
inline std::string fake_chartjs(const std::string& dir) {
  std::string path = dir + "/chart.min.js";
  std::ofstream(path) << "/* fake Chart.js */ window.Chart = function () {};\n";
  return path;
}

}  // namespace kiln::report::testing
