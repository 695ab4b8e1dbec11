// kiln compile [CONFIG.yml] [key=value ...] [--json]: traces the whole training step and
// compiles it for the CPU without allocating parameters or running anything, then reports
// what the compiler made of it: instruction counts before and after optimization, kernels
// by kind, collectives, FLOPs per step (MaxText's formula) and memory per device.
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/plan/compiled_step.h"
#include "kiln/train/observability/flops.h"

namespace kiln::app {

namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.3f} GiB", static_cast<double>(bytes) / (1 << 30)); }

Result<nlohmann::ordered_json> compile_report(const config::Config& cfg, const std::string& dump_dir) {
  KILN_ASSIGN_OR_RETURN(plan::CompiledStep step, plan::compile_step(cfg, dump_dir));
  const backend::CompileReport& r = step.executable->report();
  // The partitioner's collectives once the pipeline's cleanups ran (empty on one device).
  nlohmann::ordered_json collectives = nlohmann::ordered_json::object();
  nlohmann::ordered_json collective_bytes = nlohmann::ordered_json::object();
  for (const auto& [kind, stats] : r.collectives) {
    collectives[kind] = stats.count;
    collective_bytes[kind] = stats.bytes;
  }
  // The backend runs collectives as start/done pairs: count them as it runs them (its passes
  // may have merged or added some, e.g. the backward pass's re-gathers).
  for (const auto& [start, n] : r.async_by_kind) {
    const std::string sync = start.substr(0, start.size() - std::string("_start").size());
    collectives.erase(sync);
    collective_bytes.erase(sync);
    collectives[start] = n;
    collective_bytes[start] = r.async_bytes_by_kind.at(start);
  }

  models::ParamCounts counts = step.model->counts();
  train::TrainingFlops flops = train::training_tflops_per_device(train::FlopInputs::from_config(cfg));
  const plan::StepMemory& mem = step.memory;
  const int64_t param_bytes = mem.parameters, opt_bytes = mem.optimizer_state, copy_bytes = mem.bf16_weight_copies;
  const int64_t activations = mem.activations, temporaries = mem.temporaries;

  nlohmann::ordered_json j;
  j["model"] = cfg.get_string("model_name");
  j["devices"] = cfg.derived().num_devices;
  j["parameters_total"] = counts.total;
  j["parameters_active_per_token"] = counts.active_per_token;
  j["tflops_per_step_per_device"] = flops.total_tflops();
  j["tflops_learnable"] = flops.learnable_tflops;
  j["tflops_attention"] = flops.attention_tflops;
  j["flop_formula"] = train::flop_formula_name(train::FlopFormula::kMaxText2602);
  j["instructions_before"] = r.instructions_before;
  j["instructions_after"] = r.instructions_after;
  j["fused_kernels"] = r.fused_kernels;
  j["unique_fused_kernels"] = r.unique_kernels;
  j["gemms"] = r.gemms;
  j["attention_kernels"] = r.attention_kernels;  // fused attention forward + backward (0 on the composite path)
  j["grouped_matmuls"] = r.grouped_matmuls;      // MoE grouped matmuls (0 with sparse_matmul=false)
  j["library_kernels"] = r.library_kernels;
  j["fallback_kernels"] = r.fallback_kernels;
  j["fallback_by_op"] = r.fallback_by_op;
  j["mesh"] = cfg.derived().mesh.to_string();
  j["collectives"] = collectives;                 // kind -> count in the per-device program
  j["collective_bytes_per_device"] = collective_bytes;  // kind -> bytes one device moves per step
  j["async_collectives"] = {{"pairs", r.async_collectives},
                            {"overlapped", r.overlapped_collectives},
                            {"limit_bytes", r.overlap_limit_bytes}};
  j["kernels_compiled"] = r.kernels_compiled;
  j["compile_seconds"] = r.compile_seconds;
  j["memory_per_device_bytes"] = {{"parameters", param_bytes},
                                  {"optimizer_state", opt_bytes},
                                  {"bf16_weight_copies", copy_bytes},
                                  {"activations", activations},
                                  {"temporaries", temporaries},
                                  {"total", param_bytes + opt_bytes + copy_bytes + activations + temporaries}};
  j["memory_plan"] = {{"schedule", r.schedule},
                      {"arena_bytes", r.arena_bytes},
                      {"output_bytes", r.output_bytes},
                      {"kernel_scratch_bytes", r.kernel_scratch_bytes},
                      {"in_place_reuses", r.in_place_reuses},
                      {"donated_in_place", r.donated_in_place}};
  return j;
}

