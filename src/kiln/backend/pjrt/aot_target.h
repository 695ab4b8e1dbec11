// What an ahead-of-time compile for compile_topology needs from the plugin and from Kiln's
// hardware file of that device (configs/targets/<target>.yml): the PJRT topology to describe
// (libtpu: the slice's name and the environment that keeps it off the cloud metadata server;
// the CUDA plugin: XLA's GpuTargetConfig, written from the file's xla_gpu block, and the
// "slices x hosts x GPUs per host" shape), and the device's capacity and peaks to report against.
#pragma once

#include <string>

#include "kiln/backend/pjrt/aot_compile.h"
#include "kiln/base/status.h"
#include "kiln/config/compile_topology.h"

namespace kiln::backend::pjrt {

struct AotTarget {
  config::CompileTopology topology;
  std::string plugin;        // pjrt_plugin name that compiles for it: "cuda" or "tpu"
  std::string description;   // the hardware file's
  double capacity_bytes = 0;  // one device's memory
  double peak_bf16_tflops = 0;
  TopologySpec spec;
};

// `topology`'s target, from the hardware file in `targets_dir`. Errors: the file is missing or
// lacks a figure it needs (named).
Result<AotTarget> aot_target(const config::CompileTopology& topology, const std::string& targets_dir);

// XLA's GpuTargetConfigProto as text, from a hardware file's xla_gpu block (the text of the
// file itself, for tests): what the CUDA plugin's target_config option takes.
Result<std::string> gpu_target_config(const std::string& target_file_text);

}  // namespace kiln::backend::pjrt
