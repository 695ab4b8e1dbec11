// The device mesh as the partitioner and the runtime see it: named axes with sizes (ici ×
// dcn folded together), devices numbered row-major over the axes in mesh order. A device's
// coordinate along an axis, and the devices that share all coordinates but some axes (a
// collective's group), follow from that numbering alone, so every device of an SPMD program
// computes the same groups without talking to the others.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"

namespace kiln::spmd {

class Mesh {
 public:
  Mesh() = default;  // one device, no axes
  Mesh(std::vector<std::string> axes, std::vector<int64_t> sizes);
  static Mesh from_config(const config::Mesh& mesh);

  const std::vector<std::string>& axes() const { return axes_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t num_devices() const { return num_devices_; }
  // Index of `axis` in axes(), or -1.
  int axis_index(std::string_view axis) const;
  // Size of `axis` (1 for an axis that is not in the mesh).
  int64_t size(std::string_view axis) const;
  // Product of the sizes of `axes`.
  int64_t size(const std::vector<std::string>& axes) const;

  int64_t coordinate(int64_t device, std::string_view axis) const;
  // The shard a device holds of a dimension split over `axes` (outermost first):
  // row-major over those axes' coordinates. Also the device's rank in group(axes).
  int64_t shard_index(int64_t device, const std::vector<std::string>& axes) const;
  // The devices that differ from `device` only along `axes`, ordered by shard_index.
  std::vector<int64_t> group(int64_t device, const std::vector<std::string>& axes) const;

  // Axes in mesh order with size > 1, e.g. "fsdp=2 expert=2" ("1 device" when none).
  std::string to_string() const;

 private:
  std::vector<std::string> axes_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;  // row-major strides of the device numbering
  int64_t num_devices_ = 1;
};

}  // namespace kiln::spmd