void print_text(const nlohmann::ordered_json& j) {
  auto mem = j["memory_per_device_bytes"];
  std::printf("model %s on %lld device(s)\n", j["model"].get<std::string>().c_str(), j["devices"].get<long long>());
  std::printf("  parameters: %lld total, %lld active per token\n", j["parameters_total"].get<long long>(),
              j["parameters_active_per_token"].get<long long>());
  std::printf("  FLOPs per step per device: %.4f TFLOPs (%.4f learnable + %.4f attention; %s)\n",
              j["tflops_per_step_per_device"].get<double>(), j["tflops_learnable"].get<double>(),
              j["tflops_attention"].get<double>(), j["flop_formula"].get<std::string>().c_str());
  std::printf("  instructions: %lld traced -> %lld after optimization\n", j["instructions_before"].get<long long>(),
              j["instructions_after"].get<long long>());
  std::printf("  kernels: %lld fused (%lld distinct), %lld GEMMs, %lld attention, %lld grouped matmuls, %lld library, "
              "%lld reference fallbacks\n",
              j["fused_kernels"].get<long long>(), j["unique_fused_kernels"].get<long long>(), j["gemms"].get<long long>(),
              j["attention_kernels"].get<long long>(), j["grouped_matmuls"].get<long long>(),
              j["library_kernels"].get<long long>(), j["fallback_kernels"].get<long long>());
  if (!j["fallback_by_op"].empty()) {
    std::string ops;
    for (const auto& [op, n] : j["fallback_by_op"].items()) ops += fmt::format(" {} x{}", op, n.get<long long>());
    std::printf("  on the reference fallback:%s\n", ops.c_str());
  }
  if (j["collectives"].empty()) {
    std::printf("  collectives: none (single-device program)\n");
  } else {
    std::string list;
    for (const auto& [kind, n] : j["collectives"].items()) {
      list += fmt::format(" {} x{} ({:.1f} MiB)", kind, n.get<long long>(),
                          j["collective_bytes_per_device"][kind].get<double>() / (1 << 20));
    }
    std::printf("  collectives per device per step (mesh %s):%s\n", j["mesh"].get<std::string>().c_str(), list.c_str());
    auto async = j["async_collectives"];
    if (async["pairs"].get<int64_t>() > 0) {
      std::printf("  async collectives: %lld start/done pairs, %lld overlapped with compute (at most %.1f MiB in flight)\n",
                  async["pairs"].get<long long>(), async["overlapped"].get<long long>(),
                  async["limit_bytes"].get<double>() / (1 << 20));
    }
  }
  std::printf("  compile: %.2f s, %lld kernel libraries built (0 = all cached)\n", j["compile_seconds"].get<double>(),
              j["kernels_compiled"].get<long long>());
  const std::string copies = mem["bf16_weight_copies"].get<int64_t>() > 0
                                 ? " + bf16 weight copies " + gib(mem["bf16_weight_copies"])
                                 : std::string();
  std::printf("  memory per device: %s total = parameters %s + optimizer state %s%s + activations %s + temporaries %s\n",
              gib(mem["total"]).c_str(), gib(mem["parameters"]).c_str(), gib(mem["optimizer_state"]).c_str(),
              copies.c_str(), gib(mem["activations"]).c_str(), gib(mem["temporaries"]).c_str());
  auto plan = j["memory_plan"];
  std::printf("  memory plan: %s schedule, arena %s, outputs %s, kernel scratch %s; %lld fusion outputs in place, "
              "%lld state outputs donated in place\n",
              plan["schedule"].get<std::string>().c_str(), gib(plan["arena_bytes"]).c_str(),
              gib(plan["output_bytes"]).c_str(), gib(plan["kernel_scratch_bytes"]).c_str(),
              plan["in_place_reuses"].get<long long>(), plan["donated_in_place"].get<long long>());
}

}  // namespace

std::function<int()> add_compile_command(CLI::App& cmd) {
  struct Options {
    std::vector<std::string> settings;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("settings", opts->settings, "An optional CONFIG.yml first, then key=value overrides")
      ->type_name("[CONFIG.yml] [key=value ...]");
  cmd.add_flag("--json", opts->json, "Print the report as one JSON object");
  return [opts]() -> int {
    Result<config::Config> cfg = config::load(opts->settings);
    if (!cfg.ok()) return report_error(cfg.status());
    Result<nlohmann::ordered_json> report = compile_report(*cfg, "");
    if (!report.ok()) return report_error(report.status());
    if (opts->json) {
      std::printf("%s\n", report->dump(2).c_str());
    } else {
      print_text(*report);
    }
    return kExitOk;
  };
}

}  // namespace kiln::app
