#include "kiln/backend/pjrt/pjrt_client.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <span>
#include <utility>

#include "kiln/backend/pjrt/compile_options_proto.h"

namespace kiln::backend::pjrt {

namespace {

// The create options Kiln passes: cpu_device_count only to a CPU plugin (XLA's GPU and TPU
// plugins refuse options they do not know), node_id and num_nodes to a plugin given a
// key-value store (the GPU plugin's multi-node options; the CPU plugin accepts and ignores
// them, libtpu refuses them: measured, docs/backends.md).
constexpr std::string_view kCpuDeviceCount = "cpu_device_count";
constexpr std::string_view kNodeId = "node_id";
constexpr std::string_view kNumNodes = "num_nodes";

PJRT_NamedValue int64_option(std::string_view name, int64_t value) {
  PJRT_NamedValue option{};
  option.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  option.name = name.data();
  option.name_size = name.size();
  option.type = PJRT_NamedValue_kInt64;
  option.int64_value = value;
  option.value_size = 1;
  return option;
}

Result<PJRT_Client*> create_raw(const PJRT_Api& api, std::span<const PJRT_NamedValue> options,
                                PjrtKvCallbacks* kv_callbacks) {
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = options.data();
  args.num_options = options.size();
  if (kv_callbacks != nullptr) kv_callbacks->install(args);
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Client_Create, &args));
  return args.client;
}

// A device's PJRT id and the process it belongs to.
struct DeviceInfo {
  int64_t id = 0;
  int process = 0;
};

Result<DeviceInfo> device_info(const PJRT_Api& api, PJRT_Device* device) {
  PJRT_Device_GetDescription_Args description{};
  description.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  description.device = device;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Device_GetDescription, &description));
  PJRT_DeviceDescription_Id_Args id{};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = description.device_description;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_DeviceDescription_Id, &id));
  PJRT_DeviceDescription_ProcessIndex_Args process{};
  process.struct_size = PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE;
  process.device_description = description.device_description;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_DeviceDescription_ProcessIndex, &process));
  return DeviceInfo{id.id, process.process_index};
}

std::string_view pjrt_type_name(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_S8: return "s8";
    case PJRT_Buffer_Type_S16: return "s16";
    case PJRT_Buffer_Type_S64: return "s64";
    case PJRT_Buffer_Type_U8: return "u8";
    case PJRT_Buffer_Type_U16: return "u16";
    case PJRT_Buffer_Type_U64: return "u64";
    case PJRT_Buffer_Type_F16: return "f16";
    case PJRT_Buffer_Type_C64: return "c64";
    case PJRT_Buffer_Type_C128: return "c128";
    case PJRT_Buffer_Type_TOKEN: return "token";
    default: return "non-standard";
  }
}

// An output's shape, as the plugin reports it.
Result<ir::Shape> buffer_shape(const PJRT_Api& api, PJRT_Buffer* buffer) {
  PJRT_Buffer_ElementType_Args type{};
  type.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  type.buffer = buffer;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Buffer_ElementType, &type));
  KILN_ASSIGN_OR_RETURN(ir::DType dtype, kiln_dtype(type.type));
  PJRT_Buffer_Dimensions_Args dims{};
  dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  dims.buffer = buffer;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Buffer_Dimensions, &dims));
  return ir::Shape(dtype, std::vector<int64_t>(dims.dims, dims.dims + dims.num_dims));
}

void destroy_buffer(const PJRT_Api& api, PJRT_Buffer* buffer) {
  if (buffer == nullptr) return;
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer;
  // A failed destroy leaks one buffer; nothing a caller could do about it.
  (void)KILN_PJRT_CALL(api, PJRT_Buffer_Destroy, &args);
}

}  // namespace

PJRT_Buffer_Type pjrt_element_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kPred: return PJRT_Buffer_Type_PRED;
    case ir::DType::kS32: return PJRT_Buffer_Type_S32;
    case ir::DType::kU32: return PJRT_Buffer_Type_U32;
    case ir::DType::kBF16: return PJRT_Buffer_Type_BF16;
    case ir::DType::kF32: return PJRT_Buffer_Type_F32;
    case ir::DType::kF64: return PJRT_Buffer_Type_F64;
  }
  return PJRT_Buffer_Type_INVALID;
}

