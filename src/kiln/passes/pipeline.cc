#include "kiln/passes/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/base/logging.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"

namespace kiln::passes {

Pipeline& Pipeline::add(std::unique_ptr<Pass> pass) {
  KILN_CHECK(pass != nullptr);
  Stage stage;
  stage.passes.push_back(std::move(pass));
  stages_.push_back(std::move(stage));
  return *this;
}

Pipeline& Pipeline::add_fixed_point(std::string name, std::vector<std::unique_ptr<Pass>> passes,
                                    bool only_after_change) {
  KILN_CHECK(!passes.empty()) << "fixed-point group '" << name << "' has no passes";
  for (const auto& p : passes) KILN_CHECK(p != nullptr);
  Stage stage;
  stage.name = std::move(name);
  stage.passes = std::move(passes);
  stage.fixed_point = true;
  stage.only_after_change = only_after_change;
  stages_.push_back(std::move(stage));
  return *this;
}

Pipeline& Pipeline::add_checkpoint(std::string name, int64_t compact_from) {
  Stage stage;
  stage.name = std::move(name);
  stage.compact_from = compact_from;
  stages_.push_back(std::move(stage));
  return *this;
}

std::string Pipeline::to_string() const {
  std::string out;
  for (const Stage& stage : stages_) {
    if (stage.passes.empty()) continue;  // a checkpoint runs nothing
    if (!out.empty()) out += ", ";
    std::string names;
    for (const auto& p : stage.passes) names += (names.empty() ? "" : ", ") + std::string(p->name());
    out += stage.fixed_point ? "fix(" + names + ")" : names;
  }
  return out;
}

Status Pipeline::dump(const ir::Module& module, std::string_view label) {
  if (options_.dump_ir.empty()) return ok_status();
  std::error_code ec;
  std::filesystem::create_directories(options_.dump_ir, ec);
  if (ec) return io_error("cannot create the dump_ir directory {}: {}", options_.dump_ir, ec.message());
  std::filesystem::path path =
      std::filesystem::path(options_.dump_ir) / fmt::format("{:02d}_{}.ir", dump_index_++, label);
  std::ofstream out(path);
  out << ir::print_module(module);
  out.close();
  if (!out) return io_error("cannot write {}", path.string());
  return ok_status();
}

Result<bool> Pipeline::run_pass(Pass& pass, ir::Module& module) {
  auto start = std::chrono::steady_clock::now();
  int64_t before = module.instruction_count();
  Result<bool> result = pass.run(module);
  if (!result.ok()) {
    return Status(result.status().code(), fmt::format("pass '{}': {}", pass.name(), result.status().message()));
  }
  bool changed = *result;
  if (changed) {
    for (const auto& comp : module.computations()) comp->topo_sort();
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (options_.verbose || verbosity() >= 1) {
    std::string line = changed ? fmt::format("pass {}: changed ({} -> {} instructions, {:.2f} ms)", pass.name(), before,
                                             module.instruction_count(), ms)
                               : fmt::format("pass {}: no change ({:.2f} ms)", pass.name(), ms);
    KILN_LOG(INFO) << line;
  }
  std::string dumped;
  if (!options_.dump_ir.empty()) {
    dumped = fmt::format(" (module dumped to {}/{:02d}_{}.ir)", options_.dump_ir, dump_index_, pass.name());
    KILN_RETURN_IF_ERROR(dump(module, pass.name()));
  }
  if (options_.verify_each) {
    Status s = ops::verify(module);
    if (!s.ok()) {
      return internal_error("verification failed after pass '{}'{}: {}", pass.name(), dumped, s.message());
    }
  }
  return changed;
}

namespace {

// KILN_PASS_TIMING=1: one stderr line per pipeline run with each pass's total time (all its
// runs, fixed-point iterations included, with the re-sorting and checks around it), the
// slowest first: where compile time goes as the model grows.
struct PassTimes {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::pair<double, int>> ms_runs;
  void add(std::string_view pass, double ms) {
    auto [it, inserted] = ms_runs.try_emplace(std::string(pass), 0.0, 0);
    if (inserted) order.push_back(it->first);
    it->second.first += ms, ++it->second.second;
  }
  void print(int64_t instructions) const {
    std::vector<std::string> names = order;
    std::stable_sort(names.begin(), names.end(),
                     [&](const auto& a, const auto& b) { return ms_runs.at(a).first > ms_runs.at(b).first; });
    double total = 0;
    std::string parts;
    for (const std::string& n : names) {
      const auto& [ms, runs] = ms_runs.at(n);
      total += ms;
      parts += fmt::format("{}{} {:.1f} ms/{}", parts.empty() ? "" : ", ", n, ms, runs);
    }
    std::fprintf(stderr, "pass timing: %.1f ms over %lld instructions in: %s (ms/runs)\n", total,
                 static_cast<long long>(instructions), parts.c_str());
  }
};

bool pass_timing_on() {
  const char* env = std::getenv("KILN_PASS_TIMING");
  return env != nullptr && *env != '\0' && std::string_view(env) != "0";
}

}  // namespace

Result<bool> Pipeline::run(ir::Module& module, const CheckpointFn& at_checkpoint) {
  return run_stages(&module, nullptr, at_checkpoint);
}

Result<bool> Pipeline::run(std::unique_ptr<ir::Module>& module, const CheckpointFn& at_checkpoint) {
  KILN_CHECK(module != nullptr);
  return run_stages(module.get(), &module, at_checkpoint);
}

Result<bool> Pipeline::run_stages(ir::Module* module, std::unique_ptr<ir::Module>* owner,
                                  const CheckpointFn& at_checkpoint) {
  std::optional<PassTimes> times;
  if (pass_timing_on()) times.emplace();
  const int64_t instructions_in = module->instruction_count();
  auto run_timed = [&](Pass& pass) -> Result<bool> {
    auto start = std::chrono::steady_clock::now();
    Result<bool> r = run_pass(pass, *module);
    if (times) {
      times->add(pass.name(), std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return r;
  };
  dump_index_ = 0;
  if (options_.verify_each) {
    Status s = ops::verify(*module);
    if (!s.ok()) return invalid_argument("the pipeline's input does not verify: {}", s.message());
  }
  KILN_RETURN_IF_ERROR(dump(*module, "input"));
  bool changed = false;
  bool changed_since_compaction = false;
  bool previous_stage_changed = false;
  for (Stage& stage : stages_) {
    if (stage.passes.empty()) {
      if (stage.compact_from >= 0 && owner != nullptr && changed_since_compaction &&
          module->instruction_count() >= stage.compact_from) {
        // The passes before freed many instructions, and the survivors lie scattered among
        // the holes; a copy puts them in program order in fresh memory, which every later
        // pass walks faster (about 20% on the reference step's partitioned module).
        *owner = module->clone();
        module = owner->get();
        changed_since_compaction = false;
      }
      if (at_checkpoint) at_checkpoint(stage.name, *module);
      continue;
    }
    if (stage.only_after_change && !previous_stage_changed) continue;
    bool stage_changed = false;
    if (!stage.fixed_point) {
      KILN_ASSIGN_OR_RETURN(stage_changed, run_timed(*stage.passes[0]));
    } else {
      bool converged = false;
      std::vector<std::string> last_changed;
      for (int iteration = 1; iteration <= options_.max_fixed_point_iterations; ++iteration) {
        last_changed.clear();
        for (auto& pass : stage.passes) {
          KILN_ASSIGN_OR_RETURN(bool c, run_timed(*pass));
          if (c) last_changed.emplace_back(pass->name());
        }
        if (last_changed.empty()) {
          converged = true;
          if (options_.verbose || verbosity() >= 1) {
            KILN_LOG(INFO) << "fixed-point group '" << stage.name << "' reached its fixed point in iteration " << iteration;
          }
          break;
        }
        stage_changed = true;
      }
      if (!converged) {
        std::string message = fmt::format(
            "fixed-point group '{}' did not converge in {} iterations: the last one still changed the module in {}; "
            "its passes may be undoing each other's rewrites",
            stage.name, options_.max_fixed_point_iterations, fmt::join(last_changed, ", "));
        if (options_.fixed_point_cap_is_error) return internal_error("{}", message);
        KILN_LOG(WARNING) << message;
      }
    }
    previous_stage_changed = stage_changed;
    changed = changed || stage_changed;
    changed_since_compaction = changed_since_compaction || stage_changed;
  }
  if (times) times->print(instructions_in);
  return changed;
}

}  // namespace kiln::passes
