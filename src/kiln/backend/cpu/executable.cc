// The CPU executable: the module after the optimization pipeline, one kernel per remaining
// instruction (generated loop kernels for fusions, oneDNN for f32 matmuls, native data
// movement and reductions, the reference evaluation for the rest), run in program order.
// Steps run in the memory-aware schedule; every value lives where buffer assignment put
// it (cpu/memory/memory_plan.h: one arena per executable, donated state updated in place).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fstream>
#include <unordered_map>

#include "kiln/backend/backend.h"
#include "kiln/backend/cpu/attention/attention_common.h"
#include "kiln/backend/cpu/codegen/codegen.h"
#include "kiln/backend/cpu/codegen/compile_cache.h"
#include "kiln/backend/cpu/collectives/collective_progress.h"
#include "kiln/backend/cpu/gemm/cpu_peak.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/backend/cpu/memory/memory_plan.h"
#include "kiln/base/check.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/sched/latency_hiding.h"

namespace kiln::backend {

namespace {

using ir::Instr;
using ir::Opcode;
using LoopFn = void (*)(const void* const*, void*, int64_t);

// What the CPU backend runs: generated loop kernels with several outputs, and collectives
// issued and waited for later unless the environment turns that off (memory_plan.h).
passes::BackendPolicy cpu_policy(const CompileOptions& options) {
  passes::BackendPolicy policy;
  policy.async_collectives = cpu::async_collectives_enabled(options);
  return policy;
}

struct Step {
  const Instr* instr;
  std::vector<int> inputs;  // value slots of the operands
  cpu::Kernel kernel;       // null for parameters, constants, tuples and get_tuple_element
};

class CpuExecutable : public Executable {
 public:
  Status build(const ir::Module& source, const CompileOptions& options);
  Result<std::vector<Buffer>> run(std::span<const Buffer> args) override;
  const CompileReport& report() const override { return report_; }
  std::vector<const ir::Instr*> schedule() const override {
    std::vector<const ir::Instr*> order;
    order.reserve(steps_.size());
    for (const Step& s : steps_) order.push_back(s.instr);
    return order;
  }
  ~CpuExecutable() override { print_profile(); }

 private:
  // KILN_PROFILE_KERNELS=1: time per (opcode, shape), printed when the executable dies.
  void print_profile() const;
  bool profile_ = std::getenv("KILN_PROFILE_KERNELS") != nullptr;
  std::map<std::string, std::pair<double, int64_t>> profile_times_;

