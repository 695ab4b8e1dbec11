// Ahead-of-time compiles for hardware that is not here: a PJRT plugin describes a device
// topology it could run on (PJRT_TopologyDescription_Create: libtpu from a slice name such as
// "v6e:2x2", the CUDA plugin from a GPU target description and a "slices x hosts x devices"
// shape), compiles for it without a client (PJRT_Compile), and reports what XLA made: its
// per-device memory and its optimized program (spec/pjrt.md, "Compiling for hardware that is
// not there"). Nothing can run from such an executable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/backend/pjrt/pjrt_client.h"
#include "kiln/backend/pjrt/pjrt_plugin.h"
#include "kiln/base/status.h"

namespace kiln::backend::pjrt {

// A create option of a topology (PJRT_NamedValue): a string or an int64.
struct NamedOption {
  std::string name;
  std::variant<std::string, int64_t> value;
};

struct TopologySpec {
  std::string topology_name;         // libtpu: "v6e:2x2"; the CUDA plugin ignores it
  std::vector<NamedOption> options;  // the CUDA plugin: target_config (text proto), topology ("1x1x4")
  // To set in the process, where not already set, before the plugin is loaded (it reads them
  // when it initialises): libtpu otherwise asks a cloud metadata server who it is
  // (TPU_SKIP_MDS_QUERY, TPU_ACCELERATOR_TYPE, ...). compile_for_topology does not set them.
  std::map<std::string, std::string> environment;
};

struct AotExecutable {
  std::string platform;        // the topology's platform: "cuda", "tpu"
  CompiledMemoryStats memory;  // per device
  std::string optimized_hlo;   // XLA's optimized program, a serialized xla.HloModuleProto
  double compile_seconds = 0;
};

// The plugin at `path` loaded for ahead-of-time compiles for `topology`: its environment set
// first (where not already set; the plugin reads it when it initialises), and XLA's INFO
// logging (every compile step, ptxas's register spills) off unless the user set
// TF_CPP_MIN_LOG_LEVEL: what `kiln compile` prints is its report.
Result<const Plugin*> load_for_topology(const std::string& path, const TopologySpec& topology);

// Compiles StableHLO text for num_replicas devices of `topology` (replica mode, as
// Client::compile). Errors are one line: the plugin has no deviceless compile (PJRT C API
// older than it), the topology is refused (its message), or the program is.
Result<AotExecutable> compile_for_topology(const Plugin& plugin, const TopologySpec& topology,
                                           std::string_view stablehlo_text, int num_replicas);

// The temporaries XLA said it needed when it refused a program for running out of device
// memory at compile time (libtpu: "E1000: CompileTimeHbmOom: ... the total memory required
// for HLO temporaries (274.91G) exceeds available HBM (95.73G)"), in GiB (XLA writes byte
// counts in binary units); nullopt for any other message. A verdict on the config, not a
// failure of the compile.
std::optional<double> compile_time_oom_gib(std::string_view message);

}  // namespace kiln::backend::pjrt
