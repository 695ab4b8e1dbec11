// kiln plan [CONFIG.yml] [key=value ...] [target=NAME] [--json] [--search] [--routing-from RUN]
// kiln plan --calibrate [CONFIG.yml] [key=value ...]
//
// Predicts one training step of the config on a target (configs/targets/*.yml, or `cpu`:
// this machine, once calibrated) from the step compiled for the config's mesh (nothing is
// allocated or run): time split into compute by kernel class, collectives by kind (exposed
// and overlapped, from the schedule), host overhead; tokens/s, TFLOP/s and MFU; memory per
// device against the target's capacity. The cost model: src/kiln/plan/cost_model.h.
// --search ranks the meshes of the same device count (fsdp, expert, tensor, data), remat
// policies and, where those do not fit, micro-batching of the same global batch by predicted
// step time; --calibrate measures this CPU (plan/calibrate.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "plan_report.h"
#include "mpi_link.h"
#include "kiln/config/config.h"
#include "kiln/plan/calibrate.h"
#include "kiln/plan/compiled_step.h"
#include "kiln/plan/cost_model.h"
#include "kiln/plan/target.h"
#include "kiln/report/report.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/train/observability/flops.h"

namespace kiln::app {
namespace {

using nlohmann::ordered_json;

// `target=NAME` is the command's own setting, not a config key.
std::string take_target(std::vector<std::string>& settings) {
  std::string target = "cpu";
  std::vector<std::string> rest;
  for (const std::string& s : settings) {
    if (s.rfind("target=", 0) == 0) {
      target = s.substr(7);
    } else {
      rest.push_back(s);
    }
  }
  settings = std::move(rest);
  return target;
}

// The busiest device's share of the worst-case MoE buffers in a run: from the last step of
// its metrics.jsonl, the mean over layers of max/mean expert load, over the expert axis
// (an upper estimate: as if that device's experts all carried the busiest one's load).
Result<double> observed_routing_load(const std::string& run, int64_t expert_axis) {
  std::string path = run;
  if (std::filesystem::is_directory(path)) path = (std::filesystem::path(run) / "metrics.jsonl").string();
  std::ifstream in(path);
  if (!in) return not_found("--routing-from: cannot read {} (a run directory or its metrics.jsonl)", path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("\"expert_load\"") != std::string::npos) last = line;
  }
  if (last.empty()) return invalid_argument("--routing-from: {} has no step with expert_load (a MoE run's metrics)", path);
  nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded() || !j["expert_load"].is_array() || j["expert_load"].empty()) {
    return invalid_argument("--routing-from: {}: the last expert_load line is not [[max, mean, dropped], ...]", path);
  }
  double ratio = 0;
  for (const auto& layer : j["expert_load"]) {
    if (!layer.is_array() || layer.size() < 2 || !layer[0].is_number() || !layer[1].is_number() ||
        layer[1].get<double>() <= 0) {
      return invalid_argument("--routing-from: {}: expert_load entries must be [max, mean, dropped]", path);
    }
    ratio += layer[0].get<double>() / layer[1].get<double>();
  }
  ratio /= static_cast<double>(j["expert_load"].size());
  return std::min(1.0, ratio / static_cast<double>(expert_axis));
}


// Every (fsdp, expert, tensor, data) with product `devices`, fsdp outermost in the loop.
std::vector<std::array<int64_t, 4>> factorizations(int64_t devices) {
  std::vector<std::array<int64_t, 4>> out;
  for (int64_t f = 1; f <= devices; ++f) {
    if (devices % f) continue;
    for (int64_t e = 1; e <= devices / f; ++e) {
      if ((devices / f) % e) continue;
      for (int64_t t = 1; t <= devices / f / e; ++t) {
        if ((devices / f / e) % t) continue;
        out.push_back({f, e, t, devices / f / e / t});
      }
    }
  }
  return out;
}

// The micro-batch counts the search tries, in order: the config's own, then every larger
// count that divides the global batch (the same global batch in smaller micro-batches).
std::vector<int64_t> micro_batch_counts(const config::Config& base) {
  const int64_t k0 = base.get_int("gradient_accumulation_steps");
  const int64_t global = base.derived().global_batch_size;
  std::vector<int64_t> out = {k0};
  for (int64_t k = k0 + 1; k <= global; ++k) {
    if (global % k == 0) out.push_back(k);
  }
  return out;
}