  std::unique_ptr<ir::Module> module_;
  std::vector<Step> steps_;
  std::vector<std::vector<int>> frees_;  // per step: value slots whose last use it is
  cpu::MemoryPlan plan_;  // schedule, arena and where every value lives
  std::mutex run_mu_;     // one run at a time: the arena is the executable's
  int root_slot_ = -1;
  std::unordered_map<const Instr*, Buffer> constants_;
  cpu::KernelLibrary library_;
  CompileReport report_;
};

Status CpuExecutable::build(const ir::Module& source, const CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(module_, run_compile_pipeline(source, options, cpu_policy(options), report_));
  report_.instructions_after = module_->entry()->size();  // kernels and plumbing actually run
  for (const auto& instr : module_->entry()->instructions()) {
    if (!sched::is_async_start(*instr)) continue;
    const std::string kind(ir::opcode_name(instr->opcode()));
    ++report_.async_by_kind[kind];
    report_.async_bytes_by_kind[kind] += ops::collective_bytes(*instr).value_or(0);
  }

  // Generated kernels: one per distinct fusion body.
  const ir::Computation& entry = *module_->entry();
  std::vector<cpu::KernelSource> sources;
  std::unordered_map<const Instr*, std::string> kernel_of;
  std::unordered_map<std::string, bool> seen;
  for (const auto& instr : entry.instructions()) {
    if (instr->opcode() != Opcode::kFusion) continue;
    std::string name = cpu::kernel_name_for(*instr->called()[0]);
    kernel_of[instr.get()] = name;
    ++report_.fused_kernels;
    if (!seen.emplace(name, true).second) continue;
    sources.push_back({name, cpu::fusion_kernel_source(*instr->called()[0], name)});
  }
  report_.unique_kernels = static_cast<int64_t>(sources.size());
  std::string cache_dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  // The compiler processes run while this thread plans memory (the schedule and buffer
  // assignment do not depend on the kernels' code), so a first compile waits for the longer
  // of the two instead of their sum.
  auto kernel_build = std::async(std::launch::async, [&] { return cpu::build_kernels(sources, cache_dir, options.dump_dir); });

  auto falls_back = [](const Instr* instr) {
    if (ops::op_def(instr->opcode()).plumbing || instr->opcode() == Opcode::kFusion) return false;
    return cpu::find_native_kernel(*instr) == nullptr;
  };
  Status planned = plan_.build(entry, options, falls_back, report_);
  KILN_ASSIGN_OR_RETURN(library_, kernel_build.get());
  KILN_RETURN_IF_ERROR(planned);
  report_.kernels_compiled = library_.chunks_compiled;
  std::unordered_map<const Instr*, int> slot;
  for (const Instr* instr : plan_.schedule()) {
    Step step{instr, {}, nullptr};
    for (const Instr* o : instr->operands()) step.inputs.push_back(slot.at(o));
    switch (instr->opcode()) {
      case Opcode::kParameter:
      case Opcode::kTuple:
      case Opcode::kGetTupleElement:
        break;  // plumbing, handled by run()
      case Opcode::kConstant:
        constants_[instr] = Buffer::from_literal(instr->literal());
        break;
      case Opcode::kFusion: {
        auto fn = reinterpret_cast<LoopFn>(library_.symbols.at(kernel_of.at(instr)));
        // count: the elements of the (first) output; a multi-output fusion gets an array of
        // output pointers instead of one.
        const bool multi = instr->shape().is_tuple();
        int64_t count = multi ? instr->shape().element(0).num_elements() : instr->shape().num_elements();
        step.kernel = [fn, count, multi](std::span<const Value* const> in, Value& out) {
          std::vector<const void*> ptrs;
          ptrs.reserve(in.size());
          for (const Value* v : in) ptrs.push_back((*v)[0].data());
          if (!multi) return fn(ptrs.data(), out[0].data(), count);
          std::vector<void*> outs;
          outs.reserve(out.size());
          for (Buffer& b : out) outs.push_back(b.data());
          fn(ptrs.data(), outs.data(), count);
        };
        break;
      }
      default:
        if (const cpu::KernelFactory* native = cpu::find_native_kernel(*instr)) {
          step.kernel = (*native)(*instr);
          switch (ops::op_def(instr->opcode()).kernel_class) {
            case ops::KernelClass::kGemm: ++report_.gemms; break;
            case ops::KernelClass::kAttention: ++report_.attention_kernels; break;
            case ops::KernelClass::kGroupedMatmul: ++report_.grouped_matmuls; break;
            case ops::KernelClass::kOther: ++report_.library_kernels; break;
          }
        } else {
          step.kernel = cpu::fallback_kernel(*instr);
          ++report_.fallback_kernels;
          ++report_.fallback_by_op[std::string(ir::opcode_name(instr->opcode()))];
        }
    }
    slot[instr] = static_cast<int>(steps_.size());
    steps_.push_back(std::move(step));
  }
  // Free each value after its last use (the root lives to the end).
  frees_.assign(steps_.size(), {});
  std::vector<int> last_use(steps_.size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (int in : steps_[s].inputs) last_use[in] = static_cast<int>(s);
  }
  int root = root_slot_ = slot.at(entry.root());
  for (size_t v = 0; v < steps_.size(); ++v) {
    if (last_use[v] >= 0 && static_cast<int>(v) != root) frees_[last_use[v]].push_back(static_cast<int>(v));
  }
  if (!options.dump_dir.empty()) {
    std::ofstream(options.dump_dir + "/optimized.ir") << ir::print_module(*module_);
    std::ofstream(options.dump_dir + "/buffer_assignment.txt") << plan_.to_string();
  }
  report_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ok_status();
}

void CpuExecutable::print_profile() const {
  if (!profile_) return;
  std::vector<std::pair<double, std::string>> rows;
  double total = 0;
  for (const auto& [key, v] : profile_times_) {
    rows.push_back({v.first, fmt::format("{:8.3f} s {:7d} x  {}", v.first, v.second, key)});
    total += v.first;
  }
  std::sort(rows.rbegin(), rows.rend());
  // KILN_PROFILE_KERNELS=N prints the N largest rows (any other value: 25).
  const int asked = std::atoi(std::getenv("KILN_PROFILE_KERNELS"));
  const size_t limit = asked > 1 ? static_cast<size_t>(asked) : 25;
  std::fprintf(stderr, "kernel time by op and shape (total %.3f s):\n", total);
  for (size_t i = 0; i < rows.size() && i < limit; ++i) std::fprintf(stderr, "%s\n", rows[i].second.c_str());
}

Result<std::vector<Buffer>> CpuExecutable::run(std::span<const Buffer> args) {
  const ir::Computation& entry = *module_->entry();
  if (static_cast<int>(args.size()) != entry.num_params()) {
    return invalid_argument("the program takes {} arguments, got {}", entry.num_params(), args.size());
  }
  for (int i = 0; i < entry.num_params(); ++i) {
    if (args[i].shape() != entry.param(i)->shape()) {
      return invalid_argument("argument {} has shape {}, expected {}", i, args[i].shape().to_string(),
                              entry.param(i)->shape().to_string());
    }
  }
  std::lock_guard<std::mutex> lock(run_mu_);
  KILN_RETURN_IF_ERROR(plan_.begin_run(args));
  std::vector<Value> values(steps_.size());
  std::vector<const Value*> inputs;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    const Instr* instr = step.instr;
    Value& out = values[s];
    switch (instr->opcode()) {
      case Opcode::kParameter: {
        const Buffer& arg = args[instr->attrs().get_int("index")];
        if (arg.shape() != instr->shape()) {
          return invalid_argument("argument {} has shape {}, expected {}", instr->attrs().get_int("index"),
                                  arg.shape().to_string(), instr->shape().to_string());
        }
        out = {arg};
        break;
      }
      case Opcode::kConstant: out = {constants_.at(instr)}; break;
      case Opcode::kTuple:
        for (int in : step.inputs) out.insert(out.end(), values[in].begin(), values[in].end());
        break;
      case Opcode::kGetTupleElement: out = {values[step.inputs[0]].at(instr->attrs().get_int("index"))}; break;
      default: {
        inputs.clear();
        for (int in : step.inputs) inputs.push_back(&values[in]);
        const bool timed = profile_ || observer_ != nullptr;
        auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
        plan_.prepare(instr, args, out);
        step.kernel(inputs, out);
        plan_.settle(instr, args, out);
        if (observer_ != nullptr) {
          auto ns = [](std::chrono::steady_clock::time_point t) {
            return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
          };
          observer_->on_instruction(*instr, ns(t0), ns(std::chrono::steady_clock::now()));
        }
        if (profile_) {
          auto& slot = profile_times_[std::string(ir::opcode_name(instr->opcode())) + " " + instr->shape().to_string()];
          slot.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          slot.second += 1;
        }
        // Between kernels (outside their timed interval): async collectives in flight move on.
        cpu::progress_collectives();
      }
    }
    for (int dead : frees_[s]) values[dead].clear();
  }
  return std::move(values[root_slot_]);
}

class CpuBackend : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string description() const override { return "compiled CPU executable"; }
  bool falls_back_to_interpreter() const override { return true; }
  Result<DevicePeaks> measure_peaks(int threads_per_device) const override {
    return cpu::device_peaks(cpu::cached_cpu_peak(threads_per_device, default_cache_dir()));
  }
  AttentionTiles attention_tiles() const override {
    return {cpu::attention_detail::kBq, cpu::attention_detail::kBk};
  }
  Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const override {
    auto exe = std::make_unique<CpuExecutable>();
    KILN_RETURN_IF_ERROR(exe->build(module, options));
    return std::unique_ptr<Executable>(std::move(exe));
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

Result<std::unique_ptr<Executable>> compile_cpu(const ir::Module& module, const CompileOptions& options) {
  return cpu_backend().compile(module, options);
}

}  // namespace kiln::backend
