#include "kiln/backend/pjrt/pjrt_backend.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "kiln/backend/pjrt/aot_compile.h"
#include "kiln/backend/pjrt/hlo_census.h"
#include "kiln/backend/pjrt/kv_store.h"
#include "kiln/backend/pjrt/pjrt_client.h"
#include "kiln/backend/pjrt/plugin_path.h"
#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"

namespace kiln::backend::pjrt {
namespace {

// XLA makes its own fusions and overlaps its own collectives: Kiln's loop fusion and async
// start/done pairs would only hide the program's structure from it.
passes::BackendPolicy xla_policy() {
  passes::BackendPolicy policy;
  policy.loop_fusion = false;
  policy.multi_output_fusion = false;
  policy.async_collectives = false;
  return policy;
}

// A value in a PJRT device's memory.
class PjrtValue final : public backend::DeviceValue {
 public:
  explicit PjrtValue(DeviceBuffer buffer) : buffer_(std::move(buffer)) {}
  const ir::Shape& shape() const override { return buffer_.shape(); }
  Result<Buffer> to_host() const override {
    if (!buffer_.valid()) return failed_precondition("a device buffer donated to an execution was read");
    return buffer_.to_host();
  }
  DeviceBuffer& buffer() { return buffer_; }

 private:
  DeviceBuffer buffer_;
};

class PjrtExecutable : public Executable {
 public:
  // Runs on `client`'s devices.
  explicit PjrtExecutable(const Client& client) : client_(&client), platform_(client.platform_name()) {}
  // Compiled ahead of time by `plugin` for `target`, whose hardware is not here: report only.
  PjrtExecutable(const Plugin& plugin, const AotTarget& target)
      : plugin_(&plugin), aot_(&target), platform_(target.plugin) {}

  Status build(const ir::Module& source, const CompileOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(module_, run_compile_pipeline(source, options, xla_policy(), report_));
    const ir::Computation& entry = *module_->entry();
    report_.instructions_after = entry.size();
    for (const auto& instr : entry.instructions()) {
      if (instr->opcode() == ir::Opcode::kParameter) report_.argument_bytes += instr->shape().byte_size();
    }
    report_.output_bytes = entry.root()->shape().byte_size();
    report_.schedule = "xla";
    replicas_ = static_cast<int>(options.mesh.num_devices());
    if (client_ != nullptr && replicas_ > client_->num_global_devices()) {
      return invalid_argument("backend=pjrt: the program runs on {} devices ({}), the {} plugin's client has {}",
                              replicas_, options.mesh.to_string(), platform_, client_->num_global_devices());
    }
    EmitOptions emit;
    emit.mesh = options.mesh;
    // Donated state is updated in place on GPUs and TPUs. Not on XLA's CPU plugin: there a
    // donated argument that an earlier execution produced (the step's state from the step
    // before) gave a wrong next step (gpt-oss-small, one batch reused: step 1's loss 8.183
    // against 8.168 with the same state uploaded afresh, or without donation), so the CPU
    // plugin's step writes its new state to fresh buffers and the old ones are freed after it.
    if (platform_ != "cpu") emit.donated = options.donated;
    // XLA:CPU has no ragged_dot (spec/pjrt.md) and no bf16 x bf16 -> f32 dot.
    emit.ragged_dot = platform_ != "cpu";
    emit.tiled_grouped_matmul = platform_ == "cuda";  // XLA:GPU's ragged_dot is E times the work
    emit.mixed_precision_dot = platform_ != "cpu";
    KILN_ASSIGN_OR_RETURN(const std::string stablehlo, emit_stablehlo(*module_, emit));
    for (const auto& [output, argument] : emit.donated) donated_args_.insert(static_cast<int>(argument));
    if (!options.dump_dir.empty()) {
      std::ofstream(options.dump_dir + "/optimized.ir") << ir::print_module(*module_);
      std::ofstream(options.dump_dir + "/program.stablehlo.mlir") << stablehlo;
    }
    if (aot_ != nullptr) return compile_ahead_of_time(stablehlo, start, options.dump_dir);
    KILN_ASSIGN_OR_RETURN(loaded_, client_->compile(stablehlo, replicas_));
    // Across processes the program is compiled for every replica of the job; this process runs
    // (and is given arguments for) its own devices' replicas only.
    replicas_ = loaded_->num_replicas();
    if (Result<CompiledMemoryStats> stats = loaded_->compiled_memory_stats(); stats.ok()) {
      // XLA's own plan of device memory replaces Kiln's (it assigned the buffers).
      report_.arena_bytes = stats->temp_bytes;
      report_.peak_value_bytes = stats->temp_bytes;
      report_.planned_peak_bytes = stats->peak_bytes > 0 ? stats->peak_bytes
                                                         : stats->argument_bytes + stats->output_bytes -
                                                               stats->alias_bytes + stats->temp_bytes;
    }
    report_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ok_status();
  }

