#include "kiln/config/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

int64_t Mesh::size(std::string_view axis) const {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] == axis) return ici[i] * dcn[i];
  }
  return 1;
}

std::vector<int64_t> Mesh::shape() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < axes.size(); ++i) out.push_back(ici[i] * dcn[i]);
  return out;
}

int64_t Mesh::num_devices() const {
  int64_t n = 1;
  for (size_t i = 0; i < axes.size(); ++i) n *= ici[i] * dcn[i];
  return n;
}

std::string Mesh::to_string() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (ici[i] * dcn[i] > 1) parts.push_back(fmt::format("{}={}", axes[i], ici[i] * dcn[i]));
  }
  return parts.empty() ? std::string("1 device") : fmt::format("{}", fmt::join(parts, " "));
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
  Mesh mesh{axes, ici, dcn};
  std::string per_slice = num_slices == 1
                              ? plural(devices_per_slice, "device")
                              : fmt::format("{} per slice", plural(devices_per_slice, "device"));
  KILN_RETURN_IF_ERROR(fill_level(axes, mesh.ici, "ici", devices_per_slice, per_slice, device_note));
  KILN_RETURN_IF_ERROR(fill_level(axes, mesh.dcn, "dcn", num_slices, plural(num_slices, "slice"),
                                  fmt::format("num_slices={}", num_slices)));
  return mesh;
}

}  // namespace kiln::config
