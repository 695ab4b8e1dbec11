// Grouped (ragged) matrix products for mixture-of-experts dispatch, MegaBlox's gmm and tgmm:
//
//   grouped_matmul(x [M, K], w [G, K, N], group_sizes s32 [G]) -> [M, N]
//     rows of x are laid out group after group: group g owns group_sizes[g] consecutive
//     rows starting at sum(group_sizes[:g]); row r of group g is x[r] @ w[g]. Rows past the
//     sum are padding and give zeros. transpose_rhs=1 takes w as [G, N, K] (x[r] @ w[g]^T).
//   grouped_matmul_weight_grad(x [M, K], dy [M, N], group_sizes s32 [G]) -> [G, K, N]
//     per group x_g^T dy_g over the group's rows (zeros for an empty group).
//
// Batched form (expert parallelism: one entry per token shard, each holding the rows it
// received for one block of experts):
//
//   grouped_matmul(x [P, M, K], w [E, K, N], group_sizes s32 [P, Gl]) -> [P, M, N]
//     entry p is a grouped matmul of its own rows over the Gl experts of block p mod (E/Gl):
//     its group g uses w[(p mod (E/Gl)) * Gl + g]. P is a multiple of E/Gl.
//   grouped_matmul_weight_grad(x [P, M, K], dy [P, M, N], group_sizes s32 [P, Gl]),
//     num_groups=E -> [E, K, N]: each entry's x_g^T dy_g added into its block's expert g.
// With the entries split one per device and the experts over the same trailing mesh axes,
// every device holds one entry and its own block (spmd/ragged_exchange.h), so E/Gl = 1
// there and the per-device op is the same op.
//
// The group sizes are data (tokens per expert) in a statically shaped buffer, so one
// compiled program serves every routing. Negative sizes count as 0 and groups are cut at
// row M (a sum larger than M drops the rows that do not exist). Both ops accumulate in
// double in the reference evaluation; like dot_general, both may declare a floating result
// dtype other than the operands' (bf16 x bf16 -> f32, rounded once).
// Gradients (group sizes get none):
//   gmm:  dx = gmm(dy, w, transpose_rhs = !t);  dw = tgmm(x, dy) ([G,K,N]) or tgmm(dy, x) when t
//   tgmm: dx = gmm(dW_out, transpose_rhs=1) applied to dy;  ddy = gmm(x, dW_out)
#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;

// Row ranges [begin, end) of each of `groups` groups, cut to [0, rows).
std::vector<std::pair<int64_t, int64_t>> group_ranges(const double* sizes, int64_t groups, int64_t rows) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t n = std::max<int64_t>(0, static_cast<int64_t>(sizes[g]));
    int64_t begin = std::min(at, rows), end = std::min(at + n, rows);
    out.emplace_back(begin, end);
    at = end;
  }
  return out;
}

bool transpose_rhs(const Instr& instr) { return instr.attrs().get_int_or("transpose_rhs", 0) != 0; }

Status check_operands(std::string_view op, const Shape& a, const Shape& b, const Shape& sizes) {
  KILN_RETURN_IF_ERROR(check_array(op, a));
  KILN_RETURN_IF_ERROR(check_array(op, b));
  KILN_RETURN_IF_ERROR(check_array(op, sizes));
  if (!ir::is_floating(a.dtype()) || a.dtype() != b.dtype()) {
    return invalid_argument("{} needs floating operands of one dtype, got {} and {}", op, a.to_string(), b.to_string());
  }
  if (a.rank() == 3) {  // batched: one row of group sizes per entry
    if (sizes.dtype() != DType::kS32 || sizes.rank() != 2 || sizes.dim(0) != a.dim(0) || sizes.dim(1) < 1) {
      return invalid_argument("{} group_sizes must be s32[{}, Gl] for lhs {}, got {}", op, a.dim(0), a.to_string(),
                              sizes.to_string());
    }
    return ok_status();
  }
  if (sizes.dtype() != DType::kS32 || sizes.rank() != 1) {
    return invalid_argument("{} group_sizes must be s32[G], got {}", op, sizes.to_string());
  }
  if (a.rank() != 2) return invalid_argument("{} lhs must be [M, K] or [P, M, K], got {}", op, a.to_string());
  return ok_status();
}

