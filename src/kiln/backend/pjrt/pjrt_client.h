// A PJRT client of one plugin and what it makes: device buffers and loaded executables.
// Kiln runs XLA in replica mode (spec/pjrt.md): one per-device StableHLO program, compiled for
// num_replicas devices, with replica r on the client's device r; collectives name their
// replica_groups. The device machinery stays here; Kiln's host Buffers go in and out.
// Device buffers and executables must not outlive the Client that made them.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/backend/buffer.h"
#include "kiln/backend/pjrt/kv_store.h"
#include "kiln/backend/pjrt/pjrt_plugin.h"
#include "kiln/base/status.h"
#include "kiln/ir/shape.h"

namespace kiln::backend::pjrt {

// Kiln's dtypes as PJRT element types and back (pred, s32, u32, bf16, f32, f64; a PJRT type
// with no Kiln dtype is an error naming it).
PJRT_Buffer_Type pjrt_element_type(ir::DType dtype);
Result<ir::DType> kiln_dtype(PJRT_Buffer_Type type);

// One array on one device, owned (PJRT_Buffer_Destroy when it dies). Empty when default-made,
// moved from, or consumed: donated to an execution, whose output now owns the storage.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const PJRT_Api* api, PJRT_Buffer* buffer, ir::Shape shape, int device)
      : api_(api), buffer_(buffer), shape_(std::move(shape)), device_(device) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  bool valid() const { return buffer_ != nullptr; }
  const ir::Shape& shape() const { return shape_; }
  int device() const { return device_; }  // index among the client's devices
  PJRT_Buffer* get() const { return buffer_; }

  // A host copy (dense, row-major), after any pending write to the buffer.
  Result<Buffer> to_host() const;
  // Destroys the device buffer now; the object becomes empty (what donation does).
  void reset();

 private:
  const PJRT_Api* api_ = nullptr;
  PJRT_Buffer* buffer_ = nullptr;
  ir::Shape shape_;
  int device_ = -1;
};

// XLA's memory statistics of a compiled executable (PJRT_Executable_GetCompiledMemoryStats),
// in bytes, for `kiln compile`: device memory, and host memory where the device spills.
struct CompiledMemoryStats {
  int64_t generated_code_bytes = 0;
  int64_t argument_bytes = 0;
  int64_t output_bytes = 0;
  int64_t alias_bytes = 0;  // argument bytes reused for outputs (donation)
  int64_t temp_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t host_generated_code_bytes = 0;
  int64_t host_argument_bytes = 0;
  int64_t host_output_bytes = 0;
  int64_t host_alias_bytes = 0;
  int64_t host_temp_bytes = 0;
};

// A PJRT_Program of StableHLO text (format "mlir": the plugin parses text or bytecode) over
// `code`, which must outlive it (PJRT_Program.code is not const, hence no string_view).
PJRT_Program stablehlo_program(std::string& code);

// XLA's memory statistics of any compiled executable (loaded or ahead of time); unimplemented
// when the plugin does not report them.
Result<CompiledMemoryStats> executable_memory_stats(const Plugin& plugin, PJRT_Executable* executable);

class LoadedExecutable {
 public:
  ~LoadedExecutable();
  LoadedExecutable(const LoadedExecutable&) = delete;
  LoadedExecutable& operator=(const LoadedExecutable&) = delete;

  // The replicas this process runs: all of them on one host; across processes, the ones on
  // this process's devices (replica p * n + r of the job is this process's replica r when
  // this is process p of n devices each).
  int num_replicas() const { return static_cast<int>(devices_.size()); }
  int num_outputs() const { return num_outputs_; }

  // Runs once on every replica of this process: args_per_device[r] is replica r's argument
  // list, each buffer on the device replica r runs on (the client's device r); across
  // processes every process calls it, each with its own replicas. Returns each replica's outputs.
  // The arguments whose indices are in `donated_args` are given to the execution: XLA may
  // write outputs into them when the program aliases them (the argument attribute
  // `tf.aliasing_output = <output index> : i32`), and they are consumed (reset) afterwards.
  // The others are passed as non-donatable, so an aliased argument the caller keeps is copied,
  // not overwritten.
  Result<std::vector<std::vector<DeviceBuffer>>> execute(std::vector<std::vector<DeviceBuffer*>> args_per_device,
                                                         const std::set<int>& donated_args);

