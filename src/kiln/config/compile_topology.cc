#include "kiln/config/compile_topology.h"

#include <charconv>
#include <map>

#include <fmt/format.h>

namespace kiln::config {

namespace {

// Chip grids of the slices Google sells. v5e and v6e: a 2D torus of chips. v4 and v5p: a 3D
// torus, named by TensorCores (two per chip).
const std::map<int64_t, std::string>& grid_2d() {
  static const std::map<int64_t, std::string> kGrids = {{1, "1x1"},   {4, "2x2"},   {8, "2x4"},    {16, "4x4"},
                                                        {32, "4x8"},  {64, "8x8"},  {128, "8x16"}, {256, "16x16"}};
  return kGrids;
}
const std::map<int64_t, std::string>& grid_3d() {
  static const std::map<int64_t, std::string> kGrids = {
      {4, "2x2x1"},   {8, "2x2x2"},    {16, "2x2x4"},    {32, "2x4x4"},    {64, "4x4x4"},
      {128, "4x4x8"}, {256, "4x8x8"},  {512, "8x8x8"},   {1024, "8x8x16"}, {2048, "8x16x16"}};
  return kGrids;
}

struct Family {
  std::string_view prefix, platform, target;
  int tensorcores_per_device;  // 2: the name counts TensorCores (v4, v5p), 1: chips or GPUs
  bool three_d;
};

constexpr Family kFamilies[] = {
    {"v6e", "tpu", "tpu-v6e", 1, false}, {"v5e", "tpu", "tpu-v5e", 1, false}, {"v5p", "tpu", "tpu-v5p", 2, true},
    {"h100", "cuda", "h100", 1, false},  {"h200", "cuda", "h200", 1, false},  {"b200", "cuda", "b200", 1, false},
};

}  // namespace

std::string compile_topology_choices() {
  return "v6e-N or v5e-N (N chips: 1, 4, 8, 16, ... 256), v5p-N (N TensorCores, 2 per chip: 8, 16, ... 4096), "
         "h100-N, h200-N or b200-N (N GPUs: 1 to 8, or whole nodes of 8)";
}

Result<CompileTopology> parse_compile_topology(std::string_view name, int64_t num_slices) {
  auto refuse = [&] {
    return invalid_argument("compile_topology={}: unknown topology; accepted: {}", name, compile_topology_choices());
  };
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return refuse();
  const std::string_view prefix = name.substr(0, dash), count_text = name.substr(dash + 1);
  int64_t count = 0;
  auto [end, ec] = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
  if (ec != std::errc() || end != count_text.data() + count_text.size() || count < 1) return refuse();
  if (num_slices < 1) {
    return invalid_argument("compile_topology_num_slices={}: expected 1 or more slices of {}", num_slices, name);
  }
  for (const Family& f : kFamilies) {
    if (prefix != f.prefix) continue;
    CompileTopology t;
    t.name = std::string(name);
    t.platform = std::string(f.platform);
    t.target = std::string(f.target);
    t.num_slices = num_slices;
    if (f.platform == "cuda") {
      // A GPU node holds 8 (HGX); a slice is 1 to 8 GPUs of one node or whole nodes.
      if (count > 8 && count % 8 != 0) return refuse();
      t.devices = count;
      return t;
    }
    if (count % f.tensorcores_per_device != 0) return refuse();
    const int64_t chips = count / f.tensorcores_per_device;
    const auto& grids = f.three_d ? grid_3d() : grid_2d();
    auto grid = grids.find(chips);
    if (grid == grids.end()) return refuse();
    t.devices = chips;
    t.tpu_topology = fmt::format("{}:{}", f.prefix, grid->second);
    return t;
  }
  return refuse();
}

}  // namespace kiln::config
