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

class LoadedExecutable {
 public:
  ~LoadedExecutable();
  LoadedExecutable(const LoadedExecutable&) = delete;
  LoadedExecutable& operator=(const LoadedExecutable&) = delete;

  int num_replicas() const { return static_cast<int>(devices_.size()); }
  int num_outputs() const { return num_outputs_; }

  // Runs once on every replica: args_per_device[r] is replica r's argument list, each buffer
  // on the device replica r runs on (the client's device r). Returns each replica's outputs.
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

class Client {
 public:
  // A client of `plugin` with `num_devices` devices (0: as many as the plugin has). A CPU
  // plugin makes that many (the named create option cpu_device_count); other plugins get no
  // create options, and the client uses the first num_devices of the devices they have.
  static Result<std::unique_ptr<Client>> create(const Plugin& plugin, int num_devices);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return plugin_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  const std::string& platform_name() const { return platform_name_; }  // "cpu", "cuda", "tpu"

  // Compiles StableHLO text (MLIR's pretty or generic form; the plugin parses both) for
  // num_replicas devices, replica r on device r. A syntax or verifier error is a one-line
  // Status with the plugin's diagnostic.
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
  std::vector<PJRT_Device*> devices_;
  std::vector<int64_t> device_ids_;  // PJRT_DeviceDescription_Id of devices_[i]
};

}  // namespace kiln::backend::pjrt
