#include "kiln/checkpoint/shard_layout.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::checkpoint {

int64_t Region::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

config::Mesh single_device_mesh() { return config::Mesh{}; }

Status check_sharding(const std::string& what, const std::vector<int64_t>& dims, const ir::Sharding& sharding,
                      const config::Mesh& mesh) {
  if (sharding.dims.empty()) return ok_status();
  if (sharding.dims.size() != dims.size()) {
    return invalid_argument("tensor {}: sharding {} has {} dimensions, the tensor {}", what, sharding.to_string(),
                            sharding.dims.size(), ir::dims_to_string(dims));
  }
  std::set<std::string> used;
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t pieces = 1;
    for (const std::string& axis : sharding.dims[d]) {
      if (mesh.axis_index(axis) < 0) {
        return invalid_argument("tensor {}: sharding {} names mesh axis {}, which the mesh ({}) does not have", what,
                                sharding.to_string(), axis, fmt::format("{}", fmt::join(mesh.axes(), ", ")));
      }
      if (!used.insert(axis).second) {
        return invalid_argument("tensor {}: sharding {} uses mesh axis {} twice", what, sharding.to_string(), axis);
      }
      pieces *= mesh.size(axis);
    }
    if (dims[d] % pieces != 0) {
      return invalid_argument("tensor {}: dimension {} of {} is not divisible into the {} pieces of sharding {} on {}",
                              what, d, ir::dims_to_string(dims), pieces, sharding.to_string(), mesh.to_string());
    }
  }
  return ok_status();
}

Region shard_region(const std::vector<int64_t>& dims, const ir::Sharding& sharding, const config::Mesh& mesh,
                    int64_t device) {
  Region r{std::vector<int64_t>(dims.size(), 0), dims};
  if (sharding.dims.empty()) return r;
  for (size_t d = 0; d < dims.size(); ++d) {
    // The piece this device holds: row-major over the dimension's axes (config/mesh.h).
    r.dims[d] = dims[d] / mesh.size(sharding.dims[d]);
    r.offset[d] = mesh.shard_index(device, sharding.dims[d]) * r.dims[d];
  }
  return r;
}

std::vector<int64_t> shard_owners(const std::vector<int64_t>& dims, const ir::Sharding& sharding,
                                  const config::Mesh& mesh) {
  std::map<std::vector<int64_t>, int64_t> first;  // region offset -> lowest device
  std::vector<int64_t> owners;
  for (int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
    if (first.emplace(shard_region(dims, sharding, mesh, dev).offset, dev).second) owners.push_back(dev);
  }
  return owners;
}

int64_t copy_overlap(const std::string& src, const Region& s, std::string& dst, const Region& t, int elem_size) {
  const size_t rank = s.dims.size();
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(s.offset[d], t.offset[d]);
    hi[d] = std::min(s.offset[d] + s.dims[d], t.offset[d] + t.dims[d]);
    if (hi[d] <= lo[d]) return 0;
  }
  if (rank == 0) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(elem_size));
    return 1;
  }
  // Row-major strides (in elements) of both regions.
  std::vector<int64_t> ss(rank, 1), ts(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    ss[d] = ss[d + 1] * s.dims[d + 1];
    ts[d] = ts[d + 1] * t.dims[d + 1];
  }
  // Walk the overlap one innermost run at a time.
  const int64_t run = hi[rank - 1] - lo[rank - 1];
  std::vector<int64_t> idx(lo);
  int64_t copied = 0;
  for (;;) {
    int64_t so = 0, to = 0;
    for (size_t d = 0; d < rank; ++d) {
      so += (idx[d] - s.offset[d]) * ss[d];
      to += (idx[d] - t.offset[d]) * ts[d];
    }
    std::memcpy(dst.data() + to * elem_size, src.data() + so * elem_size, static_cast<size_t>(run * elem_size));
    copied += run;
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return copied;
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
  }
}

}  // namespace kiln::checkpoint
