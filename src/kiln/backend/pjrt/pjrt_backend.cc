#include "kiln/backend/pjrt/pjrt_backend.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

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
  explicit PjrtExecutable(const Client& client) : client_(client) {}

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
    if (replicas_ > client_.num_devices()) {
      return invalid_argument("backend=pjrt: the program runs on {} devices ({}), the {} plugin's client has {}",
                              replicas_, options.mesh.to_string(), client_.platform_name(), client_.num_devices());
    }
    EmitOptions emit;
    emit.mesh = options.mesh;
    // Donated state is updated in place on GPUs and TPUs. Not on XLA's CPU plugin: there a
    // donated argument that an earlier execution produced (the step's state from the step
    // before) gave a wrong next step (gpt-oss-small, one batch reused: step 1's loss 8.183
    // against 8.168 with the same state uploaded afresh, or without donation), so the CPU
    // plugin's step writes its new state to fresh buffers and the old ones are freed after it.
    if (client_.platform_name() != "cpu") emit.donated = options.donated;
    // XLA:CPU has no ragged_dot (spec/pjrt.md) and no bf16 x bf16 -> f32 dot.
    emit.ragged_dot = client_.platform_name() != "cpu";
    emit.mixed_precision_dot = client_.platform_name() != "cpu";
    KILN_ASSIGN_OR_RETURN(const std::string stablehlo, emit_stablehlo(*module_, emit));
    for (const auto& [output, argument] : emit.donated) donated_args_.insert(static_cast<int>(argument));
    if (!options.dump_dir.empty()) {
      std::ofstream(options.dump_dir + "/optimized.ir") << ir::print_module(*module_);
      std::ofstream(options.dump_dir + "/program.stablehlo.mlir") << stablehlo;
    }
    KILN_ASSIGN_OR_RETURN(loaded_, client_.compile(stablehlo, replicas_));
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
    if (replica < 0 || replica >= replicas_) return internal_error("replica {} of {}", replica, replicas_);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, client_.to_device(host, replica));
    return std::unique_ptr<backend::DeviceValue>(std::make_unique<PjrtValue>(std::move(b)));
  }

  Result<std::vector<backend::DeviceValues>> run_replicas_on_device(
      const std::vector<std::vector<backend::DeviceValue*>>& args) override {
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
  const Client& client_;
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

}  // namespace

Result<const Backend*> pjrt_backend(const PjrtBackendOptions& options) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<PjrtBackend>> made;
  std::lock_guard<std::mutex> lock(mu);
  // By the plugin's file, looked up each time: the same name may mean another file once
  // $KILN_VENV changes.
  KILN_ASSIGN_OR_RETURN(std::string path, resolve_plugin(options.plugin));
  auto key = std::make_pair(path, options.num_devices);
  if (auto it = made.find(key); it != made.end()) return it->second.get();
  KILN_ASSIGN_OR_RETURN(const Plugin* plugin, Plugin::load(path));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::create(*plugin, options.num_devices));
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