// Batched form: the expert blocks E / Gl must divide the entries.
Status check_blocks(std::string_view op, int64_t entries, int64_t experts, int64_t local) {
  if (experts % local != 0 || entries % (experts / local) != 0) {
    return invalid_argument("{}: {} experts in blocks of {} do not divide {} entries into whole blocks", op, experts, local,
                            entries);
  }
  return ok_status();
}

// ---- shape rules ----

Result<Shape> infer_gmm(const InferContext& ctx) {
  const Shape &x = ctx.operands[0], &w = ctx.operands[1], &sizes = ctx.operands[2];
  KILN_RETURN_IF_ERROR(check_operands("grouped_matmul", x, w, sizes));
  int64_t t = ctx.attrs.get_int_or("transpose_rhs", 0);
  if (t != 0 && t != 1) return invalid_argument("grouped_matmul transpose_rhs={} must be 0 or 1", t);
  if (x.rank() == 3) {
    if (w.rank() != 3) return invalid_argument("grouped_matmul rhs must be [E, K, N], got {}", w.to_string());
    KILN_RETURN_IF_ERROR(check_blocks("grouped_matmul", x.dim(0), w.dim(0), sizes.dim(1)));
    int64_t k = t ? w.dim(2) : w.dim(1), n = t ? w.dim(1) : w.dim(2);
    if (k != x.dim(2)) {
      return invalid_argument("grouped_matmul contracted sizes differ: lhs {} has K = {} but rhs {} has {}",
                              x.to_string(), x.dim(2), w.to_string(), k);
    }
    return internal::declared_float_result(ctx, Shape(x.dtype(), {x.dim(0), x.dim(1), n}), "grouped_matmul");
  }
  if (w.rank() != 3 || w.dim(0) != sizes.dim(0)) {
    return invalid_argument("grouped_matmul rhs must be [G, {}] with G = {} groups, got {}", t ? "N, K" : "K, N",
                            sizes.dim(0), w.to_string());
  }
  int64_t k = t ? w.dim(2) : w.dim(1), n = t ? w.dim(1) : w.dim(2);
  if (k != x.dim(1)) {
    return invalid_argument("grouped_matmul contracted sizes differ: lhs {} has K = {} but rhs {} has {}{}",
                            x.to_string(), x.dim(1), w.to_string(), k, t ? " (transpose_rhs=1)" : "");
  }
  return internal::declared_float_result(ctx, Shape(x.dtype(), {x.dim(0), n}), "grouped_matmul");
}

Result<Shape> infer_tgmm(const InferContext& ctx) {
  const Shape &x = ctx.operands[0], &dy = ctx.operands[1], &sizes = ctx.operands[2];
  KILN_RETURN_IF_ERROR(check_operands("grouped_matmul_weight_grad", x, dy, sizes));
  if (x.rank() == 3) {
    if (dy.rank() != 3 || dy.dim(0) != x.dim(0) || dy.dim(1) != x.dim(1)) {
      return invalid_argument("grouped_matmul_weight_grad operands must share entries and rows: [P, M, K] and "
                              "[P, M, N], got {} and {}", x.to_string(), dy.to_string());
    }
    if (!ctx.attrs.has("num_groups")) {
      return invalid_argument("grouped_matmul_weight_grad with [P, M, K] operands needs num_groups (the experts E)");
    }
    const int64_t e = ctx.attrs.get_int("num_groups");
    KILN_RETURN_IF_ERROR(check_blocks("grouped_matmul_weight_grad", x.dim(0), e, sizes.dim(1)));
    return internal::declared_float_result(ctx, Shape(x.dtype(), {e, x.dim(2), dy.dim(2)}),
                                           "grouped_matmul_weight_grad");
  }
  if (dy.rank() != 2 || dy.dim(0) != x.dim(0)) {
    return invalid_argument("grouped_matmul_weight_grad operands must share rows: [M, K] and [M, N], got {} and {}",
                            x.to_string(), dy.to_string());
  }
  return internal::declared_float_result(ctx, Shape(x.dtype(), {sizes.dim(0), x.dim(1), dy.dim(1)}),
                                         "grouped_matmul_weight_grad");
}

