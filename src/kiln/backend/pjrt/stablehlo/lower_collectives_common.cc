#include "kiln/backend/pjrt/stablehlo/lower_collectives_common.h"

#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/strings.h"

namespace kiln::backend::pjrt {
namespace {

std::vector<std::string> collective_axes(const ir::Instr& instr) {
  std::vector<std::string> axes;
  for (const std::string& a : split(instr.attrs().get_string("mesh_axes"), ',')) {
    if (!trim(a).empty()) axes.emplace_back(trim(a));
  }
  return axes;
}

}  // namespace

Result<std::vector<std::vector<int64_t>>> replica_groups(const ir::Instr& instr, const config::Mesh& mesh) {
  const std::vector<std::string> axes = collective_axes(instr);
  const int64_t want = instr.attrs().get_int("group_size");
  std::vector<std::vector<int64_t>> groups;
  std::set<std::vector<int64_t>> seen;
  for (int64_t device = 0; device < mesh.num_devices(); ++device) {
    std::vector<int64_t> group = mesh.group(device, axes);
    if (static_cast<int64_t>(group.size()) != want) {
      return invalid_argument("group_size={} over mesh_axes={}, but the mesh ({}) makes groups of {}", want,
                              instr.attrs().get_string("mesh_axes"), mesh.to_string(), group.size());
    }
    if (seen.insert(group).second) groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<int64_t> group_ranks(const ir::Instr& instr, const config::Mesh& mesh) {
  const std::vector<std::string> axes = collective_axes(instr);
  std::vector<int64_t> ranks;
  for (int64_t device = 0; device < mesh.num_devices(); ++device) ranks.push_back(mesh.shard_index(device, axes));
  return ranks;
}

std::string replica_groups_property(const std::vector<std::vector<int64_t>>& groups) {
  return "replica_groups = " + i64_dense_2d(groups);
}

std::string dim_list(std::span<const int64_t> dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

Val iota(Writer& w, ir::DType dtype, std::span<const int64_t> dims, int64_t dim) {
  return w.op("stablehlo.iota", {}, tensor_type(dtype, dims), fmt::format("iota_dimension = {} : i64", dim));
}

Val select(Writer& w, const Val& pred, const Val& on_true, const Val& on_false) {
  return w.op("stablehlo.select", {pred, on_true, on_false}, on_true.type);
}

Val transpose(Writer& w, const Val& x, ir::DType dtype, std::span<const int64_t> dims,
              std::span<const int64_t> permutation) {
  std::vector<int64_t> out;
  for (int64_t p : permutation) out.push_back(dims[p]);
  return w.op("stablehlo.transpose", {x}, tensor_type(dtype, out), "permutation = " + i64_array(permutation));
}

// The running sum over the last dimension is a masked reduction over a [lead.., G, G] square
// (G is the group count of one exchange or one expert block: small), exact in integers.
Result<RaggedBounds> ragged_bounds(Writer& w, const Val& sizes, std::span<const int64_t> dims, int64_t rows) {
  using ir::DType;
  const int64_t G = dims.back(), L = static_cast<int64_t>(dims.size()) - 1;
  if (rows > 0 && G > std::numeric_limits<int32_t>::max() / rows) {
    return unimplemented("{} groups of up to {} rows overflow the s32 running sum of the group sizes", G, rows);
  }
  const Val cap = w.splat(DType::kS32, dims, static_cast<double>(rows));
  const Val n = w.op("stablehlo.clamp", {w.splat(DType::kS32, dims, 0), sizes, cap}, sizes.type);
  std::vector<int64_t> square(dims.begin(), dims.end());
  square.push_back(G);  // [lead.., G (block d), G (block j)]
  std::vector<int64_t> lead_and_j;
  for (int64_t i = 0; i < L; ++i) lead_and_j.push_back(i);
  lead_and_j.push_back(L + 1);
  const std::string square_type = tensor_type(DType::kS32, square);
  const Val spread = w.broadcast(n, square_type, lead_and_j);
  const Val upto = w.compare(iota(w, DType::kS32, square, L + 1), iota(w, DType::kS32, square, L), "LE");  // j <= d
  const Val kept = select(w, upto, spread, w.splat(DType::kS32, square, 0));
  const std::vector<int64_t> last = {L + 1};
  const Val cumsum = w.reduce(kept, w.scalar(DType::kS32, 0), last, "stablehlo.add", sizes.type);
  const Val end = w.binary("stablehlo.minimum", cumsum, cap);
  const Val begin = w.binary("stablehlo.minimum", w.binary("stablehlo.subtract", cumsum, n), cap);
  return RaggedBounds{begin, end};
}

}  // namespace kiln::backend::pjrt
