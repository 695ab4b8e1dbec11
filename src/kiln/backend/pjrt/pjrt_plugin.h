// A PJRT plugin: an XLA shared object exporting GetPjrtApi (the PJRT C API, pjrt_c_api.h from
// the xla-cpu-pjrt wheel), loaded once per path per process and never unloaded: XLA plugins
// start threads and register globals that make dlclose unsafe.
#pragma once

#include <string>
#include <string_view>

#include "kiln/base/status.h"
#include "pjrt_c_api.h"

namespace kiln::backend::pjrt {

// The oldest PJRT C API Kiln runs on: 0.81, the header it is compiled against and the version
// of the pinned CPU plugin (the oldest one tested). Newer minors only add fields at the end of
// structs, and every struct Kiln passes carries its struct_size, so newer plugins work
// (0.115, 0.117 and 0.118 were seen to, spec/pjrt.md).
inline constexpr int kMinimumPjrtMinor = 81;

class Plugin {
 public:
  // The plugin at `path` (resolve_plugin gives it), loaded with dlopen(RTLD_NOW | RTLD_LOCAL)
  // and initialised on first use; later calls with the same path get the same Plugin. Errors
  // (one line): the file does not load, has no GetPjrtApi, speaks another major version or a
  // minor older than kMinimumPjrtMinor, or lacks a function Kiln calls.
  static Result<const Plugin*> load(const std::string& path);

  const PJRT_Api& api() const { return *api_; }
  const std::string& path() const { return path_; }
  std::string version() const;  // "0.81"
  // Whether the plugin's PJRT_Api has `offset`'s function (struct_size covers it) and sets it:
  // for optional calls, e.g. has(offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats)).
  bool has(size_t offset) const;

 private:
  Plugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {}
  std::string path_;
  const PJRT_Api* api_;
};

// `error` as a Status (ok when null), then destroyed: "pjrt: PJRT_Client_Compile: <message>",
// the plugin's lines joined with "; " so it stays one line; the code maps onto Kiln's.
Status pjrt_status(const PJRT_Api& api, PJRT_Error* error, std::string_view function);

// Waits for `event` and destroys it; its error as pjrt_status does ("<function> event").
Status await_event(const PJRT_Api& api, PJRT_Event* event, std::string_view function);

}  // namespace kiln::backend::pjrt

// Calls api.fn(args) and turns its error into a Status named after fn:
//   KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Client_Compile, &args));
#define KILN_PJRT_CALL(api, fn, args) ::kiln::backend::pjrt::pjrt_status((api), (api).fn(args), #fn)
