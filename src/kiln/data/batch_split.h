// The global batch split over data-parallel devices, so that the data order never depends
// on the mesh. The batch dimension is sharded over the mesh axes that the logical axis
// `activation_batch` resolves to (its first logical_axis_rules entry, keeping the axes that
// are in the mesh, in mesh order), as MaxText shards its input batch. A device's data shard
// is its coordinate along those axes (row-major, the first axis outermost); devices that
// differ only along other axes (tensor, ...) get the same rows.
//
//   auto split = make_batch_split(cfg.derived().mesh, cfg.derived().logical_axis_rules);
//   auto [first, count] = split->rows(G, device);   // rows [first, first + count) of the
//                                                    // global batch of G rows
// Devices are numbered row-major over the mesh shape (mesh_axes order, each axis of size
// ici × dcn). Concatenating the rows of shards 0 .. num_shards-1 gives the global batch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"

namespace kiln::data {

struct BatchSplit {
  std::vector<std::string> axes;         // mesh axes the batch is split over, in mesh order
  int64_t num_shards = 1;                // the product of their sizes
  std::vector<int64_t> shard_of_device;  // per device (row-major mesh index)

  int64_t num_devices() const { return static_cast<int64_t>(shard_of_device.size()); }
  // Rows [first, first + count) of a global batch of `global_batch` rows for `device`.
  // global_batch must be a multiple of num_shards (make_batch_split's check_batch).
  std::pair<int64_t, int64_t> rows(int64_t global_batch, int64_t device) const;
  // invalid_argument naming the axes when `global_batch` rows cannot be split evenly.
  Status check_batch(int64_t global_batch) const;
};

BatchSplit make_batch_split(const config::Mesh& mesh, const std::vector<config::LogicalAxisRule>& rules,
                            const std::string& logical_axis = "activation_batch");

}  // namespace kiln::data
