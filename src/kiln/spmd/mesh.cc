#include "kiln/spmd/mesh.h"

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::spmd {

Mesh::Mesh(std::vector<std::string> axes, std::vector<int64_t> sizes)
    : axes_(std::move(axes)), sizes_(std::move(sizes)), strides_(axes_.size(), 1) {
  KILN_CHECK_EQ(axes_.size(), sizes_.size());
  for (int i = static_cast<int>(axes_.size()) - 1; i >= 0; --i) {
    KILN_CHECK_GE(sizes_[i], 1) << axes_[i];
    strides_[i] = num_devices_;
    num_devices_ *= sizes_[i];
  }
}

Mesh Mesh::from_config(const config::Mesh& mesh) { return Mesh(mesh.axes, mesh.shape()); }

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

}  // namespace kiln::spmd
