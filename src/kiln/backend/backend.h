// The backend interface: compile a module once into an Executable, then run it step after
// step. Free of CPU assumptions so a CUDA backend can implement it too.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/backend/buffer.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/ir/instr.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/passes/compile_pipeline.h"

namespace kiln::backend {

// Where backends keep what they build and measure (the CPU's kernels and peaks, kiln plan's
// calibrated targets): $KILN_CACHE_DIR, else $HOME/.cache/kiln, else ./.cache/kiln.
std::string default_cache_dir();

struct CompileOptions {
  std::string dump_dir;        // "" = none: else the optimized IR and kernel sources go here
  std::string cache_dir;       // "" = $KILN_CACHE_DIR or ~/.cache/kiln
  bool verify_each = false;    // verify the module after every pass
  bool fuse = true;            // turn off to run every op as its own kernel (debugging)
  // (output index, argument index) pairs: the caller donates the argument, so the output may
  // be written into its storage (the train step's state is updated in place). The donated
  // argument's contents are undefined after run().
  std::vector<std::pair<int64_t, int64_t>> donated;
  std::string remat_policy = "none";  // MaxText's remat_policy (passes/remat.h); "none": save everything
  // grad_reduce_dtype: the gradients' cross-device reductions in this dtype ("float32",
  // "bfloat16"; "": the dtype the products make them in; passes/grad_reduce_dtype.h).
  std::string grad_reduce_dtype;
  // Collectives as start/done pairs moved apart by the latency-hiding scheduler, with at most
  // overlap_limit_bytes held by pairs in flight (< 0: sched/latency_hiding.h's default).
  // KILN_ASYNC_COLLECTIVES=0 and KILN_OVERLAP_LIMIT_MB override them.
  bool async_collectives = true;
  int64_t overlap_limit_bytes = -1;
  // The memory one device has for the step (0: unknown). With the default limit, a backend
  // that plans its memory then lets the overlap use up to 1/8 of it where the plan still fits
  // (memory/memory_stages.h). The sharded trainer sets it from what the process may use
  // when all the mesh's devices are in one process (every rank must compile the same plan);
  // `kiln compile` and `kiln plan` leave it unknown, so their plans do not depend on the
  // machine that makes them.
  int64_t device_memory_bytes = 0;
  // The mesh the per-device program was partitioned for (default: one device). The CPU
  // backend learns each device's place at run time from the runtime; a PJRT backend compiles
  // one program for every replica, so its collectives' replica groups come from here.
  config::Mesh mesh;

  // What a run's config says (dump_ir, verify_each, remat_policy, grad_reduce_dtype): the one place these keys
  // are read for compiling. Callers add what is theirs (the step's donations, ...).
  static CompileOptions from_config(const config::Config& config);
  // What of these the compile pipeline needs (passes/compile_pipeline.h).
  passes::CompileChoices choices() const { return {remat_policy, fuse, grad_reduce_dtype}; }
};

// What XLA made of an ahead-of-time compile for hardware that is not here (backend=pjrt
// compile_topology=...): its per-device memory and its census of the optimized program.
struct XlaCompileReport {
  std::string topology;       // "h100-4"
  std::string device;         // the hardware file's description
  std::string platform;       // "cuda", "tpu"
  std::string plugin_version;  // PJRT C API version of the plugin that compiled it
  double capacity_bytes = 0;   // one device's memory
  double peak_bf16_tflops = 0;
  // XLA's memory statistics per device (PJRT_Executable_GetCompiledMemoryStats).
  int64_t argument_bytes = 0, output_bytes = 0, alias_bytes = 0, temp_bytes = 0, generated_code_bytes = 0;
  int64_t peak_bytes = 0;  // XLA's own peak, or arguments + outputs - aliased + temporaries
  double compile_seconds = 0;  // XLA's part
  // XLA's message when it refused the program for running out of device memory at compile
  // time (libtpu does): temp_bytes is then what it said the temporaries need, the peak
  // arguments plus that, and the census is empty.
  std::string refused;
  // The optimized program (pjrt/hlo_census.h): kernels and collectives as XLA runs them.
  int64_t instructions = 0, fusions = 0, gemms = 0, grouped_matmuls = 0, attention = 0, while_loops = 0;
  std::map<std::string, int64_t> fusion_kinds, collectives, async_collectives, custom_calls;
};

// What compilation made of the module, for `kiln compile` and tests.
struct CompileReport {
  int64_t instructions_before = 0;
  int64_t instructions_after = 0;
  // The collectives after the pipeline's cleanups, before combining and async pairs: on a
  // partitioned module, the ones the partitioner's layouts require.
  std::map<std::string, ops::CollectiveStats> collectives;
  int64_t fused_kernels = 0;     // generated loop kernels (after deduplication: unique_kernels)
  int64_t unique_kernels = 0;
  int64_t gemms = 0;
  int64_t attention_kernels = 0;  // fused attention forward and backward
  int64_t grouped_matmuls = 0;    // grouped matmuls and their weight-gradient kernels (MoE)
  int64_t library_kernels = 0;   // hand-written native kernels (gather, sort, ...)
  int64_t fallback_kernels = 0;  // ops run through the reference evaluation (slow path)
  std::map<std::string, int64_t> fallback_by_op;  // which ops those are
  int64_t kernels_compiled = 0;  // kernels the system compiler built this time (0 when cached)
  double compile_seconds = 0;