  // XLA's memory statistics; unimplemented when the plugin does not report them.
  Result<CompiledMemoryStats> compiled_memory_stats() const;

 private:
  friend class Client;
  LoadedExecutable(const Plugin& plugin, PJRT_LoadedExecutable* loaded) : plugin_(plugin), loaded_(loaded) {}
  const PJRT_Api& api() const { return plugin_.api(); }

  const Plugin& plugin_;
  PJRT_LoadedExecutable* loaded_;
  PJRT_Executable* executable_ = nullptr;
  int num_outputs_ = 0;
  std::vector<int> devices_;  // replica r runs on the client's device devices_[r]
};

// This process's place in a job of several processes, one client each (mpirun across hosts):
// what PJRT_Client_Create needs to make one client of the job's devices.
struct DistributedOptions {
  int node_id = 0;    // this process (the MPI rank)
  int num_nodes = 1;  // processes in the job
  // Given: node_id and num_nodes go to the plugin as named create options and the store as its
  // key-value callbacks (XLA's GPU plugin exchanges topologies and NCCL ids through it), keys
  // under the plugin's file name. Null: no create options (libtpu refuses node_id; it finds its
  // slice's hosts itself). Must outlive the client.
  KvStore* kv_store = nullptr;
};

class Client {
 public:
  // A client of `plugin` with `num_devices` devices of this process (0: as many as the plugin
  // has). A CPU plugin makes that many (the named create option cpu_device_count); other
  // plugins get only `distributed`'s options, and the client uses the first num_devices of the
  // devices they have. With num_nodes > 1 the plugin's client must span the job: a plugin that
  // makes a client of this process alone (XLA's CPU plugin ignores node_id and num_nodes) is
  // a failed precondition naming it.
  static Result<std::unique_ptr<Client>> create(const Plugin& plugin, int num_devices,
                                                const DistributedOptions& distributed = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return plugin_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }  // this process's
  const std::string& platform_name() const { return platform_name_; }  // "cpu", "cuda", "tpu"
  int process_index() const { return process_index_; }
  int num_processes() const { return num_processes_; }
  // The job's devices: num_devices() on each of num_processes().
  int num_global_devices() const { return static_cast<int>(global_device_ids_.size()); }

  // Compiles StableHLO text (MLIR's pretty or generic form; the plugin parses both) for
  // num_replicas devices of the job, replica p * num_devices() + r on process p's device r (on
  // one host: replica r on device r). Across processes every process compiles the same program
  // with the same device assignment and runs its own replicas. A syntax or verifier error is a
  // one-line Status with the plugin's diagnostic.
  Result<std::unique_ptr<LoadedExecutable>> compile(std::string_view stablehlo_text, int num_replicas) const;

  // Copies a host buffer (pred, s32, u32, bf16, f32, f64) to device `device`.
  Result<DeviceBuffer> to_device(const Buffer& host, int device) const;

 private:
  Client(const Plugin& plugin, PJRT_Client* client) : plugin_(plugin), client_(client) {}
  const PJRT_Api& api() const { return plugin_.api(); }
  Status init_devices(int num_devices);

  const Plugin& plugin_;
  PJRT_Client* client_;
  std::string platform_name_;
  std::vector<PJRT_Device*> devices_;  // this process's, by device id
  std::vector<int64_t> device_ids_;  // PJRT_DeviceDescription_Id of devices_[i]
  // Every process's devices, process by process, each by id (the same list on every process):
  // the device assignment of compile().
  std::vector<int64_t> global_device_ids_;
  int process_index_ = 0;
  int num_processes_ = 1;
  std::unique_ptr<PjrtKvCallbacks> kv_callbacks_;  // what the plugin calls, while the client lives
};

}  // namespace kiln::backend::pjrt
