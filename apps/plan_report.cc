#include "plan_report.h"

#include <cstdio>

#include <fmt/format.h>

#include "kiln/train/observability/flops.h"

namespace kiln::app {

using nlohmann::ordered_json;

Result<Planned> plan_config(const std::vector<std::string>& settings, const plan::Target& target,
                            const plan::PredictOptions& options) {
  KILN_ASSIGN_OR_RETURN(config::Config cfg, config::load(settings));
  KILN_ASSIGN_OR_RETURN(plan::CompiledStep step, plan::compile_step(cfg));
  std::vector<const ir::Instr*> schedule = step.executable->schedule();
  plan::PredictOptions o = options;
  o.bf16_step = cfg.get_string("dtype") == "bfloat16";
  plan::StepPrediction p = plan::predict_step(schedule, step.mesh, target, o);
  const double tflops = train::training_tflops_per_device(train::FlopInputs::from_config(cfg)).total_tflops();
  return Planned{std::move(cfg), std::move(step), o, std::move(p), tflops};
}

ordered_json prediction_json(const Planned& pl, const plan::Target& target) {
  const plan::StepPrediction& p = pl.prediction;
  const config::Config& cfg = pl.config;
  const double peak = target.peak_tflops(pl.options.bf16_step);
  ordered_json j;
  j["model"] = cfg.get_string("model_name");
  j["mesh"] = pl.step.mesh.to_string();
  j["devices"] = cfg.derived().num_devices;
  j["target"] = target.name;
  j["target_description"] = target.description;
  j["step_s"] = p.step_s;
  j["tokens_per_s_per_device"] =
      static_cast<double>(cfg.derived().tokens_per_step) / static_cast<double>(cfg.derived().num_devices) / p.step_s;
  j["tflops_per_step_per_device"] = pl.model_tflops;
  j["tflops_per_s_per_device"] = pl.model_tflops / p.step_s;
  j["peak_tflops"] = peak;
  j["mfu"] = pl.model_tflops / p.step_s / peak;
  ordered_json compute = ordered_json::object();
  for (train::KernelKind k : plan::kKernelClasses) {
    const plan::ClassEstimate& c = p.cls(k);
    compute[plan::kernel_class_key(k)] = {{"kernels", c.count}, {"seconds", c.seconds}, {"gflops", c.flops / 1e9},
                                          {"gbytes", c.bytes / 1e9}};
  }
  j["compute_s"] = p.compute_s;
  j["compute"] = compute;
  ordered_json coll = ordered_json::object();
  for (const auto& [kind, c] : p.collectives) {
    coll[kind] = {{"count", c.count}, {"bytes", c.bytes}, {"seconds", c.seconds}, {"exposed_s", c.exposed_s},
                  {"link", c.link}};
  }
  j["collectives"] = coll;
  j["collective_s"] = p.collective_s;
  j["exposed_s"] = p.exposed_s;
  j["overlapped_s"] = p.overlapped_s();
  j["host_s"] = p.host_s;
  j["instructions"] = p.instructions;
  const plan::StepMemory& m = pl.step.memory;
  j["memory_per_device_bytes"] = {{"parameters", m.parameters},
                                  {"optimizer_state", m.optimizer_state},
                                  {"bf16_weight_copies", m.bf16_weight_copies},
                                  {"activations", m.activations},
                                  {"temporaries", m.temporaries},
                                  {"total", m.total()}};
  j["memory_capacity_gib"] = target.memory_gib;
  j["fits"] = gib(m.total()) <= target.memory_gib;
  if (p.routing_load > 0) j["routing_load"] = p.routing_load;
  return j;
}

void print_prediction(const ordered_json& j) {
  std::printf("%s on %s (%s), mesh %s, %lld device(s)\n", j["model"].get<std::string>().c_str(),
              j["target"].get<std::string>().c_str(), j["target_description"].get<std::string>().c_str(),
              j["mesh"].get<std::string>().c_str(), j["devices"].get<long long>());
  const double step = j["step_s"].get<double>();
  std::printf("  predicted step: %.4f s, %.0f tokens/s/device, %.2f TFLOP/s/device, MFU %.1f%% of %.1f TFLOP/s\n", step,
              j["tokens_per_s_per_device"].get<double>(), j["tflops_per_s_per_device"].get<double>(),
              100 * j["mfu"].get<double>(), j["peak_tflops"].get<double>());
  auto pct = [&](double s) { return 100.0 * s / step; };
  std::printf("  compute %.4f s (%.0f%%):\n", j["compute_s"].get<double>(), pct(j["compute_s"].get<double>()));
  for (const auto& [name, c] : j["compute"].items()) {
    if (c["kernels"].get<int64_t>() == 0) continue;
    std::printf("    %-15s %6lld kernels  %9.3f GFLOP  %8.3f GB  %.4f s (%.0f%%)\n", name.c_str(),
                c["kernels"].get<long long>(), c["gflops"].get<double>(), c["gbytes"].get<double>(),
                c["seconds"].get<double>(), pct(c["seconds"].get<double>()));
  }
  if (j["collectives"].empty()) {
    std::printf("  collectives: none\n");
  } else {
    std::printf("  collectives %.4f s on the link, %.4f s exposed (%.0f%% of the step), %.4f s overlapped:\n",
                j["collective_s"].get<double>(), j["exposed_s"].get<double>(), pct(j["exposed_s"].get<double>()),
                j["overlapped_s"].get<double>());
    for (const auto& [kind, c] : j["collectives"].items()) {
      std::printf("    %-18s x%-5lld %9.1f MiB  %.4f s, exposed %.4f s  (%s)\n", kind.c_str(), c["count"].get<long long>(),
                  c["bytes"].get<double>() / (1 << 20), c["seconds"].get<double>(), c["exposed_s"].get<double>(),
                  c["link"].get<std::string>().c_str());
    }
  }
  std::printf("  host %.4f s (%.0f%%) over %lld instructions\n", j["host_s"].get<double>(), pct(j["host_s"].get<double>()),
              j["instructions"].get<long long>());
  const auto& m = j["memory_per_device_bytes"];
  std::printf("  memory per device: %.2f GiB of %.1f GiB (%s): parameters %.2f, optimizer state %.2f, bf16 copies %.2f, "
              "activations %.2f, temporaries %.2f GiB\n",
              gib(m["total"].get<int64_t>()), j["memory_capacity_gib"].get<double>(),
              j["fits"].get<bool>() ? "fits" : "DOES NOT FIT", gib(m["parameters"].get<int64_t>()),
              gib(m["optimizer_state"].get<int64_t>()), gib(m["bf16_weight_copies"].get<int64_t>()),
              gib(m["activations"].get<int64_t>()), gib(m["temporaries"].get<int64_t>()));
  if (j.contains("routing")) {
    const auto& r = j["routing"];
    std::string line = fmt::format("  MoE routing (expert axis {}): balanced {:.4f} s", r["expert_axis"].get<int64_t>(),
                                   r["balanced_s"].get<double>());
    if (r.contains("observed_s")) {
      line += fmt::format(", observed {:.4f} s (load {:.2f})", r["observed_s"].get<double>(), r["observed_load"].get<double>());
    }
    line += fmt::format(", worst case {:.4f} s", r["worst_s"].get<double>());
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace kiln::app