int run_search(const std::vector<std::string>& settings, const plan::Target& target, const config::Config& base,
               bool json) {
  const int64_t devices = base.derived().num_devices;
  const int64_t global_batch = base.derived().global_batch_size;
  struct Row {
    std::string mesh, remat;
    int64_t micro_batches = 1;
    double step_s = 0, memory_gib = 0;
    bool fits = false;
  };
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  for (const auto& [f, e, t, d] : factorizations(devices)) {
    // remat=full only trades step time for activation memory: a mesh that fits without it
    // at the config's own micro-batches, or whose state alone (the same under either policy)
    // does not fit, is not compiled again.
    bool settled = false;
    for (const char* remat : {"none", "full"}) {
      if (settled) break;
      // Micro-batching trades step time for activation memory, so a mesh and remat policy
      // that fit are not split further; one that does not fit tries more, smaller
      // micro-batches of the same global batch until it fits, they run out, or splitting
      // cannot help: the state alone (parameters, moments, copies) does not fit, or the
      // last split did not lower the memory.
      std::string error;  // why the last count did not compile
      bool compiled = false;
      double previous_mem = -1;
      for (int64_t k : micro_batch_counts(base)) {
        std::vector<std::string> s = settings;
        for (const std::string& kv :
             {fmt::format("ici_fsdp_parallelism={}", f), fmt::format("ici_expert_parallelism={}", e),
              fmt::format("ici_tensor_parallelism={}", t), fmt::format("ici_data_parallelism={}", d),
              std::string("remat_policy=") + remat}) {
          s.push_back(kv);
        }
        if (k != base.get_int("gradient_accumulation_steps")) {
          // per_device_batch_size is per micro-batch (MaxText's semantics); a model file may
          // set it, hence the override.
          const double per_device = static_cast<double>(global_batch / k) / static_cast<double>(devices);
          for (const std::string& kv : {std::string("override_model_config=true"),
                                        fmt::format("per_device_batch_size={}", per_device),
                                        fmt::format("gradient_accumulation_steps={}", k)}) {
            s.push_back(kv);
          }
        }
        const std::string mesh = fmt::format("fsdp={} expert={} tensor={} data={}", f, e, t, d);
        Result<Planned> pl = plan_config(s, target, {});
        if (!pl.ok()) {
          error = fmt::format("{} remat={} micro-batches={}: {}", mesh, remat, k, pl.status().message());
          continue;
        }
        compiled = true;
        const double mem = gib(pl->step.memory.total());
        rows.push_back({mesh, remat, k, pl->prediction.step_s, mem, mem <= target.memory_gib});
        if (!json) {
          std::printf("  %s remat=%s micro-batches=%lld: %.4f s, %.2f GiB\n", mesh.c_str(), remat,
                      static_cast<long long>(k), pl->prediction.step_s, mem);
          std::fflush(stdout);
        }
        if (rows.back().fits) {
          // Without splitting the batch: remat=full would only add the recomputation.
          settled = k == base.get_int("gradient_accumulation_steps");
          break;
        }
        const plan::StepMemory& m = pl->step.memory;
        const double state = gib(m.parameters + m.optimizer_state + m.bf16_weight_copies);
        if (state > target.memory_gib) {
          settled = true;
          break;
        }
        if (previous_mem >= 0 && mem >= previous_mem) break;
        previous_mem = mem;
      }
      if (!compiled) skipped.push_back(error);
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.fits != b.fits ? a.fits : a.fits ? a.step_s < b.step_s : a.memory_gib < b.memory_gib;
  });
  if (rows.empty() || !rows.front().fits) {
    const std::string smallest =
        rows.empty() ? std::string("no mesh compiled")
                     : fmt::format("the smallest, {} remat={} micro-batches={}, needs {:.2f} GiB", rows.front().mesh,
                                   rows.front().remat, rows.front().micro_batches, rows.front().memory_gib);
    const double need = rows.empty() ? 0 : rows.front().memory_gib / target.memory_gib;
    std::fprintf(stderr,
                 "kiln plan: error: %s does not fit %s (%.1f GiB per device) on any mesh of %lld devices: %s; try about "
                 "%lld devices (local_devices=N) or a smaller model\n",
                 base.get_string("model_name").c_str(), target.name.c_str(), target.memory_gib,
                 static_cast<long long>(devices), smallest.c_str(),
                 static_cast<long long>(std::ceil(need * static_cast<double>(devices))));
    return kExitFailure;
  }
  if (json) {
    ordered_json j = ordered_json::array();
    for (const Row& r : rows) {
      j.push_back({{"mesh", r.mesh},
                   {"remat_policy", r.remat},
                   {"gradient_accumulation_steps", r.micro_batches},
                   {"step_s", r.step_s},
                   {"memory_gib", r.memory_gib},
                   {"fits", r.fits}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("meshes of %lld devices for %s on %s, fastest first (memory capacity %.2f GiB):\n",
              static_cast<long long>(devices), base.get_string("model_name").c_str(), target.name.c_str(),
              target.memory_gib);
  for (size_t i = 0; i < rows.size() && i < 5; ++i) {
    const Row& r = rows[i];
    std::printf("  %zu. %-36s remat=%-4s micro-batches=%-3lld %.4f s/step, %.2f GiB%s\n", i + 1, r.mesh.c_str(),
                r.remat.c_str(), static_cast<long long>(r.micro_batches), r.step_s, r.memory_gib,
                r.fits ? "" : " (does not fit)");
  }
  size_t unfit = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return !r.fits; });
  std::printf("  (%zu candidates compiled, %zu do not fit, %zu not valid for this model)\n", rows.size(), unfit,
              skipped.size());
  return kExitOk;
}

}  // namespace

std::function<int()> add_plan_command(CLI::App& cmd) {
  struct Options {
    std::vector<std::string> settings;
    bool json = false, calibrate = false, search = false;
    std::string routing_from, output, measure_mpi_link;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("settings", opts->settings,
                 "An optional CONFIG.yml first, then key=value overrides; target=NAME picks the target "
                 "(configs/targets/*.yml, or cpu: this machine, calibrated)")
      ->type_name("[CONFIG.yml] [key=value ...] [target=NAME]");
  cmd.add_flag("--json", opts->json, "Print the prediction as one JSON object");
  cmd.add_flag("--calibrate", opts->calibrate, "Measure this CPU for the config's mesh and write the cpu target");
  cmd.add_flag("--search", opts->search,
               "Rank the meshes, remat policies and micro-batching of the same device count and global batch");
  cmd.add_option("--output", opts->output,
                 "With --calibrate: write the target here (default: the cpu target's place in the cache folder)");
  cmd.add_option("--routing-from", opts->routing_from,
                 "A MoE run directory (or its metrics.jsonl): also predict under the expert load it observed");
  // The MPI job --calibrate launches to measure the link between ranks (mpi_link.h).
  cmd.add_option("--measure-mpi-link", opts->measure_mpi_link)->group("");
  return [opts]() -> int {
    if (!opts->measure_mpi_link.empty()) {
      Status s = measure_mpi_link(opts->measure_mpi_link);
      return s.ok() ? kExitOk : report_error(s);
    }
    std::vector<std::string> settings = opts->settings;
    const std::string target_name = take_target(settings);
    Result<config::Config> cfg = config::load(settings);
    if (!cfg.ok()) return report_error(cfg.status());
    const int threads = runtime::threads_per_device(cfg->derived().local_devices);
    if (opts->calibrate) {
      plan::CalibrateOptions co;
      co.log = [](const std::string& l) { std::printf("  %s\n", l.c_str()); std::fflush(stdout); };
      co.inter_link = run_mpi_link_job;
      std::printf("calibrating this CPU for %d thread(s) per device with %s\n", threads,
                  cfg->get_string("model_name").c_str());
      Result<plan::Target> t = plan::calibrate_cpu(settings, co);
      if (!t.ok()) return report_error(t.status());
      const std::string path = opts->output.empty() ? plan::calibrated_cpu_path(threads) : opts->output;
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
      // A failed write never replaces a good calibration.
      if (Status s = report::write_file_atomically(path, plan::target_to_yaml(*t)); !s.ok()) return report_error(s);
      std::printf("wrote %s (%s)\n", path.c_str(), opts->output.empty() ? "target=cpu" : ("target=" + path).c_str());
      return kExitOk;
    }
    Result<plan::Target> target = plan::load_target(target_name, threads);
    if (!target.ok()) return report_error(target.status());
    if (opts->search) return run_search(settings, *target, *cfg, opts->json);
    Result<Planned> pl = plan_config(settings, *target, {});
    if (!pl.ok()) return report_error(pl.status());
    ordered_json j = prediction_json(*pl, *target);
    const int64_t experts = pl->step.mesh.size("expert");
    if (experts > 1) {
      // The same step at another routing load.
      auto step_at = [&](double load) {
        plan::PredictOptions o = pl->options;
        o.routing_load = load;
        return plan::predict_step(pl->step.executable->schedule(), pl->step.mesh, *target, o).step_s;
      };
      ordered_json r = {{"expert_axis", experts}, {"balanced_s", pl->prediction.step_s}};
      if (!opts->routing_from.empty()) {
        Result<double> load = observed_routing_load(opts->routing_from, experts);
        if (!load.ok()) return report_error(load.status());
        r["observed_load"] = *load;
        r["observed_s"] = step_at(*load);
      }
      r["worst_s"] = step_at(1.0);
      j["routing"] = r;
    } else if (!opts->routing_from.empty()) {
      return report_error(invalid_argument(
          "--routing-from: the mesh has no expert axis, so routing does not change the step (set "
          "ici_expert_parallelism > 1)"));
    }
    if (opts->json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_prediction(j);
    }
    return j["fits"].get<bool>() ? kExitOk : kExitFailure;
  };
}

}  // namespace kiln::app
