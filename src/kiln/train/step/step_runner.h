// Runs the step program step after step and holds the training state between steps, in
// the value type of its executor:
//   interpreter  the reference interpreter on ir::Literal (slow, exact: the oracle)
//   compiled     a backend's Executable on backend::Buffer (the CPU backend's fused generated
//                kernels and oneDNN GEMMs, or XLA's through PJRT), compiled once
// Arguments follow StepProgram's layout; after run() the state outputs (params, mu, nu,
// step) replace the state arguments, and the metric outputs can be read.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/literal.h"
#include "kiln/train/step/step_program.h"

namespace kiln::train {

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual void set_arg(int64_t index, const ir::Literal& value) = 0;
  virtual Status run() = 0;
  virtual double metric(StepMetric m) const = 0;  // from the last run()
  // Per MoE layer {max, mean, dropped} from the last run() (empty without MoE layers).
  const std::vector<double>& expert_load() const { return expert_load_; }
  virtual ir::Literal arg(int64_t index) const = 0;  // the current value of an argument (state)
  virtual const char* name() const = 0;              // "reference interpreter", "compiled CPU executable"
  // Per-instruction timing hook (profiles); only executors that run kernels call it.
  virtual void set_observer(backend::InstructionObserver* /*observer*/) {}
  // Seconds the last run() spent blocked on collectives (the most of any local device);
  // -1 for runners without collectives (one device), whose metrics leave it out.
  virtual double collective_wait_s() const { return -1; }

  // Checkpoint access to the state (docs/checkpoints.md), byte for byte: no float64 detour,
  // and per device, so each shard owner writes its own shards and a restore hands every
  // device only its shard. A runner on one device holds global values (an empty mesh).
  struct Layout {
    config::Mesh mesh;              // the mesh the state is laid out on (no axes: one device)
    int64_t first_device = 0;       // global id of this process's local device 0
    int64_t local_devices = 1;
    int64_t rank = 0, num_ranks = 1;  // MPI ranks (one process: 0 of 1)
  };
  virtual Layout layout() const { return {}; }
  virtual ir::Sharding arg_sharding(int64_t /*index*/) const { return {}; }
  // Local device `local`'s shard of argument `index`: row-major little-endian bytes in its dtype.
  virtual std::string arg_bytes(int64_t index, int64_t local = 0) const;
  virtual Status set_arg_bytes(int64_t index, const std::string& bytes, int64_t local = 0);
  // Local device `local`'s shard of argument `index` from a buffer of its local shape,
  // without a copy where the runner holds Buffers (the initial state is born this way).
  virtual Status set_arg_buffer(int64_t index, backend::Buffer value, int64_t local = 0);
  // The same from a value an executable of the runner's backend made on local device `local`
  // (the init program's parameters): kept where it is, no host copy where the runner holds
  // device values; else through the host.
  virtual Status set_arg_value(int64_t index, std::unique_ptr<backend::DeviceValue> value, int64_t local = 0);
  // Local device `local`'s shard of argument `index` as a Buffer, sharing the runner's storage
  // where it holds Buffers (no copy): the eval program reads the parameters this way. Hold
  // it only while the step is not running (the step updates the state in place).
  virtual backend::Buffer local_arg_buffer(int64_t index, int64_t local = 0) const;
  // The same where the state lives on the executable's device (no host copy): what another
  // executable of the same backend reads the parameters from. Null for runners that hold
  // literals (the interpreter's).
  virtual const backend::DeviceValue* local_arg_value(int64_t /*index*/, int64_t /*local*/ = 0) const {
    return nullptr;
  }
  // Local device `local`'s own value of argument `index` (its local shape: a batch's rows),
  // never a global value; one device: set_arg.
  virtual Status set_local_arg(int64_t index, const ir::Literal& value, int64_t local) {
    if (local != 0) return internal_error("{} has one device, not local device {}", name(), local);
    set_arg(index, value);
    return ok_status();
  }
  // Memory one local device's runtime holds outside the compiled plan (MPI reduction
  // buffers); 0 without one.
  virtual int64_t runtime_scratch_bytes() const { return 0; }
  // Runs fn(local) for every local device, each on its own thread with its device context
  // installed (a split rng or a collective reads it); one device: fn(0) on this thread.
  virtual Status run_on_local_devices(const std::function<Status(int64_t local)>& fn) { return fn(0); }
  // Collective over the MPI ranks (every rank calls it at the same point): returns rank 0's
  // `value` on every rank, so it is also a barrier. One process: `value`.
  virtual int64_t broadcast_from_rank0(int64_t value) const { return value; }
  // Collective over the MPI ranks, like broadcast_from_rank0: the largest `value` of any rank,
  // on every rank (a stop request one rank saw, made every rank's). One process: `value`.
  virtual int64_t max_over_ranks(int64_t value) const { return value; }

 protected:
  std::vector<double> expert_load_;
};

std::unique_ptr<StepRunner> make_interpreter_runner(const StepProgram& program);
// Compiles the program with `backend` (options: dump_dir, verify_each; the CPU backend's kernel
// cache makes a second compile of the same program cheap).
// With a fallback_reason, a backend that falls back runs a program it cannot compile on the
// reference interpreter and says why there (backend::compile_for_devices).
Result<std::unique_ptr<StepRunner>> make_compiled_runner(const StepProgram& program, const backend::Backend& backend,
                                                         const backend::CompileOptions& options,
                                                         backend::CompileReport* report,
                                                         std::string* fallback_reason = nullptr);
// One such runner per local device of options.mesh (backend::compile_for_devices): the
// per-device programs of a sharded step.
Result<std::vector<std::unique_ptr<StepRunner>>> make_compiled_runners(const StepProgram& program,
                                                                       const backend::Backend& backend,
                                                                       const backend::CompileOptions& options,
                                                                       int64_t first_device, int64_t local_devices,
                                                                       backend::CompileReport* report,
                                                                       std::string* fallback_reason = nullptr);

}  // namespace kiln::train
