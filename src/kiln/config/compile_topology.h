// compile_topology (MaxText's key): the accelerator slice an ahead-of-time compile targets,
// named as its vendor sells it. TPUs as Google names slices: v6e-N and v5e-N count chips,
// v5p-N and v4-N count TensorCores (two per chip, one device each). GPUs as h100-N, h200-N
// and b200-N, N GPUs. compile_topology_num_slices such slices make the devices.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::config {

struct CompileTopology {
  std::string name;         // as given: "v6e-4", "h100-16"
  std::string platform;     // the plugin that compiles for it: "tpu" or "cuda"
  std::string target;       // its hardware file, configs/targets/<target>.yml: "tpu-v6e", "h100"
  int64_t devices = 0;      // per slice
  int64_t num_slices = 1;
  // TPU: the slice's chip grid as libtpu names it ("v6e:2x2", "v5p:2x2x2"). GPU: empty (the
  // host shape comes from the target's devices_per_node).
  std::string tpu_topology;
  int64_t total_devices() const { return devices * num_slices; }
};

// The slices and sizes accepted, for messages: "v6e-N, v5e-N (N = 1, 4, 8, ... 256 chips), ...".
std::string compile_topology_choices();

// `name` parsed, or a one-line error naming the accepted forms and sizes.
Result<CompileTopology> parse_compile_topology(std::string_view name, int64_t num_slices);

}  // namespace kiln::config
