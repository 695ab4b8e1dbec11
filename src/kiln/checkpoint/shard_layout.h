// Where each device's shard of a tensor lies in the global tensor, and copying between
// shards of different layouts (resharding on load).
//
// A tensor's layout is an ir::Sharding (per dimension, the mesh axes it is split over,
// outermost first; none: replicated along that dimension) over a config::Mesh. Devices are
// numbered row-major over the mesh axes in mesh order (the last axis varies fastest), with
// each axis of size ici × dcn. Dimension d split over axes [a, b] is cut into
// size(a) · size(b) equal pieces; a device takes piece coord(a) · size(b) + coord(b).
//
//   fsdp=2 expert=2 (axes [fsdp, expert]); W [E=4, D=6] sharded {[expert], [fsdp]}:
//   device 0 (fsdp 0, expert 0) holds W[0:2, 0:3], device 1 (0, 1) W[2:4, 0:3],
//   device 2 (1, 0) W[0:2, 3:6], device 3 (1, 1) W[2:4, 3:6].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/shape.h"

namespace kiln::checkpoint {

// A box of a tensor: [offset, offset + dims) per dimension.
struct Region {
  std::vector<int64_t> offset, dims;
  bool operator==(const Region& other) const = default;
  int64_t num_elements() const;
};

// A mesh of one device (no axes): the single-device trainer's trivial layout.
config::Mesh single_device_mesh();

// Checks that `sharding` fits `dims` on `mesh`: one entry per dimension (or none at all:
// fully replicated), axes of the mesh, none used twice, each dimension divisible by its
// number of pieces. `what` names the tensor in the error.
Status check_sharding(const std::string& what, const std::vector<int64_t>& dims, const ir::Sharding& sharding,
                      const config::Mesh& mesh);

// The region of the global tensor that `device` holds (sharding already checked).
Region shard_region(const std::vector<int64_t>& dims, const ir::Sharding& sharding, const config::Mesh& mesh,
                    int64_t device);

// The lowest device holding each distinct region: the devices that write the tensor when it
// is saved (a replicated shard is written once).
std::vector<int64_t> shard_owners(const std::vector<int64_t>& dims, const ir::Sharding& sharding,
                                  const config::Mesh& mesh);

// Copies the overlap of `src` (row-major bytes of region src_region) and `dst` (row-major
// bytes of dst_region) from src into dst; elements are `elem_size` bytes. Returns the
// number of elements copied (0 when they do not overlap).
int64_t copy_overlap(const std::string& src, const Region& src_region, std::string& dst, const Region& dst_region,
                     int elem_size);

}  // namespace kiln::checkpoint
