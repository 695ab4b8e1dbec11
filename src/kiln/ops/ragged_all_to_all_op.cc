// Ragged all-to-all: the token exchange of expert parallelism (MaxText's
// jax.lax.ragged_all_to_all). Dimension 0 lists the members of exchange groups of
// `group_size` G; each member's rows are sorted by destination, and `sizes` says how many
// rows go to each destination (tokens per expert shard, data in a static buffer).
//
//   ragged_all_to_all(x [P, rows, F..], sizes s32[P, G]), reverse=0, rows, slot, group_size
//     -> [P, G*slot, F..]  dispatch: member s's block for destination d lands in d's slot s
//   ragged_all_to_all(x [P, G*slot, F..], sizes s32[P, G]), reverse=1, rows, slot, group_size
//     -> [P, rows, F..]    return: slot s of d goes back to where member s's block for d was
//
// Blocks are cut as ragged_all_to_all.h says (at `rows`, and at `slot`: slot = rows is the
// worst case, every row to one destination; a capacity makes it smaller and drops the
// excess); everything not written is zero. The return is the dispatch's transpose (the
// same rows, moved back), so each is the other's gradient; sizes get none.
//
// Two forms with one meaning. Without `mesh_axes` the op is global: P is a multiple of G
// and members q*G .. q*G+G-1 form group q (the reference of a whole program). With
// `mesh_axes` (emitted by the SPMD partitioner) the group members are the devices named by
// those axes and each device holds its own entries of dimension 0: entry l of every member
// exchanges with entry l of the others, through Collectives::ragged_all_to_all (collectives.h).
// The return learns the block sizes it sends back from the receivers first (an all-to-all
// of one count per pair: "counts exchanged first").
#include <cstring>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ops/collectives.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/op_helpers.h"
#include "kiln/ops/ragged_all_to_all.h"

