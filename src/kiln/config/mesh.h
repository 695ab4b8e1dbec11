// The device mesh: named axes with sizes, described by the ici_*/dcn_* parallelism keys, with
// MaxText's axis names and its "-1 fills the rest" rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::config {

// Devices are numbered row-major over the axes in mesh order, each axis's size being its
// ici × dcn. A device's coordinate along an axis, and the devices that share all coordinates
// but some axes (a collective's group), follow from that numbering alone, so every device of
// an SPMD program computes the same groups without talking to the others. The partitioner,
// the collective ops, the runtime and checkpoints all use this one type.
class Mesh {
 public:
  Mesh() = default;  // one device, no axes
  // Sizes within one slice (ici), one slice (every dcn size 1).
  Mesh(std::vector<std::string> axes, std::vector<int64_t> sizes);
  // Per axis its size within a slice (ici) and across slices (dcn); all sizes >= 1.
  Mesh(std::vector<std::string> axes, std::vector<int64_t> ici, std::vector<int64_t> dcn);

  const std::vector<std::string>& axes() const { return axes_; }  // in mesh_axes order
  const std::vector<int64_t>& ici() const { return ici_; }
  const std::vector<int64_t>& dcn() const { return dcn_; }
  // ici × dcn per axis, in axes() order.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t num_devices() const { return num_devices_; }
  // Index of `axis` in axes(), or -1.
  int axis_index(std::string_view axis) const;
  // ici × dcn of `axis`; 1 for an axis name that is not in the mesh.
  int64_t size(std::string_view axis) const;
  // Product of the sizes of `axes`.
  int64_t size(const std::vector<std::string>& axes) const;

  int64_t coordinate(int64_t device, std::string_view axis) const;
  // The shard a device holds of a dimension split over `axes` (outermost first):
  // row-major over those axes' coordinates. Also the device's rank in group(axes).
  int64_t shard_index(int64_t device, const std::vector<std::string>& axes) const;
  // The devices that differ from `device` only along `axes`, ordered by shard_index.
  std::vector<int64_t> group(int64_t device, const std::vector<std::string>& axes) const;

  // "fsdp=2 expert=2" (axes of size 1 left out; "1 device" when all are 1).
  std::string to_string() const;

 private:
  std::vector<std::string> axes_;
  std::vector<int64_t> ici_;
  std::vector<int64_t> dcn_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;  // row-major strides of the device numbering
  int64_t num_devices_ = 1;
};

// The mesh axes Kiln knows, in MaxText's order (MT-2602 naming, with `sequence`).
const std::vector<std::string>& known_mesh_axes();

// The key that sizes `axis` at `level` ("ici" or "dcn"). MaxText names the `stage` axis's
// keys after pipelining: parallelism_key("stage", "ici") == "ici_pipeline_parallelism".
std::string parallelism_key(std::string_view axis, std::string_view level);

// MaxText's fill rule, applied to each level separately: at most one size may be -1 and is
// replaced by count / (product of the others), which must be a whole number; the sizes
// must then multiply to exactly `devices_per_slice` (ici) and `num_slices` (dcn).
// `device_note` explains where the device count came from ("local_devices=4"); it is
// appended to the one-line error messages.
Result<Mesh> fill_mesh(const std::vector<std::string>& axes, const std::vector<int64_t>& ici,
                       const std::vector<int64_t>& dcn, int64_t devices_per_slice,
                       int64_t num_slices, std::string_view device_note);

}  // namespace kiln::config