  // Memory the executable needs, from its buffer assignment (memory/). One run needs at
  // most planned_peak_bytes = argument_bytes + constant_bytes + arena_bytes + output_bytes
  // + kernel_scratch_bytes.
  int64_t argument_bytes = 0;      // all inputs (parameters, optimizer state, batch)
  int64_t constant_bytes = 0;      // constants materialized once
  int64_t peak_value_bytes = 0;    // peak of intermediate values live at once (schedule peak + outputs)
  int64_t arena_bytes = 0;         // the one allocation every intermediate value lives in
  int64_t output_bytes = 0;        // outputs with storage of their own (not donated in place)
  int64_t kernel_scratch_bytes = 0;  // the most scratch one kernel allocates for itself
  int64_t planned_peak_bytes = 0;
  int64_t in_place_reuses = 0;     // fusion outputs written over a dying operand
  int64_t donated_in_place = 0;    // donated outputs written into their argument's storage
  std::string schedule;            // the order chosen: "list" (memory-aware) or "program_order"
  int64_t async_collectives = 0;   // start/done pairs, and how many have compute between them
  int64_t overlapped_collectives = 0;
  int64_t overlap_limit_bytes = 0;  // the latency-hiding scheduler's limit on bytes in flight
  int overlap_limit_fraction = 0;   // 8: the limit is 1/8 of the device's memory; 0: the default or set
  std::map<std::string, int64_t> async_by_kind;  // "all_gather_start" -> pairs of that kind
  std::map<std::string, int64_t> async_bytes_by_kind;  // bytes per step: gathered, or summed
  // Arena bytes the forward pass writes and the backward pass reads (the backward pass
  // starts at the first instruction named "*.grad" in program order): what the forward
  // pass keeps for the backward pass. 0 when the program has no gradients.
  int64_t saved_activation_bytes = 0;
  std::optional<XlaCompileReport> xla;  // set by an ahead-of-time compile (compile_topology)
};

// Sees every instruction an executable runs, with its wall-clock interval (steady_clock
// nanoseconds), on the thread that ran it: the generic hook that profiles and traces build
// on, so kernels, GEMMs and collective start/done pairs all show up without backend code
// knowing about traces. Called from the running thread; must be cheap.
class InstructionObserver {
 public:
  virtual ~InstructionObserver() = default;
  virtual void on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) = 0;
};

