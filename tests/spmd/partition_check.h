// Shared by the partitioner tests: partition IR text on a mesh, run the per-device program
// on virtual devices (each with its shard of seeded random arguments) and compare the
// assembled outputs with the global program's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"

namespace kiln::spmd {

struct PartitionCase {
  std::string ir;
  config::Mesh mesh;
  std::vector<std::optional<ir::Sharding>> params;
  std::vector<std::optional<ir::Sharding>> outputs;
};

// Records gtest failures for any mismatch beyond `tolerance`; returns the per-device
// program's text.
std::string check_partition_equivalent(const PartitionCase& c, double tolerance = 1e-5);

// Occurrences of `what` in `text`.
int count_in(const std::string& text, const std::string& what);

}  // namespace kiln::spmd
