// kiln compile [CONFIG.yml] [key=value ...] [--json]: traces the whole training step and
// compiles it for the config's backend without allocating parameters or running anything,
// then reports what the compiler made of it: instruction counts before and after
// optimization, kernels by kind, collectives, FLOPs per step (MaxText's formula) and memory
// per device.
//
// With backend=pjrt compile_topology=NAME (v6e-4, h100-8, ...) it compiles ahead of time for
// that slice, whose hardware is not here (MaxText's train_compile): XLA's per-device memory
// and its census of the optimized program, beside Kiln's own plan for the same target
// (`kiln plan`); a config that does not fit is refused in one line naming the smallest change
// that would (remat, batch, fsdp degree).
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "plan_report.h"
#include "kiln/config/compile_topology.h"
#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/plan/compiled_step.h"
#include "kiln/train/observability/flops.h"

namespace kiln::app {

namespace {

std::string gib_text(int64_t bytes) { return fmt::format("{:.3f} GiB", gib(bytes)); }

nlohmann::ordered_json xla_json(const backend::XlaCompileReport& x) {
  nlohmann::ordered_json j;
  j["topology"] = x.topology;
  j["device"] = x.device;
  j["platform"] = x.platform;
  j["plugin_pjrt_api"] = x.plugin_version;
  j["compile_seconds"] = x.compile_seconds;
  if (!x.refused.empty()) j["refused"] = x.refused;
  j["memory_per_device_bytes"] = {{"arguments", x.argument_bytes},   {"outputs", x.output_bytes},
                                  {"aliased", x.alias_bytes},        {"temporaries", x.temp_bytes},
                                  {"generated_code", x.generated_code_bytes}, {"peak", x.peak_bytes},
                                  {"capacity", static_cast<int64_t>(x.capacity_bytes)}};
  j["census"] = {{"instructions", x.instructions}, {"fusions", x.fusions},         {"fusion_kinds", x.fusion_kinds},
                 {"gemms", x.gemms},               {"grouped_matmuls", x.grouped_matmuls},
                 {"attention", x.attention},       {"while_loops", x.while_loops}, {"collectives", x.collectives},
                 {"async_collectives", x.async_collectives}, {"custom_calls", x.custom_calls}};
  return j;
}

void print_xla(const nlohmann::ordered_json& x) {
  const auto& m = x["memory_per_device_bytes"];
  const auto& c = x["census"];
  std::printf("XLA, ahead of time for %s (%s; PJRT %s plugin, C API %s), compiled in %.1f s:\n",
              x["topology"].get<std::string>().c_str(), x["device"].get<std::string>().c_str(),
              x["platform"].get<std::string>().c_str(), x["plugin_pjrt_api"].get<std::string>().c_str(),
              x["compile_seconds"].get<double>());
  if (x.contains("refused")) std::printf("  refused: %s\n", x["refused"].get<std::string>().c_str());
  std::printf("  memory per device: peak %s of %s = arguments %s + outputs %s - aliased %s + temporaries %s\n",
              gib_text(m["peak"]).c_str(), gib_text(m["capacity"]).c_str(), gib_text(m["arguments"]).c_str(),
              gib_text(m["outputs"]).c_str(), gib_text(m["aliased"]).c_str(), gib_text(m["temporaries"]).c_str());
  std::string kinds;
  for (const auto& [kind, n] : c["fusion_kinds"].items()) kinds += fmt::format(" {} {}", kind, n.get<long long>());
  std::printf("  program: %lld instructions run, %lld fusions (%s), %lld GEMM kernels, %lld grouped matmuls, "
              "%lld fused attention calls, %lld while loops\n",
              c["instructions"].get<long long>(), c["fusions"].get<long long>(), kinds.empty() ? "" : kinds.substr(1).c_str(),
              c["gemms"].get<long long>(), c["grouped_matmuls"].get<long long>(), c["attention"].get<long long>(),
              c["while_loops"].get<long long>());
  if (c["collectives"].empty()) {
    std::printf("  collectives: none\n");
  } else {
    std::string list;
    for (const auto& [kind, n] : c["collectives"].items()) {
      const long long async = c["async_collectives"].contains(kind) ? c["async_collectives"][kind].get<long long>() : 0;
      list += fmt::format(" {} x{} ({} async)", kind, n.get<long long>(), async);
    }
    std::printf("  collectives:%s\n", list.c_str());
  }
  if (!c["custom_calls"].empty()) {
    std::string list;
    for (const auto& [target, n] : c["custom_calls"].items()) list += fmt::format(" {} x{}", target, n.get<long long>());
    std::printf("  custom calls:%s\n", list.c_str());
  }
}

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
                            {"limit_bytes", r.overlap_limit_bytes},
                            {"limit_fraction", r.overlap_limit_fraction}};
  j["kernels_compiled"] = r.kernels_compiled;
  j["compile_seconds"] = r.compile_seconds;
  j["memory_per_device_bytes"] = {{"parameters", param_bytes},
                                  {"optimizer_state", opt_bytes},
                                  {"bf16_weight_copies", copy_bytes},
                                  {"activations", activations},
                                  {"temporaries", temporaries},
                                  {"total", param_bytes + opt_bytes + copy_bytes + activations + temporaries}};
  if (r.xla) j["xla_report"] = xla_json(*r.xla);
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
  // Compiled ahead of time, XLA made the kernels and planned the memory: print_xla says what.
  const bool xla = j.contains("xla_report");
  if (!xla) {
    std::printf("  kernels: %lld fused (%lld distinct), %lld GEMMs, %lld attention, %lld grouped matmuls, %lld "
                "library, %lld reference fallbacks\n",
                j["fused_kernels"].get<long long>(), j["unique_fused_kernels"].get<long long>(),
                j["gemms"].get<long long>(), j["attention_kernels"].get<long long>(),
                j["grouped_matmuls"].get<long long>(), j["library_kernels"].get<long long>(),
                j["fallback_kernels"].get<long long>());
  }
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
      const int64_t fraction = async.value("limit_fraction", int64_t{0});
      const std::string why = fraction > 0 ? fmt::format(": 1/{} of the device's memory, which the plan still fits", fraction)
                                           : std::string();
      std::printf("  async collectives: %lld start/done pairs, %lld overlapped with compute (at most %.1f MiB in flight%s)\n",
                  async["pairs"].get<long long>(), async["overlapped"].get<long long>(),
                  async["limit_bytes"].get<double>() / (1 << 20), why.c_str());
    }
  }
  if (xla) {
    std::printf("  compile: %.2f s in all (Kiln's passes, then XLA)\n", j["compile_seconds"].get<double>());
    return;
  }
  std::printf("  compile: %.2f s, %lld kernel libraries built (0 = all cached)\n", j["compile_seconds"].get<double>(),
              j["kernels_compiled"].get<long long>());
  const std::string copies = mem["bf16_weight_copies"].get<int64_t>() > 0
                                 ? " + bf16 weight copies " + gib_text(mem["bf16_weight_copies"])
                                 : std::string();
  auto plan = j["memory_plan"];
  std::printf("  memory per device: %s total = parameters %s + optimizer state %s%s + activations %s + temporaries %s "
              "(of which kernel scratch %s)\n",
              gib_text(mem["total"]).c_str(), gib_text(mem["parameters"]).c_str(), gib_text(mem["optimizer_state"]).c_str(),
              copies.c_str(), gib_text(mem["activations"]).c_str(), gib_text(mem["temporaries"]).c_str(),
              gib_text(plan["kernel_scratch_bytes"]).c_str());
  std::printf("  memory plan: %s schedule, arena %s, outputs %s, kernel scratch %s; %lld fusion outputs in place, "
              "%lld state outputs donated in place\n",
              plan["schedule"].get<std::string>().c_str(), gib_text(plan["arena_bytes"]).c_str(),
              gib_text(plan["output_bytes"]).c_str(), gib_text(plan["kernel_scratch_bytes"]).c_str(),
              plan["in_place_reuses"].get<long long>(), plan["donated_in_place"].get<long long>());
}