Result<ir::DType> kiln_dtype(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED: return ir::DType::kPred;
    case PJRT_Buffer_Type_S32: return ir::DType::kS32;
    case PJRT_Buffer_Type_U32: return ir::DType::kU32;
    case PJRT_Buffer_Type_BF16: return ir::DType::kBF16;
    case PJRT_Buffer_Type_F32: return ir::DType::kF32;
    case PJRT_Buffer_Type_F64: return ir::DType::kF64;
    default:
      return unimplemented("pjrt: element type {} (PJRT_Buffer_Type {}) has no Kiln dtype; Kiln has pred, s32, u32, "
                           "bf16, f32, f64", pjrt_type_name(type), static_cast<int>(type));
  }
}

// ---------------------------------------------------------------------------------------------
// DeviceBuffer

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    buffer_ = std::exchange(other.buffer_, nullptr);
    shape_ = std::move(other.shape_);
    device_ = other.device_;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (buffer_ != nullptr) destroy_buffer(*api_, std::exchange(buffer_, nullptr));
}

Result<Buffer> DeviceBuffer::to_host() const {
  if (!valid()) return failed_precondition("pjrt: to_host of an empty device buffer (donated, or moved from)");
  Buffer host(shape_);
  // Dense row-major on the host whatever the device layout (a TPU tiles its arrays): the
  // most minor dimension is the last.
  std::vector<int64_t> minor_to_major(shape_.rank());
  for (int i = 0; i < shape_.rank(); ++i) minor_to_major[i] = shape_.rank() - 1 - i;
  PJRT_Buffer_MemoryLayout layout{};
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = minor_to_major.data();
  layout.tiled.minor_to_major_size = minor_to_major.size();
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = buffer_;
  args.host_layout = &layout;
  args.dst = host.data();
  args.dst_size = host.byte_size();
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(*api_, PJRT_Buffer_ToHostBuffer, &args));
  KILN_RETURN_IF_ERROR(await_event(*api_, args.event, "PJRT_Buffer_ToHostBuffer"));
  return host;
}

// ---------------------------------------------------------------------------------------------
// Client

Result<std::unique_ptr<Client>> Client::create(const Plugin& plugin, int num_devices,
                                               const DistributedOptions& distributed) {
  if (num_devices < 0) return invalid_argument("pjrt: a client of {} devices", num_devices);
  if (distributed.num_nodes < 1 || distributed.node_id < 0 || distributed.node_id >= distributed.num_nodes) {
    return invalid_argument("pjrt: node_id={} of num_nodes={}: expected 0 <= node_id < num_nodes",
                            distributed.node_id, distributed.num_nodes);
  }
  const PJRT_Api& api = plugin.api();
  std::vector<PJRT_NamedValue> options;
  std::unique_ptr<PjrtKvCallbacks> kv_callbacks;
  if (distributed.kv_store != nullptr) {
    options.push_back(int64_option(kNodeId, distributed.node_id));
    options.push_back(int64_option(kNumNodes, distributed.num_nodes));
    // The plugin's keys under its file's name: two plugins in one job keep apart.
    kv_callbacks = std::make_unique<PjrtKvCallbacks>(
        distributed.kv_store, "pjrt/" + std::filesystem::path(plugin.path()).filename().string() + "/");
  }
  // The platform, and so whether the plugin takes cpu_device_count, is known only once a
  // client exists: a client with `distributed`'s options first. A CPU plugin is then made again
  // with the device count asked for (the CPU client is cheap to make; other plugins' clients
  // are kept).
  KILN_ASSIGN_OR_RETURN(PJRT_Client* raw, create_raw(api, options, kv_callbacks.get()));
  std::unique_ptr<Client> client(new Client(plugin, raw));
  client->kv_callbacks_ = std::move(kv_callbacks);
  KILN_RETURN_IF_ERROR(client->init_devices(0));
  if (client->platform_name_ == "cpu" && num_devices > 0 && client->num_devices() != num_devices) {
    kv_callbacks = std::move(client->kv_callbacks_);
    client.reset();
    options.push_back(int64_option(kCpuDeviceCount, num_devices));
    KILN_ASSIGN_OR_RETURN(raw, create_raw(api, options, kv_callbacks.get()));
    client.reset(new Client(plugin, raw));
    client->kv_callbacks_ = std::move(kv_callbacks);
  }
  KILN_RETURN_IF_ERROR(client->init_devices(num_devices));
  if (distributed.num_nodes > 1 && client->num_processes_ != distributed.num_nodes) {
    // Measured on xla-cpu-pjrt 0.0.1: node_id and num_nodes are accepted and ignored; every
    // process gets a client of its own devices as process 0, and no collective crosses them.
    return failed_precondition("pjrt: the {} plugin ({}) made a client of {} process(es) for node_id={} of "
                               "num_nodes={}: it does not span processes; run one process, or a plugin that does "
                               "(cuda)",
                               client->platform_name_, plugin.path(), client->num_processes_, distributed.node_id,
                               distributed.num_nodes);
  }
  if (client->process_index_ != distributed.node_id) {
    // Replica p * n + r runs on process p's device r, and Kiln's rank p feeds devices p * n
    // and on: the plugin's process index must be the rank (libtpu numbers hosts itself).
    return failed_precondition("pjrt: the {} plugin ({}) made this process its process {}, but it is MPI rank {}: "
                               "launch the ranks in the plugin's host order (on TPUs, rank r on TPU_WORKER_ID r)",
                               client->platform_name_, plugin.path(), client->process_index_, distributed.node_id);
  }
  return client;
}

