// A shared object that looks like a PJRT plugin from outside (it exports GetPjrtApi) and
// reports the PJRT C API version and PJRT_Api size the test asks for through the environment:
//   FAKE_PJRT_MAJOR, FAKE_PJRT_MINOR    the version (default: the header's)
//   FAKE_PJRT_STRUCT_SIZE               PJRT_Api.struct_size (default: the header's)
// Every function pointer within struct_size is a stub that returns no error (null) and does
// nothing else; those beyond it are null. It lets pjrt_plugin_test see Kiln refuse a plugin that is
// too old, of another major version, or short of a function, without having such a plugin.
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "pjrt_c_api.h"

namespace {

size_t env_or(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? static_cast<size_t>(std::strtoull(value, nullptr, 10)) : fallback;
}

PJRT_Error* stub(void*) { return nullptr; }

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static PJRT_Api api{};
  api.struct_size = env_or("FAKE_PJRT_STRUCT_SIZE", PJRT_Api_STRUCT_SIZE);
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = static_cast<int>(env_or("FAKE_PJRT_MAJOR", PJRT_API_MAJOR));
  api.pjrt_api_version.minor_version = static_cast<int>(env_or("FAKE_PJRT_MINOR", PJRT_API_MINOR));
  // The function pointers follow the version; each slot within struct_size gets the stub.
  using Stub = PJRT_Error* (*)(void*);
  const Stub fn = &stub;
  for (size_t offset = offsetof(PJRT_Api, PJRT_Error_Destroy); offset + sizeof(fn) <= sizeof(PJRT_Api);
       offset += sizeof(fn)) {
    if (offset + sizeof(fn) <= api.struct_size) std::memcpy(reinterpret_cast<char*>(&api) + offset, &fn, sizeof(fn));
  }
  return &api;
}
