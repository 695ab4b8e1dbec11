#include "kiln/train/step/state_init.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/spmd/logical_rules.h"
#include "kiln/spmd/partitioner.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The init program as each device runs it: the global program on one device, else the
// program partitioned so that its outputs come out in the step's parameter shardings (every
// rng is lowered to the device's block, spmd/partitioner.cc).
Result<std::unique_ptr<ir::Module>> per_device_init(const ir::Module& global, const StepRunner& runner,
                                                    const StepProgram& program, const config::Config& config) {
  const StepRunner::Layout layout = runner.layout();
  if (layout.mesh.axes().empty()) return global.clone();
  spmd::PartitionOptions options;
  options.mesh = layout.mesh;
  KILN_ASSIGN_OR_RETURN(options.rules, spmd::LogicalRules::from_config(config));
  for (int64_t i = 0; i < program.num_params; ++i) options.seeds.outputs.push_back(runner.arg_sharding(program.param_arg(i)));
  KILN_ASSIGN_OR_RETURN(spmd::PartitionResult partition, spmd::partition(global, options));
  return std::move(partition.module);
}

// Each device makes its own block: after the compile pipeline's cleanups, an exchange or a
// slice of a whole value would mean a value was made whole first.
Status check_made_per_block(const backend::Executable& exe) {
  for (const ir::Instr* instr : exe.schedule()) {
    if (ops::collective_bytes(*instr).has_value()) {
      return internal_error("the partitioned init program exchanges values between devices: {}", instr->to_string());
    }
    if (instr->opcode() == ir::Opcode::kShardSlice) {
      return internal_error("the partitioned init program makes a value whole, then slices it: {}", instr->to_string());
    }
  }
  return ok_status();
}

}  // namespace

int64_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

Result<InitReport> init_state(StepRunner& runner, const StepProgram& program,
                              const std::vector<models::ParamSpec>& specs, const config::Config& config,
                              ir::DType mu_dtype) {
  InitReport report;
  const Clock::time_point start = Clock::now();
  std::unique_ptr<ir::Module> global = build_init_program(specs, config.get_int("init_weights_seed"));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> local, per_device_init(*global, runner, program, config));
  global.reset();

  // One executable per local device (backend=cpu: an executable runs on one thread at a time,
  // and the kernel cache makes the second compile cheap; backend=pjrt: one program for every
  // device, compile_for_devices). backend=interpreter, or if the CPU backend cannot compile it:
  // the interpreter backend, with the same values (ops/rng.h), and no worker threads (a run on
  // the interpreter stays fork-safe).
  const StepRunner::Layout layout = runner.layout();
  const int64_t devices = layout.local_devices;
  std::vector<std::unique_ptr<backend::Executable>> executables;
  const Clock::time_point compile_start = Clock::now();
  KILN_ASSIGN_OR_RETURN(const backend::Backend* backend, backend::backend_for(config));
  std::string fallback_reason;
  if (backend != &backend::interpreter_backend()) {
    backend::CompileOptions options;
    options.mesh = layout.mesh;
    KILN_ASSIGN_OR_RETURN(executables, backend::compile_for_devices(*backend, *local, options, layout.first_device,
                                                                    devices, &fallback_reason));
  }
  const bool compiled = !executables.empty() && fallback_reason.empty();
  if (executables.empty()) {
    // backend=interpreter keeps no per-run state: one executable serves every device.
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Executable> exe,
                          backend::interpreter_backend().compile(*local, backend::CompileOptions{}));
    executables.push_back(std::move(exe));
  }
  report.compile_seconds = seconds_since(compile_start);
  KILN_RETURN_IF_ERROR(check_made_per_block(*executables[0]));
  local.reset();

  std::mutex mu;
  int64_t state_bytes = 0;
  KILN_RETURN_IF_ERROR(runner.run_on_local_devices([&](int64_t d) -> Status {
    // The parameters stay where the init program made them (device memory on PJRT).
    backend::DeviceValues params;
    if (static_cast<int64_t>(executables.size()) == devices) {
      KILN_ASSIGN_OR_RETURN(params, executables[d]->run_on_device({}));
      executables[d].reset();  // its arena goes before the moments are made
    } else {
      KILN_ASSIGN_OR_RETURN(params, executables[0]->run_on_device({}));
    }
    if (static_cast<int64_t>(params.size()) != program.num_params) {
      return internal_error("the init program made {} tensors for {} parameters", params.size(), program.num_params);
    }
    int64_t bytes = 0;
    std::set<const void*> seen;
    for (int64_t i = 0; i < program.num_params; ++i) {
      const ir::Shape shape = params[i]->shape();
      const backend::Buffer* host = params[i]->host();
      if (host != nullptr && !seen.insert(host->data()).second) {
        // Equal initialisers (zeros of one shape) may be one host value: each parameter gets
        // its own storage, since the step updates parameters in place. (XLA gives every
        // output of a program a buffer of its own.)
        backend::Buffer own(shape);
        std::memcpy(own.data(), host->data(), static_cast<size_t>(shape.byte_size()));
        params[i] = std::make_unique<backend::HostValue>(std::move(own));
      }
      bytes += shape.byte_size() * 2 + shape.with_dtype(mu_dtype).byte_size();
      KILN_RETURN_IF_ERROR(runner.set_arg_value(program.param_arg(i), std::move(params[i]), d));
      KILN_RETURN_IF_ERROR(runner.set_arg_buffer(program.mu_arg(i), backend::Buffer::zeros(shape.with_dtype(mu_dtype)), d));
      KILN_RETURN_IF_ERROR(runner.set_arg_buffer(program.nu_arg(i), backend::Buffer::zeros(shape), d));
    }
    std::lock_guard<std::mutex> lock(mu);
    state_bytes += bytes;
    return ok_status();
  }));
  runner.set_arg(program.step_arg(), ir::Literal::scalar(ir::DType::kS32, 0));
  report.state_bytes = state_bytes;
  report.compiled = compiled;
  report.seconds = seconds_since(start);
  report.peak_rss_bytes = peak_resident_bytes();
  return report;
}

}  // namespace kiln::train
