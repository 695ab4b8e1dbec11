#include "kiln/backend/pjrt/pjrt_plugin.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "kiln/base/strings.h"

namespace kiln::backend::pjrt {

namespace {

// Every PJRT_Api function the driver calls unconditionally: a plugin whose struct_size does
// not cover one of them (or that leaves it null) is refused at load time, instead of crashing
// at the first call. Optional calls are checked where they are made (Plugin::has).
#define KILN_PJRT_REQUIRED_FUNCTIONS(X)                                                        \
  X(PJRT_Error_Destroy) X(PJRT_Error_Message) X(PJRT_Error_GetCode) X(PJRT_Plugin_Initialize) \
  X(PJRT_Event_Destroy) X(PJRT_Event_Await) X(PJRT_Client_Create) X(PJRT_Client_Destroy)      \
  X(PJRT_Client_PlatformName) X(PJRT_Client_AddressableDevices) X(PJRT_Client_Compile)         \
  X(PJRT_Client_BufferFromHostBuffer) X(PJRT_Device_GetDescription) X(PJRT_DeviceDescription_Id) \
  X(PJRT_Executable_Destroy) X(PJRT_Executable_NumOutputs) X(PJRT_LoadedExecutable_Destroy)    \
  X(PJRT_LoadedExecutable_GetExecutable) X(PJRT_LoadedExecutable_AddressableDevices)           \
  X(PJRT_LoadedExecutable_Execute) X(PJRT_Buffer_Destroy) X(PJRT_Buffer_ElementType)           \
  X(PJRT_Buffer_Dimensions) X(PJRT_Buffer_ToHostBuffer)

bool covers(const PJRT_Api& api, size_t offset) { return api.struct_size >= offset + sizeof(void*); }

// The API version, or the reason the plugin cannot be used (one line).
Status check_api(const std::string& path, const PJRT_Api* api) {
  if (api == nullptr) return failed_precondition("pjrt: {}: GetPjrtApi returned null", path);
  if (api->struct_size < offsetof(PJRT_Api, pjrt_api_version) + sizeof(PJRT_Api_Version)) {
    return failed_precondition("pjrt: {}: PJRT_Api of {} bytes has no version; Kiln needs PJRT C API {}.{} or newer",
                               path, api->struct_size, PJRT_API_MAJOR, kMinimumPjrtMinor);
  }
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  if (major != PJRT_API_MAJOR || minor < kMinimumPjrtMinor) {
    return failed_precondition("pjrt: {} has PJRT C API {}.{}; Kiln needs {}.{} or newer (same major version)", path,
                               major, minor, PJRT_API_MAJOR, kMinimumPjrtMinor);
  }
#define KILN_PJRT_CHECK_FUNCTION(fn)                                                                         \
  if (!covers(*api, offsetof(PJRT_Api, fn)) || api->fn == nullptr) {                                         \
    return failed_precondition("pjrt: {} (PJRT C API {}.{}) lacks " #fn ", which Kiln calls; Kiln needs {}.{} or newer", \
                               path, major, minor, PJRT_API_MAJOR, kMinimumPjrtMinor);                       \
  }
  KILN_PJRT_REQUIRED_FUNCTIONS(KILN_PJRT_CHECK_FUNCTION)
#undef KILN_PJRT_CHECK_FUNCTION
  return ok_status();
}

StatusCode status_code(PJRT_Error_Code code) {
  switch (code) {
    case PJRT_Error_Code_INVALID_ARGUMENT:
    case PJRT_Error_Code_OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case PJRT_Error_Code_NOT_FOUND:
      return StatusCode::kNotFound;
    case PJRT_Error_Code_FAILED_PRECONDITION:
      return StatusCode::kFailedPrecondition;
    case PJRT_Error_Code_UNIMPLEMENTED:
      return StatusCode::kUnimplemented;
    case PJRT_Error_Code_DATA_LOSS:
      return StatusCode::kDataLoss;
    default:
      return StatusCode::kInternal;
  }
}

// The plugin's message on one line: MLIR diagnostics come as several lines.
std::string one_line(std::string_view message) {
  std::string joined;
  for (const std::string& line : split(message, '\n')) {
    std::string_view t = trim(line);
    if (t.empty()) continue;
    if (!joined.empty()) joined += "; ";
    joined += t;
  }
  return joined;
}

// The canonical path, so two spellings of one file share a Plugin.
std::string canonical(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

}  // namespace

Result<const Plugin*> Plugin::load(const std::string& path) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<Plugin>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = canonical(path);
  if (auto it = loaded->find(key); it != loaded->end()) return it->second.get();

  // Never dlclosed, also on the error paths below: a half-initialised XLA is not safe to unload.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return failed_precondition("pjrt: cannot load plugin {}: {}", path, why != nullptr ? why : "dlopen failed");
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) return failed_precondition("pjrt: {} is not a PJRT plugin (no GetPjrtApi symbol)", path);
  const PJRT_Api* api = get_api();
  KILN_RETURN_IF_ERROR(check_api(path, api));

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(*api, PJRT_Plugin_Initialize, &init).with_context(path));
  auto plugin = std::unique_ptr<Plugin>(new Plugin(path, api));
  const Plugin* result = plugin.get();
  loaded->emplace(key, std::move(plugin));
  return result;
}

std::string Plugin::version() const {
  return fmt::format("{}.{}", api_->pjrt_api_version.major_version, api_->pjrt_api_version.minor_version);
}

bool Plugin::has(size_t offset) const {
  return covers(*api_, offset) && *reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api_) + offset) != nullptr;
}

Status pjrt_status(const PJRT_Api& api, PJRT_Error* error, std::string_view function) {
  if (error == nullptr) return ok_status();
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  api.PJRT_Error_Message(&message);
  PJRT_Error_GetCode_Args code{};
  code.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  PJRT_Error* code_error = api.PJRT_Error_GetCode(&code);
  const StatusCode kiln_code = code_error == nullptr ? status_code(code.code) : StatusCode::kInternal;
  Status status(kiln_code, fmt::format("pjrt: {}: {}", function,
                                       one_line(std::string_view(message.message, message.message_size))));
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = code_error;
  if (code_error != nullptr) api.PJRT_Error_Destroy(&destroy);
  destroy.error = error;
  api.PJRT_Error_Destroy(&destroy);
  return status;
}

Status await_event(const PJRT_Api& api, PJRT_Event* event, std::string_view function) {
  if (event == nullptr) return ok_status();
  PJRT_Event_Await_Args await{};
  await.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  await.event = event;
  Status status = pjrt_status(api, api.PJRT_Event_Await(&await), fmt::format("{} event", function));
  PJRT_Event_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  destroy.event = event;
  Status destroyed = pjrt_status(api, api.PJRT_Event_Destroy(&destroy), "PJRT_Event_Destroy");
  return status.ok() ? destroyed : status;
}

}  // namespace kiln::backend::pjrt