// ---- reference evaluation (double) ----

// One entry: rows x [M, K] in `groups` groups over w [groups, K, N] (or [groups, N, K]).
void gmm_entry(const double* x, const double* w, const double* sizes, int64_t groups, int64_t M, int64_t K, int64_t N,
               bool t, double* out) {
  auto ranges = group_ranges(sizes, groups, M);
  for (size_t g = 0; g < ranges.size(); ++g) {
    const double* wg = w + g * K * N;
    for (int64_t r = ranges[g].first; r < ranges[g].second; ++r) {
      const double* xr = x + r * K;
      double* o = out + r * N;
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) o[n] += xr[k] * (t ? wg[n * K + k] : wg[k * N + n]);
      }
    }
  }
}

// One entry: out[g] += x_g^T dy_g over its groups.
void tgmm_entry(const double* x, const double* dy, const double* sizes, int64_t groups, int64_t M, int64_t K, int64_t N,
                double* out) {
  auto ranges = group_ranges(sizes, groups, M);
  for (size_t g = 0; g < ranges.size(); ++g) {
    double* og = out + g * K * N;
    for (int64_t r = ranges[g].first; r < ranges[g].second; ++r) {
      const double* xr = x + r * K;
      const double* dr = dy + r * N;
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) og[k * N + n] += xr[k] * dr[n];
      }
    }
  }
}