Client::~Client() {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client_;
  (void)KILN_PJRT_CALL(api(), PJRT_Client_Destroy, &args);
}

Status Client::init_devices(int num_devices) {
  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = client_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Client_PlatformName, &name));
  platform_name_.assign(name.platform_name, name.platform_name_size);

  PJRT_Client_ProcessIndex_Args process{};
  process.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  process.client = client_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Client_ProcessIndex, &process));
  process_index_ = process.process_index;

  // The job's devices, each process's by id. Every process must compile with the same device
  // assignment, so the order comes from what every process sees alike (ids and process
  // indices), not from the order a plugin happens to list its own devices in.
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = client_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Client_Devices, &all));
  std::map<int, std::vector<std::pair<int64_t, PJRT_Device*>>> by_process;
  for (size_t i = 0; i < all.num_devices; ++i) {
    KILN_ASSIGN_OR_RETURN(DeviceInfo info, device_info(api(), all.devices[i]));
    by_process[info.process].emplace_back(info.id, all.devices[i]);
  }
  for (auto& [p, devices] : by_process) std::sort(devices.begin(), devices.end());
  num_processes_ = static_cast<int>(by_process.size());

  const auto own = by_process.find(process_index_);
  const int available = own == by_process.end() ? 0 : static_cast<int>(own->second.size());
  if (num_devices > available) {
    return failed_precondition("pjrt: the {} plugin ({}) has {} devices; {} were asked for", platform_name_,
                               plugin_.path(), available, num_devices);
  }
  const int used = num_devices > 0 ? num_devices : available;
  devices_.clear();
  device_ids_.clear();
  for (int i = 0; i < used; ++i) {
    device_ids_.push_back(own->second[i].first);
    devices_.push_back(own->second[i].second);
  }
  // Every process uses as many of its devices as this one (Kiln's ranks have local_devices each).
  global_device_ids_.clear();
  for (const auto& [p, devices] : by_process) {
    for (int i = 0; i < used && i < static_cast<int>(devices.size()); ++i) global_device_ids_.push_back(devices[i].first);
  }
  return ok_status();
}