// Settings that plan `settings` with Kiln's own compiler for the same devices as the topology
// (nothing of it is here either: the plan only costs the program).
std::vector<std::string> kiln_plan_settings(std::vector<std::string> settings, const config::CompileTopology& t) {
  for (const std::string& kv : {std::string("backend=cpu"), std::string("compile_topology="),
                                std::string("compile_topology_num_slices=-1"),
                                fmt::format("local_devices={}", t.total_devices()), fmt::format("num_slices={}", t.num_slices)}) {
    settings.push_back(kv);
  }
  return settings;
}

// The first change, smallest first, under which Kiln's plan of the config fits the device with
// `margin` to spare (XLA's peak over Kiln's, when XLA compiled it): remat, then more of the
// fsdp axis on the same devices, then half the batch per device (the same global batch in
// two micro-batches), then 2x, 4x, ... the devices with fsdp over them. "" when none does.
std::string smallest_fitting_change(const std::vector<std::string>& settings, const config::Config& cfg,
                                    const config::CompileTopology& t, const plan::Target& target, double margin) {
  std::vector<std::vector<std::string>> candidates;
  if (cfg.get_string("remat_policy") != "full") candidates.push_back({"remat_policy=full"});
  const config::Mesh& mesh = cfg.derived().mesh;
  const int64_t fsdp = mesh.size("fsdp"), data = mesh.size("data");
  if (data > 1 && data % 2 == 0) {
    candidates.push_back({fmt::format("ici_fsdp_parallelism={}", fsdp * 2), fmt::format("ici_data_parallelism={}", data / 2)});
  }
  const double per_device = cfg.get_float("per_device_batch_size");
  if (per_device * static_cast<double>(cfg.derived().num_devices) >= 2) {
    candidates.push_back({"override_model_config=true", fmt::format("per_device_batch_size={}", per_device / 2),
                          fmt::format("gradient_accumulation_steps={}", cfg.get_int("gradient_accumulation_steps") * 2)});
  }
  const std::string family = t.name.substr(0, t.name.rfind('-'));
  const int64_t named = std::stoll(t.name.substr(t.name.rfind('-') + 1));
  for (int64_t k : {2, 4, 8, 16, 32}) {
    const std::string bigger = fmt::format("{}-{}", family, named * k);
    if (!config::parse_compile_topology(bigger, t.num_slices).ok()) continue;
    candidates.push_back({"compile_topology=" + bigger, fmt::format("ici_fsdp_parallelism={}", fsdp * k)});
  }
  for (const std::vector<std::string>& change : candidates) {
    std::vector<std::string> s = settings;
    s.insert(s.end(), change.begin(), change.end());
    Result<config::Config> changed = config::load(s);
    if (!changed.ok()) continue;
    Result<Planned> pl = plan_config(kiln_plan_settings(s, *changed->derived().compile_topology), target, {});
    if (!pl.ok()) continue;
    const double total = gib(pl->step.memory.total()) * margin;
    if (total <= target.memory_gib) {
      std::string text;
      for (const std::string& kv : change) {
        if (kv != "override_model_config=true") text += (text.empty() ? "" : " ") + kv;
      }
      return fmt::format("{} ({:.1f} GiB by Kiln's plan{})", text, total, margin > 1 ? ", scaled by XLA's excess" : "");
    }
  }
  return "";
}