ir::Literal eval_gmm(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal &x = *args[0], &w = *args[1], &sizes = *args[2];
  const bool batched = x.shape().rank() == 3;
  const int64_t P = batched ? x.shape().dim(0) : 1;
  const int64_t M = x.shape().dim(batched ? 1 : 0), K = x.shape().dim(batched ? 2 : 1);
  const int64_t N = instr.shape().dim(batched ? 2 : 1);
  const int64_t groups = sizes.shape().dim(batched ? 1 : 0), blocks = w.shape().dim(0) / groups;
  std::vector<double> out(P * M * N, 0.0);
  for (int64_t p = 0; p < P; ++p) {
    gmm_entry(x.values().data() + p * M * K, w.values().data() + (p % blocks) * groups * K * N,
              sizes.values().data() + p * groups, groups, M, K, N, transpose_rhs(instr), out.data() + p * M * N);
  }
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_tgmm(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal &x = *args[0], &dy = *args[1], &sizes = *args[2];
  const bool batched = x.shape().rank() == 3;
  const int64_t P = batched ? x.shape().dim(0) : 1;
  const int64_t M = x.shape().dim(batched ? 1 : 0), K = x.shape().dim(batched ? 2 : 1);
  const int64_t N = dy.shape().dim(batched ? 2 : 1);
  const int64_t groups = sizes.shape().dim(batched ? 1 : 0), blocks = instr.shape().dim(0) / groups;
  std::vector<double> out(instr.shape().num_elements(), 0.0);
  for (int64_t p = 0; p < P; ++p) {
    tgmm_entry(x.values().data() + p * M * K, dy.values().data() + p * M * N, sizes.values().data() + p * groups, groups,
               M, K, N, out.data() + (p % blocks) * groups * K * N);
  }
  return ir::Literal(instr.shape(), std::move(out));
}

// ---- gradient rules ----

std::vector<Instr*> vjp_gmm(VjpContext& c) {
  Instr *x = c.operand(0), *w = c.operand(1), *sizes = c.operand(2);
  bool t = transpose_rhs(*c.instr);
  Instr* g = c.dout();
  Instr* dx = c.b.grouped_matmul(g, w, sizes, !t);
  if (x->shape().rank() == 3) {  // batched: the weight gradient names its experts
    ir::Attrs a;
    a.set("num_groups", w->shape().dim(0));
    Instr* dw = c.b.emit(Opcode::kGroupedMatmulWeightGrad, t ? std::vector<Instr*>{g, x, sizes} : std::vector<Instr*>{x, g, sizes}, a);
    return {dx, dw, nullptr};
  }
  Instr* dw = t ? c.b.grouped_matmul_weight_grad(g, x, sizes) : c.b.grouped_matmul_weight_grad(x, g, sizes);
  return {dx, dw, nullptr};
}

// out[g] = x_g^T dy_g: dx_r = dy_r @ dout[g]^T, ddy_r = x_r @ dout[g] (rows of a group only).
std::vector<Instr*> vjp_tgmm(VjpContext& c) {
  Instr *x = c.operand(0), *dy = c.operand(1), *sizes = c.operand(2);
  Instr* g = c.dout();
  return {c.b.grouped_matmul(dy, g, sizes, true), c.b.grouped_matmul(x, g, sizes, false), nullptr};
}

// ---- sharding rules and cost ----

std::vector<std::vector<int>> gmm_dim_map(const Instr& instr) {
  if (instr.operand(0)->shape().rank() == 3) return internal::empty_dim_map(instr);  // the partitioner's own rule
  bool t = transpose_rhs(instr);
  return {{0, -1}, {-1, t ? 1 : -1, t ? -1 : 1}, {-1}};
}

std::vector<std::vector<int>> tgmm_dim_map(const Instr& instr) {
  if (instr.operand(0)->shape().rank() == 3) return internal::empty_dim_map(instr);
  return {{-1, 1}, {-1, 2}, {-1}};
}

// Every row counted (the dropless layout has no padding rows; the group sizes are data).
Cost gmm_cost(const Instr& instr) {
  Cost c = internal::memory_cost(instr);
  const Shape& x = instr.operand(0)->shape();
  c.flops = 2.0 * static_cast<double>(x.num_elements()) * static_cast<double>(instr.shape().dim(instr.shape().rank() - 1));
  return c;
}

Cost tgmm_cost(const Instr& instr) {
  Cost c = internal::memory_cost(instr);
  const Shape& x = instr.operand(0)->shape();
  const Shape& dy = instr.operand(1)->shape();
  c.flops = 2.0 * static_cast<double>(x.num_elements()) * static_cast<double>(dy.dim(dy.rank() - 1));
  return c;
}

// ---- examples ----

// The group sizes are constants so that each example pins a layout: empty groups, a group
// holding every row, padding rows past the sum, and a sum larger than the rows.
std::string gmm_example(const std::string& x, const std::string& w, const std::string& sizes, const std::string& out,
                        const std::string& attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %w = {} parameter(), index=1\n"
      "  %s = {} constant({})\n"
      "  ROOT %y = {} grouped_matmul(%x, %w, %s){}\n}}\n",
      x, w, fmt::format("s32[{}]", std::count(sizes.begin(), sizes.end(), ',') + 1), sizes, out, attrs);
}

std::string tgmm_example(const std::string& x, const std::string& dy, const std::string& sizes,
                         const std::string& out) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %d = {} parameter(), index=1\n"
      "  %s = {} constant({})\n"
      "  ROOT %y = {} grouped_matmul_weight_grad(%x, %d, %s)\n}}\n",
      x, dy, fmt::format("s32[{}]", std::count(sizes.begin(), sizes.end(), ',') + 1), sizes, out);
}

// Batched form: 4 entries with 2 groups each (s32[4,2] sizes).
std::string batched_example(const std::string& op, const std::string& x, const std::string& w, const std::string& sizes,
                            const std::string& out, const std::string& attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %w = {} parameter(), index=1\n"
      "  %s = s32[4,2] constant({})\n"
      "  ROOT %y = {} {}(%x, %w, %s){}\n}}\n",
      x, w, sizes, out, op, attrs);
}

