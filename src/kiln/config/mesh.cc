#include "kiln/config/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"

namespace kiln::config {
namespace {

std::string plural(int64_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// Fills one level (ici or dcn). `count` is what the sizes must multiply to.
Status fill_level(const std::vector<std::string>& axes, std::vector<int64_t>& sizes,
                  std::string_view level, int64_t count, const std::string& count_text,
                  std::string_view device_note) {
  int fill_index = -1;
  int64_t product = 1;
  std::vector<std::string> explicit_sizes;  // "ici_fsdp_parallelism=3" for sizes > 1
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string key = parallelism_key(axes[i], level);
    if (sizes[i] == -1) {
      if (fill_index >= 0) {
        return invalid_argument(
            "{}=-1 and {}=-1: at most one {}_* parallelism may be -1 (the axis that fills the "
            "rest)",
            parallelism_key(axes[fill_index], level), key, level);
      }
      fill_index = static_cast<int>(i);
      continue;
    }
    if (sizes[i] < 1) {
      return invalid_argument("{}={}: expected a positive size or -1 (fill the rest)", key,
                              sizes[i]);
    }
    product *= sizes[i];
    if (sizes[i] > 1) explicit_sizes.push_back(fmt::format("{}={}", key, sizes[i]));
  }
  std::string others = explicit_sizes.empty() ? std::string("all 1")
                                              : fmt::format("{}", fmt::join(explicit_sizes, " × "));
  std::string note = device_note.empty() ? std::string() : fmt::format(" ({})", device_note);
  if (fill_index >= 0) {
    if (count % product != 0) {
      return invalid_argument(
          "mesh: cannot fill {}=-1: the other {}_* sizes multiply to {} ({}), which does not "
          "divide {}{}",
          parallelism_key(axes[fill_index], level), level, product, others, count_text, note);
    }
    sizes[fill_index] = count / product;
    return ok_status();
  }
  if (product != count) {
    return invalid_argument(
        "mesh: the {}_* parallelism sizes multiply to {} ({}), but the mesh needs {}{}; make "
        "them multiply to {} or set one to -1",
        level, product, others, count_text, note, count);
  }
  return ok_status();
}

}  // namespace

Mesh::Mesh(std::vector<std::string> axes, std::vector<int64_t> sizes)
    : Mesh(std::move(axes), std::move(sizes), {}) {}

Mesh::Mesh(std::vector<std::string> axes, std::vector<int64_t> ici, std::vector<int64_t> dcn)
    : axes_(std::move(axes)), ici_(std::move(ici)), dcn_(std::move(dcn)), strides_(axes_.size(), 1) {
  if (dcn_.empty()) dcn_.assign(axes_.size(), 1);
  KILN_CHECK_EQ(axes_.size(), ici_.size());
  KILN_CHECK_EQ(axes_.size(), dcn_.size());
  for (size_t i = 0; i < axes_.size(); ++i) {
    KILN_CHECK(ici_[i] >= 1 && dcn_[i] >= 1) << axes_[i] << ": ici " << ici_[i] << ", dcn " << dcn_[i];
    sizes_.push_back(ici_[i] * dcn_[i]);
  }
  for (int i = static_cast<int>(axes_.size()) - 1; i >= 0; --i) {
    strides_[i] = num_devices_;
    num_devices_ *= sizes_[i];
  }
}

int Mesh::axis_index(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i] == axis) return static_cast<int>(i);
  }
  return -1;
}

int64_t Mesh::size(std::string_view axis) const {
  int i = axis_index(axis);
  return i < 0 ? 1 : sizes_[i];
}

int64_t Mesh::size(const std::vector<std::string>& axes) const {
  int64_t n = 1;
  for (const std::string& a : axes) n *= size(a);
  return n;
}

int64_t Mesh::coordinate(int64_t device, std::string_view axis) const {
  int i = axis_index(axis);
  return i < 0 ? 0 : (device / strides_[i]) % sizes_[i];
}

int64_t Mesh::shard_index(int64_t device, const std::vector<std::string>& axes) const {
  int64_t index = 0;
  for (const std::string& a : axes) index = index * size(a) + coordinate(device, a);
  return index;
}

std::vector<int64_t> Mesh::group(int64_t device, const std::vector<std::string>& axes) const {
  // Start from the device with coordinate 0 along every axis of the group, then enumerate
  // the group's coordinates row-major (outermost axis of `axes` first).
  int64_t base = device;
  for (const std::string& a : axes) {
    int i = axis_index(a);
    if (i >= 0) base -= coordinate(device, a) * strides_[i];
  }
  std::vector<int64_t> members = {base};
  for (const std::string& a : axes) {
    int i = axis_index(a);
    if (i < 0) continue;
    std::vector<int64_t> next;
    for (int64_t m : members) {
      for (int64_t c = 0; c < sizes_[i]; ++c) next.push_back(m + c * strides_[i]);
    }
    members = std::move(next);
  }
  return members;
}

std::string Mesh::to_string() const {
  std::string out;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (sizes_[i] == 1) continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", axes_[i], sizes_[i]);
  }
  return out.empty() ? "1 device" : out;
}


const std::vector<std::string>& known_mesh_axes() {
  static const std::vector<std::string> kAxes = {
      "data", "stage", "fsdp", "fsdp_transpose", "sequence",
      "context", "tensor", "tensor_sequence", "expert"};
  return kAxes;
}

std::string parallelism_key(std::string_view axis, std::string_view level) {
  return fmt::format("{}_{}_parallelism", level, axis == "stage" ? "pipeline" : axis);
}

Result<Mesh> fill_mesh(const std::vector<std::string>& axes, const std::vector<int64_t>& ici,
                       const std::vector<int64_t>& dcn, int64_t devices_per_slice,
                       int64_t num_slices, std::string_view device_note) {
  std::vector<int64_t> ici_sizes = ici;
  std::vector<int64_t> dcn_sizes = dcn;
  std::string per_slice = num_slices == 1
                              ? plural(devices_per_slice, "device")
                              : fmt::format("{} per slice", plural(devices_per_slice, "device"));
  KILN_RETURN_IF_ERROR(fill_level(axes, ici_sizes, "ici", devices_per_slice, per_slice, device_note));
  KILN_RETURN_IF_ERROR(fill_level(axes, dcn_sizes, "dcn", num_slices, plural(num_slices, "slice"),
                                  fmt::format("num_slices={}", num_slices)));
  return Mesh(axes, std::move(ici_sizes), std::move(dcn_sizes));
}

}  // namespace kiln::config