  Result<std::unique_ptr<backend::DeviceValue>> to_device(Buffer host, int replica = 0) const override {
    KILN_RETURN_IF_ERROR(runs_here());
    if (replica < 0 || replica >= replicas_) return internal_error("replica {} of {}", replica, replicas_);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, client_->to_device(host, replica));
    return std::unique_ptr<backend::DeviceValue>(std::make_unique<PjrtValue>(std::move(b)));
  }

  Result<std::vector<backend::DeviceValues>> run_replicas_on_device(
      const std::vector<std::vector<backend::DeviceValue*>>& args) override {
    KILN_RETURN_IF_ERROR(runs_here());
    if (static_cast<int>(args.size()) != replicas_) {
      return invalid_argument("the program runs on {} replicas, got arguments for {}", replicas_, args.size());
    }
    const size_t num_params = static_cast<size_t>(module_->entry()->num_params());
    std::vector<std::vector<DeviceBuffer*>> pointers(replicas_);
    for (int r = 0; r < replicas_; ++r) {
      if (args[r].size() != num_params) {
        return invalid_argument("the program takes {} arguments, got {}", num_params, args[r].size());
      }
      for (backend::DeviceValue* a : args[r]) {
        auto* value = dynamic_cast<PjrtValue*>(a);
        if (value == nullptr) return internal_error("argument of replica {} is not a PJRT device buffer", r);
        pointers[r].push_back(&value->buffer());
      }
    }
    // Donated arguments are consumed (their DeviceBuffer is reset): the caller replaces them
    // with the outputs they became.
    KILN_ASSIGN_OR_RETURN(std::vector<std::vector<DeviceBuffer>> outputs, loaded_->execute(pointers, donated_args_));
    std::vector<backend::DeviceValues> values(replicas_);
    for (int r = 0; r < replicas_; ++r) {
      for (DeviceBuffer& b : outputs[r]) values[r].push_back(std::make_unique<PjrtValue>(std::move(b)));
    }
    return values;
  }

  Result<backend::DeviceValues> run_on_device(std::span<backend::DeviceValue* const> args) override {
    if (replicas_ != 1) {
      return failed_precondition("this program runs on {} replicas: run_replicas_on_device gives each its arguments",
                                 replicas_);
    }
    KILN_ASSIGN_OR_RETURN(auto values, run_replicas_on_device({std::vector<backend::DeviceValue*>(args.begin(), args.end())}));
    return std::move(values[0]);
  }

  Result<std::vector<Buffer>> run(std::span<const Buffer> args) override {
    KILN_RETURN_IF_ERROR(runs_here());
    if (replicas_ != 1) {
      return failed_precondition("this program runs on {} replicas: run_replicas_on_device gives each its arguments",
                                 replicas_);
    }
    return backend::run_through_device(*this, args);
  }

  const CompileReport& report() const override { return report_; }
  std::vector<const ir::Instr*> schedule() const override {
    std::vector<const ir::Instr*> order;
    for (const auto& instr : module_->entry()->instructions()) order.push_back(instr.get());
    return order;
  }
  int num_replicas() const override { return replicas_; }

 private:
  Status runs_here() const {
    if (aot_ == nullptr) return ok_status();
    return failed_precondition("compiled ahead of time for compile_topology={} ({}), which is not here: nothing runs; "
                               "leave compile_topology unset to run on this machine's devices",
                               aot_->topology.name, aot_->description);
  }