// kiln compile with compile_topology: Kiln's plan for the target, then XLA's compile (unless
// the state alone cannot fit), then the one-line verdict when it does not fit.
int compile_ahead_of_time(const std::vector<std::string>& settings, const config::Config& cfg, bool json) {
  const std::optional<config::CompileTopology>& t = cfg.derived().compile_topology;
  Result<plan::Target> target = plan::load_target(t->target, 1);
  if (!target.ok()) return report_error(target.status());
  Result<Planned> planned = plan_config(kiln_plan_settings(settings, *t), *target, {});
  if (!planned.ok()) return report_error(planned.status());
  nlohmann::ordered_json plan_j = prediction_json(*planned, *target);
  const plan::StepMemory& m = planned->step.memory;
  const double state_gib = gib(m.parameters + m.optimizer_state + m.bf16_weight_copies);

  nlohmann::ordered_json j;
  double peak_gib = gib(m.total());
  std::string over;  // why it does not fit
  double margin = 1;
  if (state_gib > target->memory_gib) {
    // XLA cannot make the parameters and moments smaller: no point compiling.
    over = fmt::format("the state alone (parameters, optimizer state, bf16 copies) is {:.1f} GiB per device by Kiln's "
                       "plan, more than the {:.1f} GiB of one device",
                       state_gib, target->memory_gib);
    j["kiln_plan"] = plan_j;
  } else {
    Result<nlohmann::ordered_json> report = compile_report(cfg, cfg.get_string("dump_ir"));
    if (!report.ok()) return report_error(report.status());
    j = *report;
    j["kiln_plan"] = plan_j;
  }
  if (j.contains("xla_report")) {
    const auto& x = j["xla_report"]["memory_per_device_bytes"];
    peak_gib = gib(x["peak"].get<int64_t>());
    if (j["xla_report"].contains("refused")) {
      // libtpu refuses a program whose temporaries exceed the chip at compile time.
      over = fmt::format("XLA refused it at compile time, its temporaries alone needing {:.1f} GiB per device of "
                         "the {:.1f} GiB of one device",
                         gib(x["temporaries"].get<int64_t>()), target->memory_gib);
      margin = std::max(1.0, peak_gib / gib(m.total()));
    } else if (peak_gib > target->memory_gib) {
      over = fmt::format("XLA's peak is {:.1f} GiB per device, more than the {:.1f} GiB of one device", peak_gib,
                         target->memory_gib);
      margin = std::max(1.0, peak_gib / gib(m.total()));
    }
  }
  j["fits"] = over.empty();
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    if (j.contains("instructions_before")) print_text(j);
    if (j.contains("xla_report")) print_xla(j["xla_report"]);
    std::printf("Kiln's plan for the same target:\n");
    print_prediction(plan_j);
  }
  std::fflush(stdout);
  if (over.empty()) return kExitOk;
  const std::string change = smallest_fitting_change(settings, cfg, *t, *target, margin);
  return report_error(invalid_argument(
      "compile_topology={} does not fit: {}; {}", t->name, over,
      change.empty() ? "no single change of remat, batch or fsdp degree (up to 32x the devices) fits by Kiln's plan"
                     : "the smallest change that fits: " + change));
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
    if (cfg->derived().compile_topology) return compile_ahead_of_time(opts->settings, *cfg, opts->json);
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