Result<std::unique_ptr<LoadedExecutable>> Client::compile(std::string_view stablehlo_text, int num_replicas) const {
  if (num_replicas < 1 || num_replicas > num_global_devices()) {
    return invalid_argument("pjrt: cannot compile for {} replicas on a client of {} devices", num_replicas,
                            num_global_devices());
  }
  // The device assignment is explicit, replica r on the job's device r (this process's device
  // r on one host), so that the argument lists of execute() line up with to_device()'s device
  // indices on every plugin (XLA:CPU's default happens to be the same).
  const std::span<const int64_t> assignment = std::span(global_device_ids_).first(num_replicas);
  const std::string options = compile_options_proto(num_replicas, /*num_partitions=*/1, assignment);
  std::string code(stablehlo_text);
  PJRT_Program program = stablehlo_program(code);
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = client_;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Client_Compile, &args));
  std::unique_ptr<LoadedExecutable> exe(new LoadedExecutable(plugin_, args.executable));

  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = exe->loaded_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_LoadedExecutable_GetExecutable, &get));
  exe->executable_ = get.executable;
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = exe->executable_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Executable_NumOutputs, &outputs));
  exe->num_outputs_ = static_cast<int>(outputs.num_outputs);

  PJRT_LoadedExecutable_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  devices.executable = exe->loaded_;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_LoadedExecutable_AddressableDevices, &devices));
  for (size_t r = 0; r < devices.num_addressable_devices; ++r) {
    auto it = std::find(devices_.begin(), devices_.end(), devices.addressable_devices[r]);
    if (it == devices_.end()) return internal_error("pjrt: replica {} runs on a device the client does not use", r);
    exe->devices_.push_back(static_cast<int>(it - devices_.begin()));
  }
  const auto local = std::count_if(assignment.begin(), assignment.end(), [&](int64_t id) {
    return std::find(device_ids_.begin(), device_ids_.end(), id) != device_ids_.end();
  });
  if (exe->num_replicas() != local) {
    return internal_error("pjrt: compiled for {} replicas, {} of them on this process's devices; the executable runs "
                          "on {} devices",
                          num_replicas, local, exe->num_replicas());
  }
  return exe;
}

Result<DeviceBuffer> Client::to_device(const Buffer& host, int device) const {
  if (device < 0 || device >= num_devices()) {
    return invalid_argument("pjrt: device {} of a client of {} devices", device, num_devices());
  }
  const ir::Shape& shape = host.shape();
  if (shape.is_tuple() || host.data() == nullptr) {
    return invalid_argument("pjrt: to_device of {}: an array buffer with storage is needed",
                            host.data() == nullptr ? "an empty Buffer" : shape.to_string());
  }
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = client_;
  args.data = host.data();
  args.type = pjrt_element_type(shape.dtype());
  args.dims = shape.dims().data();
  args.num_dims = shape.dims().size();
  // No byte strides and no device layout: dense, row-major (Kiln's Buffer layout).
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = devices_[device];
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_Client_BufferFromHostBuffer, &args));
  DeviceBuffer buffer(&api(), args.buffer, shape, device);
  // `host` may change once this returns, so the copy must be done with it.
  KILN_RETURN_IF_ERROR(await_event(api(), args.done_with_host_buffer, "PJRT_Client_BufferFromHostBuffer"));
  return buffer;
}

// ---------------------------------------------------------------------------------------------
// LoadedExecutable

LoadedExecutable::~LoadedExecutable() {
  if (executable_ != nullptr) {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable_;
    (void)KILN_PJRT_CALL(api(), PJRT_Executable_Destroy, &args);
  }
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = loaded_;
  (void)KILN_PJRT_CALL(api(), PJRT_LoadedExecutable_Destroy, &args);
}