  Status compile_ahead_of_time(const std::string& stablehlo, std::chrono::steady_clock::time_point start,
                               const std::string& dump_dir) {
    Result<AotExecutable> compiled = compile_for_topology(*plugin_, aot_->spec, stablehlo, replicas_);
    if (!compiled.ok()) {
      std::optional<double> needs_gib = compile_time_oom_gib(compiled.status().message());
      if (!needs_gib) return compiled.status();
      return report_refusal(compiled.status().message(), *needs_gib, start);
    }
    AotExecutable& exe = *compiled;
    // XLA's optimized program as it returned it (a serialized xla.HloModuleProto), for its tools.
    if (!dump_dir.empty()) std::ofstream(dump_dir + "/xla_optimized.hlo.pb", std::ios::binary) << exe.optimized_hlo;
    KILN_ASSIGN_OR_RETURN(HloCensus census, hlo_census(exe.optimized_hlo));
    XlaCompileReport x = target_report(exe.platform);
    const CompiledMemoryStats& m = exe.memory;
    x.argument_bytes = m.argument_bytes;
    x.output_bytes = m.output_bytes;
    x.alias_bytes = m.alias_bytes;
    x.temp_bytes = m.temp_bytes;
    x.generated_code_bytes = m.generated_code_bytes;
    x.peak_bytes = m.peak_bytes > 0 ? m.peak_bytes : m.argument_bytes + m.output_bytes - m.alias_bytes + m.temp_bytes;
    x.compile_seconds = exe.compile_seconds;
    x.instructions = census.instructions;
    x.fusions = census.fusions;
    x.gemms = census.gemms;
    x.grouped_matmuls = census.grouped_matmuls;
    x.attention = census.attention;
    x.while_loops = census.while_loops;
    x.fusion_kinds = census.fusion_kinds;
    x.collectives = census.collectives;
    x.async_collectives = census.async_collectives;
    x.custom_calls = census.custom_calls;
    report_.arena_bytes = m.temp_bytes;
    report_.peak_value_bytes = m.temp_bytes;
    report_.planned_peak_bytes = x.peak_bytes;
    report_.xla = std::move(x);
    report_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ok_status();
  }

  // What an ahead-of-time report says of its target, whatever XLA made.
  XlaCompileReport target_report(const std::string& platform) const {
    XlaCompileReport x;
    x.topology = aot_->topology.name;
    x.device = aot_->description;
    x.platform = platform;
    x.plugin_version = plugin_->version();
    x.capacity_bytes = aot_->capacity_bytes;
    x.peak_bf16_tflops = aot_->peak_bf16_tflops;
    return x;
  }

  // XLA ran out of device memory compiling for the target: a verdict on the config, reported
  // as XLA's figures (the arguments as Kiln's program has them, the temporaries XLA needed).
  Status report_refusal(const std::string& message, double temporaries_gib,
                        std::chrono::steady_clock::time_point start) {
    XlaCompileReport x = target_report(aot_->plugin);
    x.refused = message;
    x.argument_bytes = report_.argument_bytes;
    x.temp_bytes = static_cast<int64_t>(temporaries_gib * static_cast<double>(int64_t{1} << 30));
    x.peak_bytes = x.argument_bytes + x.temp_bytes;
    report_.xla = std::move(x);
    report_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ok_status();
  }

  const Client* client_ = nullptr;  // null when compiled ahead of time
  const Plugin* plugin_ = nullptr;  // set when compiled ahead of time
  const AotTarget* aot_ = nullptr;
  std::string platform_;            // "cpu", "cuda", "tpu"
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<LoadedExecutable> loaded_;
  std::set<int> donated_args_;
  int replicas_ = 1;
  CompileReport report_;
};

class PjrtBackend : public Backend {
 public:
  PjrtBackend(std::string plugin_name, std::unique_ptr<Client> client)
      : plugin_name_(std::move(plugin_name)), client_(std::move(client)) {}
  std::string_view name() const override { return "pjrt"; }
  std::string description() const override {
    return fmt::format("XLA executable (PJRT {} plugin {}, {} device{})", plugin_name_, client_->plugin().version(),
                       client_->num_devices(), client_->num_devices() == 1 ? "" : "s");
  }
  Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const override {
    auto exe = std::make_unique<PjrtExecutable>(*client_);
    KILN_RETURN_IF_ERROR(exe->build(module, options));
    return std::unique_ptr<Executable>(std::move(exe));
  }
  bool one_program_for_all_devices() const override { return true; }