namespace kiln::ops {
namespace {

using Ints = std::vector<int64_t>;

bool is_reverse(const Instr& instr) { return instr.attrs().get_int("reverse") != 0; }
bool is_global(const ir::Attrs& attrs) { return !attrs.has("mesh_axes"); }

Result<Shape> infer_ragged(const InferContext& c) {
  const Shape &x = c.operands[0], &sizes = c.operands[1];
  KILN_RETURN_IF_ERROR(internal::check_array("ragged_all_to_all", x));
  KILN_RETURN_IF_ERROR(internal::check_array("ragged_all_to_all", sizes));
  const int64_t g = c.attrs.get_int("group_size"), rows = c.attrs.get_int("rows"), slot = c.attrs.get_int("slot");
  const int64_t reverse = c.attrs.get_int("reverse");
  if (g < 1 || rows < 0 || slot < 0 || (reverse != 0 && reverse != 1)) {
    return invalid_argument("ragged_all_to_all: group_size={} must be >= 1, rows={} and slot={} >= 0, reverse={} 0 or 1",
                            g, rows, slot, reverse);
  }
  if (x.rank() < 2) return invalid_argument("ragged_all_to_all: x must be [P, rows, ...], got {}", x.to_string());
  if (sizes.dtype() != DType::kS32 || sizes.rank() != 2 || sizes.dim(0) != x.dim(0) || sizes.dim(1) != g) {
    return invalid_argument("ragged_all_to_all: sizes must be s32[{}, {}] (entries, group_size), got {}", x.dim(0), g,
                            sizes.to_string());
  }
  if (is_global(c.attrs) && x.dim(0) % g != 0) {
    return invalid_argument("ragged_all_to_all: {} entries of {} do not form groups of {}", x.dim(0), x.to_string(), g);
  }
  const int64_t in_rows = reverse ? g * slot : rows;
  if (x.dim(1) != in_rows) {
    return invalid_argument("ragged_all_to_all: x {} must have {} rows ({})", x.to_string(), in_rows,
                            reverse ? "group_size * slot" : "rows");
  }
  Ints dims = x.dims();
  dims[1] = reverse ? rows : g * slot;
  return x.with_dims(dims);
}

struct Geometry {
  int64_t entries, g, rows, slot, row;  // row: elements per row (product of dims >= 2)
  bool reverse;
  int64_t in_rows() const { return reverse ? g * slot : rows; }
  int64_t out_rows() const { return reverse ? rows : g * slot; }
};

Geometry geometry(const Instr& instr, int64_t g) {
  const Shape& x = instr.operand(0)->shape();
  Geometry geo{x.dim(0), g, instr.attrs().get_int("rows"), instr.attrs().get_int("slot"), 1, is_reverse(instr)};
  for (int d = 2; d < x.rank(); ++d) geo.row *= x.dim(d);
  return geo;
}

// Groups of `g` consecutive entries, all local (the global form; or a one-member group).
std::vector<double> exchange_local(const Geometry& geo, const std::vector<double>& x, const std::vector<double>& sizes) {
  std::vector<double> out(geo.entries * geo.out_rows() * geo.row, 0.0);
  for (int64_t p = 0; p < geo.entries; ++p) {
    const int64_t q = p / geo.g, s = p % geo.g;
    RaggedPlan plan = ragged_plan(sizes.data() + p * geo.g, geo.g, geo.rows, geo.slot);
    for (int64_t d = 0; d < geo.g; ++d) {
      const int64_t peer = q * geo.g + d;
      for (int64_t r = 0; r < plan.count[d]; ++r) {
        // (source entry p, row offset + r) <-> (entry peer, row s * slot + r)
        const int64_t a = (p * geo.rows + plan.offset[d] + r) * geo.row;
        const int64_t b = (peer * geo.g * geo.slot + s * geo.slot + r) * geo.row;
        if (geo.reverse) {
          std::copy(x.begin() + b, x.begin() + b + geo.row, out.begin() + a);
        } else {
          std::copy(x.begin() + a, x.begin() + a + geo.row, out.begin() + b);
        }
      }
    }
  }
  return out;
}

ir::Literal eval_ragged(const Instr& instr, std::span<const ir::Literal* const> args) {
  const std::vector<double>& x = args[0]->values();
  const std::vector<double>& sizes = args[1]->values();
  if (is_global(instr.attrs())) {
    return ir::Literal(instr.shape(), exchange_local(geometry(instr, instr.attrs().get_int("group_size")), x, sizes));
  }
  CollectiveGroup group = collective_group(instr);
  const int64_t g = static_cast<int64_t>(group.members.size());
  const Geometry geo = geometry(instr, g);
  if (g == 1) return ir::Literal(instr.shape(), exchange_local(geo, x, sizes));
  Collectives& c = *current_device().collectives;
  const size_t row_bytes = geo.row * sizeof(double);
  std::vector<double> out(geo.entries * geo.out_rows() * geo.row, 0.0);
  for (int64_t l = 0; l < geo.entries; ++l) {
    RaggedPlan plan = ragged_plan(sizes.data() + l * g, g, geo.rows, geo.slot);
    std::vector<size_t> send_off(g), send_bytes(g), recv_off(g), recv_bytes(g);
    if (!geo.reverse) {
      for (int64_t j = 0; j < g; ++j) {
        send_off[j] = plan.offset[j] * row_bytes;
        send_bytes[j] = plan.count[j] * row_bytes;
        recv_off[j] = j * geo.slot * row_bytes;
      }
    } else {
      // What each member sent me is what I send back: learn those counts first.
      std::vector<int64_t> mine(plan.count), theirs(g);
      wait_for(c.all_to_all(group.members, mine.data(), theirs.data(), sizeof(int64_t)), instr);
      for (int64_t j = 0; j < g; ++j) {
        send_off[j] = j * geo.slot * row_bytes;
        send_bytes[j] = theirs[j] * row_bytes;
        recv_off[j] = plan.offset[j] * row_bytes;
      }
    }
    const double* in = x.data() + l * geo.in_rows() * geo.row;
    double* to = out.data() + l * geo.out_rows() * geo.row;
    wait_for(c.ragged_all_to_all(group.members, in, send_off, send_bytes, to, recv_off, &recv_bytes), instr);
  }
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_ragged(VjpContext& c) {
  ir::Attrs attrs = c.instr->attrs();
  attrs.set("reverse", int64_t{is_reverse(*c.instr) ? 0 : 1});
  return {c.b.emit(Opcode::kRaggedAllToAll, {c.dout(), c.operand(1)}, attrs), nullptr};
}

// Rows move between entries of dimension 0; the row dims (2..) are independent.
std::vector<std::vector<int>> ragged_dim_map(const Instr& instr) {
  std::vector<int> x(instr.operand(0)->shape().rank(), -1);
  for (size_t d = 2; d < x.size(); ++d) x[d] = static_cast<int>(d);
  return {x, {-1, -1}};
}

OpExample example(std::string_view x, std::string_view result, std::string_view attrs) {
  return OpExample{fmt::format("module @ex\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n"
                               "  %sizes = s32[4,2] parameter(), index=1\n"
                               "  ROOT %r = {} ragged_all_to_all(%x, %sizes), {}\n}}\n",
                               x, result, attrs),
                   {{-2, 2}, {-1, 3}}};
}

}  // namespace

void register_ragged_all_to_all_op(OpTable& table) {
  OpDef d;
  d.opcode = Opcode::kRaggedAllToAll;
  d.min_operands = d.max_operands = 2;
  d.device_dependent = true;
  d.attrs = {{"group_size", AttrKind::kInt},
             {"rows", AttrKind::kInt},
             {"slot", AttrKind::kInt},
             {"reverse", AttrKind::kInt},
             {"mesh_axes", AttrKind::kString, /*required=*/false}};
  d.infer = infer_ragged;
  d.eval = eval_ragged;
  d.vjp = vjp_ragged;
  d.dim_map = ragged_dim_map;
  d.cost = internal::memory_cost;
  // Global form, two groups of two; sizes in [-1, 3) exercise empty, cut and negative blocks.
  d.examples = {example("f32[4,3,2]", "f32[4,6,2]", "group_size=2, rows=3, slot=3, reverse=0"),
                example("f32[4,3,2]", "f32[4,4,2]", "group_size=2, rows=3, slot=2, reverse=0"),
                example("f32[4,4,2]", "f32[4,3,2]", "group_size=2, rows=3, slot=2, reverse=1")};
  table.add(std::move(d));
}

}  // namespace kiln::ops