Result<std::vector<std::vector<DeviceBuffer>>> LoadedExecutable::execute(
    std::vector<std::vector<DeviceBuffer*>> args_per_device, const std::set<int>& donated_args) {
  const int n = num_replicas();
  if (static_cast<int>(args_per_device.size()) != n) {
    return invalid_argument("pjrt: the executable runs on {} devices, got {} argument lists", n,
                            args_per_device.size());
  }
  const size_t num_args = args_per_device[0].size();
  std::vector<std::vector<PJRT_Buffer*>> handles(n);
  for (int r = 0; r < n; ++r) {
    if (args_per_device[r].size() != num_args) {
      return invalid_argument("pjrt: replica {} got {} arguments, replica 0 got {}", r, args_per_device[r].size(),
                              num_args);
    }
    for (size_t i = 0; i < num_args; ++i) {
      const DeviceBuffer* arg = args_per_device[r][i];
      if (arg == nullptr || !arg->valid()) {
        return invalid_argument("pjrt: argument {} of replica {} is empty (donated to an earlier run?)", i, r);
      }
      if (arg->device() != devices_[r]) {
        return invalid_argument("pjrt: argument {} of replica {} is on device {}; the replica runs on device {}", i, r,
                                arg->device(), devices_[r]);
      }
      handles[r].push_back(arg->get());
    }
  }
  // Every argument the caller keeps is non-donatable, so XLA copies instead of writing into
  // an argument the program aliases.
  std::vector<int64_t> non_donatable;
  for (size_t i = 0; i < num_args; ++i) {
    if (!donated_args.contains(static_cast<int>(i))) non_donatable.push_back(static_cast<int64_t>(i));
  }
  for (int i : donated_args) {
    if (i < 0 || static_cast<size_t>(i) >= num_args) {
      return invalid_argument("pjrt: donated argument {} of a program with {} arguments", i, num_args);
    }
  }
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  std::vector<PJRT_Buffer* const*> argument_lists;
  for (auto& list : handles) argument_lists.push_back(list.data());
  std::vector<std::vector<PJRT_Buffer*>> outputs(n, std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists;
  for (auto& list : outputs) output_lists.push_back(list.data());
  std::vector<PJRT_Event*> events(n, nullptr);

  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = loaded_;
  args.options = &options;
  args.argument_lists = argument_lists.data();
  args.num_devices = n;
  args.num_args = num_args;
  args.output_lists = output_lists.data();
  args.device_complete_events = events.data();
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api(), PJRT_LoadedExecutable_Execute, &args));

  // From here every output is owned (freed on any error) and every event awaited.
  Status status;
  for (int r = 0; r < n; ++r) {
    Status done = await_event(api(), events[r], "PJRT_LoadedExecutable_Execute");
    if (status.ok()) status = done;
  }
  std::vector<std::vector<DeviceBuffer>> results(n);
  for (int r = 0; r < n; ++r) {
    for (PJRT_Buffer* output : outputs[r]) {
      Result<ir::Shape> shape = buffer_shape(api(), output);
      if (!shape.ok()) {
        destroy_buffer(api(), output);
        if (status.ok()) status = shape.status();
        continue;
      }
      results[r].emplace_back(&api(), output, std::move(shape).value(), devices_[r]);
    }
  }
  // The execution took the donated arguments (XLA reads them as deleted once it has aliased
  // them into outputs); the caller's handles are consumed either way.
  for (auto& list : args_per_device) {
    for (int i : donated_args) list[i]->reset();
  }
  if (!status.ok()) return status;
  return results;
}

Result<CompiledMemoryStats> LoadedExecutable::compiled_memory_stats() const {
  return executable_memory_stats(plugin_, executable_);
}

PJRT_Program stablehlo_program(std::string& code) {
  static constexpr std::string_view kFormat = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = code.data();
  program.code_size = code.size();
  program.format = kFormat.data();
  program.format_size = kFormat.size();
  return program;
}

Result<CompiledMemoryStats> executable_memory_stats(const Plugin& plugin, PJRT_Executable* executable) {
  if (!plugin.has(offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats))) {
    return unimplemented("pjrt: {} (PJRT C API {}) does not report compiled memory statistics", plugin.path(),
                         plugin.version());
  }
  PJRT_Executable_GetCompiledMemoryStats_Args args{};
  args.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  args.executable = executable;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(plugin.api(), PJRT_Executable_GetCompiledMemoryStats, &args));
  CompiledMemoryStats stats;
  stats.generated_code_bytes = args.generated_code_size_in_bytes;
  stats.argument_bytes = args.argument_size_in_bytes;
  stats.output_bytes = args.output_size_in_bytes;
  stats.alias_bytes = args.alias_size_in_bytes;
  stats.temp_bytes = args.temp_size_in_bytes;
  stats.peak_bytes = args.peak_memory_in_bytes;
  stats.host_generated_code_bytes = args.host_generated_code_size_in_bytes;
  stats.host_argument_bytes = args.host_argument_size_in_bytes;
  stats.host_output_bytes = args.host_output_size_in_bytes;
  stats.host_alias_bytes = args.host_alias_size_in_bytes;
  stats.host_temp_bytes = args.host_temp_size_in_bytes;
  return stats;
}

}  // namespace kiln::backend::pjrt