 private:
  std::string plugin_name_;
  std::unique_ptr<Client> client_;
};

// A backend for hardware that is not here: compiles ahead of time for `target` and reports.
class PjrtAotBackend : public Backend {
 public:
  PjrtAotBackend(const Plugin& plugin, AotTarget target) : plugin_(plugin), target_(std::move(target)) {}
  std::string_view name() const override { return "pjrt"; }
  std::string description() const override {
    return fmt::format("XLA ahead-of-time compile for {} (PJRT {} plugin {}, no device here)", target_.topology.name,
                       target_.plugin, plugin_.version());
  }
  Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const override {
    auto exe = std::make_unique<PjrtExecutable>(plugin_, target_);
    KILN_RETURN_IF_ERROR(exe->build(module, options));
    return std::unique_ptr<Executable>(std::move(exe));
  }
  bool one_program_for_all_devices() const override { return true; }

 private:
  const Plugin& plugin_;
  AotTarget target_;
};

}  // namespace

Result<const Backend*> pjrt_aot_backend(const AotTarget& target, const std::string& plugin_override) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<PjrtAotBackend>> made;
  std::lock_guard<std::mutex> lock(mu);
  // A plugin named by path (a user's own libtpu) replaces the one the topology implies.
  const bool named = plugin_override.empty() || plugin_override == "cpu" || plugin_override == target.plugin;
  if (!named && plugin_override.find('/') == std::string::npos && !plugin_override.ends_with(".so")) {
    return invalid_argument("pjrt_plugin={}: compile_topology={} compiles with the {} plugin; leave pjrt_plugin unset "
                            "or give a path to one",
                            plugin_override, target.topology.name, target.plugin);
  }
  KILN_ASSIGN_OR_RETURN(std::string path, resolve_plugin(named ? target.plugin : plugin_override));
  auto key = std::make_pair(path, target.topology.name + "/" + std::to_string(target.topology.num_slices));
  if (auto it = made.find(key); it != made.end()) return it->second.get();
  KILN_ASSIGN_OR_RETURN(const Plugin* plugin, load_for_topology(path, target.spec));
  auto backend = std::make_unique<PjrtAotBackend>(*plugin, target);
  const Backend* result = backend.get();
  made.emplace(key, std::move(backend));
  return result;
}

Result<const Backend*> pjrt_backend(const PjrtBackendOptions& options) {
  static std::mutex mu;
  // Where clients meet the job's other processes (kv_store.h); made before the backends, so
  // they outlive the clients that call them.
  static std::unique_ptr<MpiKvStore> job_store;
  static LocalKvStore host_store;
  static std::map<std::pair<std::string, int>, std::unique_ptr<PjrtBackend>> made;
  std::lock_guard<std::mutex> lock(mu);
  // By the plugin's file, looked up each time: the same name may mean another file once
  // $KILN_VENV changes.
  KILN_ASSIGN_OR_RETURN(std::string path, resolve_plugin(options.plugin));
  auto key = std::make_pair(path, options.num_devices);
  if (auto it = made.find(key); it != made.end()) return it->second.get();
  KILN_ASSIGN_OR_RETURN(const Plugin* plugin, Plugin::load(path));
  // Across processes (mpirun, one client per process): the store is served over MPI and the
  // rank is the node id. On one host a GPU plugin gets an in-process store, so one host and
  // many take the same path. libtpu never gets one (it refuses node_id, measured: it finds its
  // slice's hosts itself), only the check that its client spans the job; the CPU plugin gets
  // none on one host (it reads neither), which keeps its client as it was.
  DistributedOptions distributed;
  if (options.num_nodes > 1) {
    if (job_store == nullptr) {
      KILN_ASSIGN_OR_RETURN(job_store, MpiKvStore::create());
    }
    if (job_store->num_ranks() != options.num_nodes) {
      return failed_precondition("backend=pjrt: the config was loaded for {} ranks, MPI has {}", options.num_nodes,
                                 job_store->num_ranks());
    }
    distributed.node_id = job_store->rank();
    distributed.num_nodes = options.num_nodes;
    if (options.plugin != "tpu") distributed.kv_store = job_store.get();
  } else if (options.plugin != "cpu" && options.plugin != "tpu") {
    distributed.kv_store = &host_store;
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::create(*plugin, options.num_devices, distributed));
  if (client->num_devices() < options.num_devices) {
    return invalid_argument("pjrt_plugin={}: the plugin has {} devices, the mesh needs {}", options.plugin,
                            client->num_devices(), options.num_devices);
  }
  auto backend = std::make_unique<PjrtBackend>(options.plugin, std::move(client));
  const Backend* result = backend.get();
  made.emplace(key, std::move(backend));
  return result;
}

}  // namespace kiln::backend::pjrt