// A value where an executable runs: device memory on an accelerator (PJRT), a host Buffer on
// the CPU backend and the interpreter (no copy either way). The training state lives in these
// across steps; host copies are made only for metrics, checkpoints, eval output and tests.
class DeviceValue {
 public:
  virtual ~DeviceValue() = default;
  virtual const ir::Shape& shape() const = 0;
  // A host copy (a host-resident value shares its storage instead: no copy).
  virtual Result<Buffer> to_host() const = 0;
  // The Buffer itself when the value lives on the host, else null.
  virtual const Buffer* host() const { return nullptr; }
};
using DeviceValues = std::vector<std::unique_ptr<DeviceValue>>;

// A host Buffer seen as a DeviceValue (the CPU backend and the interpreter run on the host).
class HostValue final : public DeviceValue {
 public:
  explicit HostValue(Buffer buffer) : buffer_(std::move(buffer)) {}
  const ir::Shape& shape() const override { return buffer_.shape(); }
  Result<Buffer> to_host() const override { return buffer_; }
  const Buffer* host() const override { return &buffer_; }

 private:
  Buffer buffer_;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Observer for the instructions of later run() calls (nullptr: none). Not owned.
  void set_observer(InstructionObserver* observer) { observer_ = observer; }
  // Runs the entry computation; a tuple root gives one Buffer per element.
  virtual Result<std::vector<Buffer>> run(std::span<const Buffer> args) = 0;
  virtual const CompileReport& report() const = 0;
  // Every instruction of the optimized entry computation in the order run() executes them
  // (parameters, plumbing and async start/done pairs included), owned by the executable:
  // what a cost model (kiln plan) walks to predict the step.
  virtual std::vector<const ir::Instr*> schedule() const = 0;

  // Device-resident execution. `to_device` places a host value where replica `replica` of
  // this executable runs; `run_on_device` runs on such values and leaves the results there.
  // A donated argument (CompileOptions::donated) is consumed: the caller replaces it with the
  // output it became. The defaults serve host backends: no copies, run() underneath.
  virtual Result<std::unique_ptr<DeviceValue>> to_device(Buffer host, int replica = 0) const;
  virtual Result<DeviceValues> run_on_device(std::span<DeviceValue* const> args);

  // How many devices one execution covers: 1, or every device of the mesh this process runs
  // (all of them in one process; a rank's own across MPI ranks) for a backend that runs one
  // program on all of them (XLA's replica mode). Such an executable runs them all at once:
  // args[r] are replica r's arguments.
  virtual int num_replicas() const { return 1; }
  virtual Result<std::vector<DeviceValues>> run_replicas_on_device(const std::vector<std::vector<DeviceValue*>>& args);

 protected:
  InstructionObserver* observer_ = nullptr;
};

// Executable::run for an executable whose values live on a device: the arguments placed there
// (exe.to_device), run there (exe.run_on_device), the results copied back.
Result<std::vector<Buffer>> run_through_device(Executable& exe, std::span<const Buffer> args);

// What every backend does first: a copy of `source` through the compile pipeline with the
// backend's `policy` (dumps and verification from `options`), filling `report`'s
// instructions_before and the collectives at the pipeline's `cleaned` checkpoint.
Result<std::unique_ptr<ir::Module>> run_compile_pipeline(const ir::Module& source, const CompileOptions& options,
                                                         const passes::BackendPolicy& policy, CompileReport& report);

// One device's arithmetic peaks: the denominator of MFU and of the attribution table's
// "% of peak", and kiln plan's roofline.
struct DevicePeaks {
  double f32_tflops = 0;
  double bf16_tflops = 0;   // the f32 peak where the device has no faster bf16 path
  double memory_gbs = 0;    // memory bandwidth (the memory-bound kernels' roofline); 0: not measured
  std::string device;       // what was measured: "AMD EPYC 9R14 96-Core Processor"
  std::string source;       // short: "measured on 2 threads of AMD EPYC ..."
  std::string description;  // the log's: "0.534 TFLOP/s f32, 1.02 TFLOP/s bf16 (measured in 0.31 s on ...)"
};

// The tiles a backend's attention kernels walk the score matrix in, query rows by key
// columns: what a cost model counts visited (query, key) pairs on (kiln plan). 0: untiled.
struct AttentionTiles {
  int64_t queries = 0;
  int64_t keys = 0;
};