std::vector<OpExample> gmm_examples() {
  return {
      // three groups, the middle one empty, one padding row
      {gmm_example("f32[6,3]", "f32[3,3,2]", "{2, 0, 3}", "f32[6,2]", "")},
      // one group owns every row, the others are empty
      {gmm_example("f32[4,2]", "f32[3,2,3]", "{0, 4, 0}", "f32[4,3]", "")},
      // w as [G, N, K]; the last group is cut at row M (sizes sum to 7 > 5)
      {gmm_example("f32[5,3]", "f32[2,2,3]", "{3, 4}", "f32[5,2]", ", transpose_rhs=1")},
      // all rows padding
      {gmm_example("f32[3,2]", "f32[2,2,2]", "{0, 0}", "f32[3,2]", "")},
      // bf16
      {gmm_example("bf16[4,4]", "bf16[2,4,3]", "{1, 3}", "bf16[4,3]", "")},
      // batched: 4 entries, 4 experts in blocks of 2 (entries 0, 2 use experts 0-1; 1, 3 use 2-3)
      {batched_example("grouped_matmul", "f32[4,3,2]", "f32[4,2,3]", "{2, 1, 0, 3, 1, 0, 3, 3}", "f32[4,3,3]", "")},
      {batched_example("grouped_matmul", "f32[4,3,2]", "f32[4,3,2]", "{1, 1, 2, 0, 0, 2, 1, 2}", "f32[4,3,3]",
                       ", transpose_rhs=1")},
      {batched_example("grouped_matmul", "bf16[4,3,2]", "bf16[4,2,3]", "{2, 1, 0, 3, 1, 0, 3, 3}", "bf16[4,3,3]", "")},
  };
}

std::vector<OpExample> tgmm_examples() {
  return {
      {tgmm_example("f32[6,3]", "f32[6,2]", "{2, 0, 3}", "f32[3,3,2]")},
      {tgmm_example("f32[4,2]", "f32[4,3]", "{0, 4, 0}", "f32[3,2,3]")},
      {tgmm_example("f32[5,2]", "f32[5,2]", "{3, 4}", "f32[2,2,2]")},
      {tgmm_example("bf16[4,3]", "bf16[4,2]", "{1, 2}", "bf16[2,3,2]")},
      {batched_example("grouped_matmul_weight_grad", "f32[4,3,2]", "f32[4,3,2]", "{2, 1, 0, 3, 1, 0, 3, 3}",
                       "f32[4,2,2]", ", num_groups=4")},
      {batched_example("grouped_matmul_weight_grad", "bf16[4,3,2]", "bf16[4,3,2]", "{1, 2, 3, 0, 0, 3, 2, 1}",
                       "bf16[4,2,2]", ", num_groups=4")},
  };
}

}  // namespace

void register_grouped_matmul_ops(OpTable& table) {
  {
    OpDef d;
    d.opcode = Opcode::kGroupedMatmul;
    d.kernel_class = KernelClass::kGroupedMatmul;
    d.min_operands = d.max_operands = 3;
    d.attrs = {{"transpose_rhs", AttrKind::kInt, false, {}}};
    d.infer = infer_gmm;
    d.declared_result_dtype = true;
    d.eval = eval_gmm;
    d.grad = GradKind::kRule;
    d.vjp = vjp_gmm;
    d.dim_map = gmm_dim_map;
    d.cost = gmm_cost;
    d.examples = gmm_examples();
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kGroupedMatmulWeightGrad;
    d.kernel_class = KernelClass::kGroupedMatmul;
    d.min_operands = d.max_operands = 3;
    d.attrs = {{"num_groups", AttrKind::kInt, false, {}}};
    d.infer = infer_tgmm;
    d.declared_result_dtype = true;
    d.eval = eval_tgmm;
    d.grad = GradKind::kRule;
    d.vjp = vjp_tgmm;
    d.dim_map = tgmm_dim_map;
    d.cost = tgmm_cost;
    d.examples = tgmm_examples();
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
