#include "kiln/backend/cpu/codegen/index_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"

namespace kiln::backend::cpu {

using ir::Instr;
using ir::Opcode;

IndexMap mapped_read_map(const Instr& read) {
  const auto& from = read.operand(0)->shape().dims();
  // The operand's own row-major strides.
  std::vector<int64_t> own(from.size(), 1);
  for (int d = static_cast<int>(from.size()) - 2; d >= 0; --d) own[d] = own[d + 1] * from[d + 1];
  IndexMap map{std::vector<int64_t>(read.shape().rank(), 0)};
  if (read.opcode() == Opcode::kTranspose) {
    // Result dim d is operand dim perm[d].
    const auto& perm = read.attrs().get_ints("perm");
    for (size_t d = 0; d < perm.size(); ++d) map.strides[d] = own[perm[d]];
  } else if (read.opcode() == Opcode::kSlice) {
    // Result index i_d is operand index start[d] + i_d * step[d].
    const auto& start = read.attrs().get_ints("start");
    const std::vector<int64_t> steps = read.attrs().get_ints_or("strides", std::vector<int64_t>(from.size(), 1));
    for (size_t d = 0; d < from.size(); ++d) {
      map.strides[d] = own[d] * steps[d];
      map.offset += start[d] * own[d];
    }
  } else if (read.opcode() == Opcode::kPad) {
    // Operand index k lands at result index low[d] + k: read at i_d - low[d] inside
    // [low[d], low[d] + size[d]).
    const auto& low = read.attrs().get_ints("low");
    map.strides = own;
    map.window_lo = low;
    map.window_hi.resize(from.size());
    for (size_t d = 0; d < from.size(); ++d) {
      map.offset -= low[d] * own[d];
      map.window_hi[d] = low[d] + from[d];
    }
  } else {
    KILN_CHECK(read.opcode() == Opcode::kBroadcast) << "not a mapped read: " << read.to_string();
    // Operand dim k is result dim dims[k]; a size-1 operand dim is expanded (stride 0).
    const auto& dims = read.attrs().get_ints("dims");
    for (size_t k = 0; k < dims.size(); ++k) map.strides[dims[k]] = from[k] == 1 ? 0 : own[k];
  }
  return map;
}

IndexMap iota_map(const Instr& iota) {
  KILN_CHECK(iota.opcode() == Opcode::kIota) << "not an iota: " << iota.to_string();
  IndexMap map{std::vector<int64_t>(iota.shape().rank(), 0)};
  map.strides.at(static_cast<size_t>(iota.attrs().get_int("dim"))) = 1;
  return map;
}

std::string row_loop_kernel(const std::string& name, const std::string& hoisted, const std::string& pointers,
                            const std::string& loop, const std::string& stores,
                            const std::vector<int64_t>& loop_dims, const std::vector<IndexMap>& maps) {
  // Size-1 dims index nothing: dropped, with their strides (a window that excludes their one
  // index excludes every element).
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(maps.size()), lo(maps.size()), hi(maps.size());
  std::vector<bool> never(maps.size(), false);
  for (size_t d = 0; d < loop_dims.size(); ++d) {
    if (loop_dims[d] == 1) {
      for (size_t n = 0; n < maps.size(); ++n) {
        if (maps[n].has_window() && !(maps[n].window_lo.at(d) <= 0 && 0 < maps[n].window_hi.at(d))) never[n] = true;
      }
      continue;
    }
    dims.push_back(loop_dims[d]);
    for (size_t n = 0; n < maps.size(); ++n) {
      strides[n].push_back(maps[n].strides.at(d));
      lo[n].push_back(maps[n].has_window() ? maps[n].window_lo.at(d) : 0);
      hi[n].push_back(maps[n].has_window() ? maps[n].window_hi.at(d) : loop_dims[d]);
    }
  }
  const int rank = static_cast<int>(dims.size());
  auto bounded = [&](size_t n, int d) { return lo[n][d] > 0 || hi[n][d] < dims[d]; };
  // The inner axis: trailing dims that every map walks as one (the output always does), of
  // which only the first may be bounded by a window (its test is then one range of j).
  int split = rank == 0 ? 0 : rank - 1;
  while (split > 0) {
    bool joins = true;
    for (size_t n = 0; n < maps.size(); ++n) {
      joins = joins && strides[n][split - 1] == strides[n][split] * dims[split] && !bounded(n, split);
    }
    if (!joins) break;
    --split;
  }
  int64_t rows = 1, inner = 1;
  for (int d = 0; d < split; ++d) rows *= dims[d];
  for (int d = split; d < rank; ++d) inner *= dims[d];
  // Per row: its index along each row dim, then each map's offset at j = 0.
  std::string row_index;
  if (split > 0) {
    row_index += "    int64_t rest = row;\n";
    for (int d = split - 1; d >= 0; --d) {
      row_index += d > 0 ? fmt::format("    const int64_t i{0} = rest % {1};\n    rest /= {1};\n", d, dims[d])
                         : fmt::format("    const int64_t i{} = rest;\n", d);
    }
    row_index += "    (void)rest;\n";
  }
  std::string bases, offsets;
  for (size_t n = 0; n < maps.size(); ++n) {
    std::string base = std::to_string(maps[n].offset);
    for (int d = 0; d < split; ++d) {
      if (strides[n][d] != 0) base += fmt::format(" + i{} * {}", d, strides[n][d]);
    }
    bases += fmt::format("    const int64_t base{} = {};\n", n, base);
    const int64_t step = rank == 0 ? 0 : strides[n][rank - 1];
    offsets += fmt::format("      const int64_t map{0} = base{0} + j * {1};\n", n, step);
    if (!maps[n].has_window()) continue;
    // The window's test: per row over the bounded row dims, then one range of j.
    std::string row_test = never[n] ? "false" : "true";
    for (int d = 0; d < split && !never[n]; ++d) {
      if (bounded(n, d)) row_test += fmt::format(" && i{0} >= {1} && i{0} < {2}", d, lo[n][d], hi[n][d]);
    }
    bases += fmt::format("    const bool rowin{} = {};\n", n, row_test);
    std::string test = fmt::format("rowin{}", n);
    if (split < rank && bounded(n, split)) {
      int64_t after = 1;  // the inner axis's elements per index of its first dim
      for (int d = split + 1; d < rank; ++d) after *= dims[d];
      test += fmt::format(" && j >= {} && j < {}", lo[n][split] * after, hi[n][split] * after);
    }
    offsets += fmt::format("      const bool win{} = {};\n", n, test);
  }
  // The statements, indented two more spaces for the nest.
  auto indent = [](const std::string& text) {
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      out += "  " + text.substr(pos, nl - pos + 1);
      pos = nl + 1;
    }
    return out;
  };
  return fmt::format(
      "extern \"C\" void {name}(const void* const* in, void* out, int64_t count) {{\n"
      "{hoisted}"
      "{pointers}"
      "  // Loop plan: {rows} rows x {inner} inner (loop dims [{dims}], size-1 dims dropped).\n"
      "  constexpr int64_t rows = {rows}, inner = {inner};\n"
      "#pragma omp parallel for schedule(static) if (count > 16384)\n"
      "  for (int64_t row = 0; row < rows; ++row) {{\n"
      "{row_index}"
      "{bases}"
      "#pragma omp simd\n"
      "    for (int64_t j = 0; j < inner; ++j) {{\n"
      "      const int64_t idx = row * inner + j;\n"
      "{offsets}"
      "{loop}"
      "{stores}"
      "    }}\n"
      "  }}\n"
      "}}\n",
      fmt::arg("name", name), fmt::arg("hoisted", hoisted), fmt::arg("pointers", pointers), fmt::arg("rows", rows),
      fmt::arg("inner", inner), fmt::arg("dims", fmt::join(loop_dims, ",")), fmt::arg("row_index", row_index),
      fmt::arg("bases", bases), fmt::arg("offsets", offsets), fmt::arg("loop", indent(loop)),
      fmt::arg("stores", indent(stores)));
}

}  // namespace kiln::backend::cpu