// A backend turns a module into an executable: it runs the compile pipeline
// (passes/compile_pipeline.h) with the policy of what it can run, then lowers what is left.
// Nothing here assumes a CPU: a CUDA backend implements the same two calls.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // the `backend` key's value: "cpu", "pjrt", "interpreter"
  // What the log says runs the step: "compiled CPU executable", "reference interpreter", ...
  virtual std::string description() const = 0;
  virtual Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const = 0;
  // Whether a program this backend cannot compile may run on the reference interpreter
  // instead, with a note (the CPU backend: every op has a reference evaluation on the same
  // host). A device backend says no: a program it cannot run is an error named before work.
  virtual bool falls_back_to_interpreter() const { return false; }
  // Whether one compiled program runs every device of the mesh at once (XLA's replica mode)
  // instead of one executable per device.
  virtual bool one_program_for_all_devices() const { return false; }
  // The peaks of one device running `threads_per_device` threads, measured or cached (the CPU
  // backend: cpu/gemm/cpu_peak.h, cached per CPU model and thread count). Unimplemented where
  // the backend cannot measure its devices; peaks_for() then stands in.
  virtual Result<DevicePeaks> measure_peaks(int threads_per_device) const {
    (void)threads_per_device;
    return unimplemented("backend={} does not measure its devices' peaks", name());
  }
  // Its attention kernels' tiles, for kiln plan's attention cost ({0, 0}: none it states).
  virtual AttentionTiles attention_tiles() const { return {}; }
};

// One executable per local device of `options.mesh` (devices first_device ..
// first_device + local_devices - 1): separate compiles where each device runs its own copy
// (backend=cpu: an executable runs on one thread at a time), or one compile for a backend
// that runs every device as one program, seen through replica_views. Given a fallback_reason,
// where the backend cannot compile the module and falls back (falls_back_to_interpreter), the
// reference interpreter's executables instead, with the failure in *fallback_reason (else left
// empty): the one place a run falls back to the interpreter. Defined with the name table
// (backend_table.cc, library kiln_backends).
Result<std::vector<std::unique_ptr<Executable>>> compile_for_devices(const Backend& backend, const ir::Module& module,
                                                                     const CompileOptions& options,
                                                                     int64_t first_device, int64_t local_devices,
                                                                     std::string* fallback_reason = nullptr);

// One executable per replica of `exe` (which runs num_replicas() devices at once): views whose
// run()/run_on_device() from each device's thread meet and go as one execution.
std::vector<std::unique_ptr<Executable>> replica_views(std::unique_ptr<Executable> exe);

// This machine's CPU: generated loop kernels, library GEMMs, hand-written attention and
// grouped matmuls (backend/cpu/).
const Backend& cpu_backend();
// The reference interpreter behind the same interface (backend/interpreter/): the pipeline
// without loop fusion or async collectives, then every instruction by its reference
// evaluation. Slow and exact; it proves the interface carries no CPU assumption.
const Backend& interpreter_backend();
// By name: "cpu", "interpreter", or "pjrt" (XLA's CPU plugin, one device); an unknown name is
// an error listing them. Defined with the name table (backend_table.cc, library kiln_backends).
Result<const Backend*> backend_named(std::string_view name);
// The backend a run's config names: `backend`, and for pjrt the plugin (`pjrt_plugin`) with
// one device per local device of the mesh; made once per process and kept.
Result<const Backend*> backend_for(const config::Config& config);
// The peaks a run on `backend` divides by (MFU): backend.measure_peaks, or where that is
// unimplemented (the interpreter, PJRT) this host CPU's, as the CPU backend measures them.
// Defined with the name table (kiln_backends).
Result<DevicePeaks> peaks_for(const Backend& backend, int threads_per_device);

// cpu_backend().compile(module, options).
Result<std::unique_ptr<Executable>> compile_cpu(const ir::Module& module, const CompileOptions& options);

}  // namespace kiln::backend
