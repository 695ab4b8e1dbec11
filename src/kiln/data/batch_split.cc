#include "kiln/data/batch_split.h"

#include <algorithm>

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::data {

BatchSplit make_batch_split(const config::Mesh& mesh, const std::vector<config::LogicalAxisRule>& rules,
                            const std::string& logical_axis) {
  BatchSplit split;
  // The first rule for the logical axis decides (later ones are fallbacks for tensors
  // whose other dimensions already use those mesh axes; the batch is the first dimension).
  const config::LogicalAxisRule* rule = nullptr;
  for (const auto& r : rules) {
    if (r.logical_axis == logical_axis) {
      rule = &r;
      break;
    }
  }
  if (rule != nullptr) {
    for (const std::string& axis : mesh.axes()) {
      if (std::find(rule->mesh_axes.begin(), rule->mesh_axes.end(), axis) != rule->mesh_axes.end()) {
        split.axes.push_back(axis);
      }
    }
  }
  split.num_shards = mesh.size(split.axes);
  // A device's shard: the row-major index of its coordinates along the sharded axes, in mesh
  // order (the mesh's own numbering, config/mesh.h).
  split.shard_of_device.resize(static_cast<size_t>(mesh.num_devices()));
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    split.shard_of_device[static_cast<size_t>(d)] = mesh.shard_index(d, split.axes);
  }
  return split;
}

Status BatchSplit::check_batch(int64_t global_batch) const {
  if (global_batch % num_shards == 0) return ok_status();
  return invalid_argument("the global batch of {} sequences cannot be split evenly over the {} data shards of mesh axes "
                          "[{}] (activation_batch); choose per_device_batch_size so that it divides",
                          global_batch, num_shards, fmt::join(axes, ", "));
}

std::pair<int64_t, int64_t> BatchSplit::rows(int64_t global_batch, int64_t device) const {
  KILN_CHECK(device >= 0 && device < num_devices()) << "device " << device << " of " << num_devices();
  KILN_CHECK(global_batch % num_shards == 0) << global_batch << " rows over " << num_shards << " shards";
  const int64_t count = global_batch / num_shards;
  return {shard_of_device[static_cast<size_t>(device)] * count, count};
}

}  // namespace kiln::data
