// How the partitioner describes one array value on the mesh: for each dimension the mesh
// axes it is split over (outermost first; empty: replicated along it), and the axes over
// which the per-device values are partial sums still to be added up (a contraction or a
// reduction over a split dimension leaves those). A device holds the block of the global
// value given by its shard index along each split dimension (config::Mesh::shard_index).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/shape.h"

namespace kiln::spmd {

using Axes = std::vector<std::string>;

struct Spec {
  std::vector<Axes> dims;
  Axes partial;

  static Spec replicated(int rank) { return Spec{std::vector<Axes>(rank), {}}; }
  static Spec from_ir(const ir::Sharding& sharding) { return Spec{sharding.dims, {}}; }
  ir::Sharding to_ir() const { return ir::Sharding{dims}; }

  int rank() const { return static_cast<int>(dims.size()); }
  bool is_replicated() const;  // no split dimension and nothing partial
  std::set<std::string> used_axes() const;  // split axes and partial axes
  // Devices a value is split over (product of the split axes' sizes).
  int64_t num_shards(const config::Mesh& mesh) const;
  // The per-device block's shape of a value with global shape `global`.
  ir::Shape local_shape(const ir::Shape& global, const config::Mesh& mesh) const;
  bool operator==(const Spec& o) const { return dims == o.dims && partial == o.partial; }
  std::string to_string() const;  // {[fsdp],[]} partial=[data]
};

}  // namespace kiln::spmd
