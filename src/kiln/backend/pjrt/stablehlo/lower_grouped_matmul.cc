// Grouped matmuls (ops/grouped_matmul_ops.cc: MegaBlox gmm and tgmm). Both forms are written
// as the batched one: x [M, K] with sizes [G] is x [P=1, M, K] with sizes [1, G], and w
// [E, K, N] holds B = E / Gl blocks of Gl experts, entry p using block p mod B.
//
// Where the plugin runs it (EmitOptions::ragged_dot: GPU, TPU), chlo.ragged_dot with the
// group sizes Kiln means (negative ones as 0, cut at M, so rows past the sum give zeros):
//   gmm:  ragged dimension = lhs rows, rhs group dimension = w's expert dimension
//   tgmm: ragged dimension = the contracted rows (mode 2: the result gains the group dim)
// Elsewhere (XLA:CPU rejects ragged_dot) a decomposition of dense products:
//   gmm:  y_all [P, M, Gl, N] = x @ w[every expert of the entry's block], then each row keeps
//         its own group's column: select(begin[g] <= m < end[g]) and a sum over Gl (one
//         term is non-zero, so the sum is that term). Rows of no group keep nothing: zeros.
//   tgmm: per group g, (x masked to g's rows)^T @ (dy masked to g's rows): both operands
//         masked with select, so a non-finite value in another group's row cannot leak in.
// Both cost Gl times the dense flops and memory of one group's product: the CPU plugin is a
// correctness target, not a fast one.
// Tiled (EmitOptions::tiled_grouped_matmul: GPUs, whose XLA rewrites chlo.ragged_dot into the
// masked dense product above): every group (entry p, group g; j = p Gl + g) is cut into tiles
// of T rows, ceil(size_j / T) of them, at most P (ceil(M / T) + Gl) in all. A stablehlo.while
// runs over the tiles there are (a count computed from the sizes); tile i finds its group j
// (the groups whose tiles all lie before i), its first row and its last, then
//   gmm:  y[p, T rows] = x[p, T rows] @ w[expert]  one [T, K] x [K, N] product, written back
//         with a select so rows of other groups and padding keep what they hold (zeros or
//         their own tile's result); rows are independent, so x needs no mask.
//   tgmm: acc[expert] += x_tile^T dy_tile  both tiles masked to the group's rows.
// The T-row window starts at min(first row, M - T) so a dynamic_slice never clamps it behind
// our back. FLOPs: at most (M + Gl T) K N per entry; memory: one tile and the result.
// Products of bf16 accumulate in f32 (f64 for f64) and round once to the declared result
// dtype, as Kiln's reference does.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kiln/backend/pjrt/stablehlo/lower_attention_blocks.h"
#include "kiln/backend/pjrt/stablehlo/lower_collectives_common.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;
using ir::Opcode;
using Ints = std::vector<int64_t>;

// The batched view of either form.
struct Geometry {
  int64_t P, M, K, N, Gl, B;
  bool transpose_rhs;
  DType in, acc;
  int64_t Q() const { return P / B; }
};

DType accumulate_dtype(DType dtype) { return dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

std::string precision(DType dtype, std::string_view dialect) {
  const char* p = dtype == DType::kBF16 ? "DEFAULT" : "HIGHEST";
  return fmt::format("precision_config = [#{0}<precision {1}>, #{0}<precision {1}>]", dialect, p);
}

std::string dot_numbers(const Ints& lb, const Ints& rb, const Ints& lc, const Ints& rc) {
  std::vector<std::string> parts;
  if (!lb.empty()) parts.push_back("lhs_batching_dimensions = " + dim_list(lb));
  if (!rb.empty()) parts.push_back("rhs_batching_dimensions = " + dim_list(rb));
  parts.push_back("lhs_contracting_dimensions = " + dim_list(lc));
  parts.push_back("rhs_contracting_dimensions = " + dim_list(rc));
  return fmt::format("{}", fmt::join(parts, ", "));
}

Val dot(Writer& w, const Val& a, const Val& b, const std::string& result, const Ints& lb, const Ints& rb, const Ints& lc,
        const Ints& rc, DType dtype) {
  return w.op("stablehlo.dot_general", {a, b}, result,
              fmt::format("dot_dimension_numbers = #stablehlo.dot<{}>, {}", dot_numbers(lb, rb, lc, rc),
                          precision(dtype, "stablehlo")));
}

// chlo.ragged_dot with the given dimension numbers.
Val ragged_dot(Writer& w, const Val& a, const Val& b, const Val& sizes, const std::string& result, const Ints& lb,
               const Ints& rb, const Ints& lc, const Ints& rc, const Ints& ragged, const Ints& group, DType dtype) {
  return w.op("chlo.ragged_dot", {a, b, sizes}, result,
              fmt::format("{}, ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = {}, "
                          "rhs_batching_dimensions = {}, lhs_contracting_dimensions = {}, rhs_contracting_dimensions = "
                          "{}, lhs_ragged_dimensions = {}, rhs_group_dimensions = {}>",
                          precision(dtype, "chlo"), dim_list(lb), dim_list(rb), dim_list(lc), dim_list(rc),
                          dim_list(ragged), dim_list(group)));
}

// [P, Gl] begin/end of every entry's groups.
Result<RaggedBounds> bounds(Writer& w, const Val& sizes, const Geometry& g) {
  return ragged_bounds(w, w.reshape(sizes, tensor_type(DType::kS32, Ints{g.P, g.Gl})), Ints{g.P, g.Gl}, g.M);
}

// [P, M, Gl] (rows_dim = 1) or [P, Gl, M] (rows_dim = 2): whether row m is in group g.
Val row_in_group(Writer& w, const RaggedBounds& b, const Geometry& g, int64_t rows_dim) {
  const Ints dims = rows_dim == 1 ? Ints{g.P, g.M, g.Gl} : Ints{g.P, g.Gl, g.M};
  const std::string type = tensor_type(DType::kS32, dims);
  const Ints entry_group = rows_dim == 1 ? Ints{0, 2} : Ints{0, 1};
  const Val m = iota(w, DType::kS32, dims, rows_dim);
  return w.binary("stablehlo.and", w.compare(w.broadcast(b.begin, type, entry_group), m, "LE"),
                  w.compare(m, w.broadcast(b.end, type, entry_group), "LT"));
}

// E: the experts of grouped_matmul's w.
int64_t weights_experts(const ir::Instr& instr) { return instr.operand(1)->shape().dim(0); }

Geometry gmm_geometry(const ir::Instr& instr) {
  const ir::Shape &x = instr.operand(0)->shape(), &w = instr.operand(1)->shape(), &s = instr.operand(2)->shape();
  const bool batched = x.rank() == 3, t = instr.attrs().get_int_or("transpose_rhs", 0) != 0;
  Geometry g;
  g.P = batched ? x.dim(0) : 1;
  g.M = x.dim(batched ? 1 : 0);
  g.K = x.dim(batched ? 2 : 1);
  g.N = t ? w.dim(1) : w.dim(2);
  g.Gl = s.dim(batched ? 1 : 0);
  g.B = w.dim(0) / g.Gl;
  g.transpose_rhs = t;
  g.in = x.dtype();
  g.acc = accumulate_dtype(x.dtype());
  return g;
}

// ---- tiled form ----

// Rows per tile: a power of two near a quarter of a group's mean rows (so rounding every group
// up to whole tiles adds about Gl T / 2 rows, an eighth of M), at least 8 and at most 256 (a
// [256, K] x [K, N] product fills a GPU; more tiles means more loop trips), and at most M.
int64_t tile_rows(int64_t M, int64_t Gl) {
  int64_t t = 8;
  while (t < 256 && 2 * t * 4 * Gl <= M) t *= 2;
  return std::min(t, M);
}

// The groups of every entry flattened, j = p Gl + g, and their tiles.
struct TilePlan {
  int64_t T = 0, J = 0;
  Val begin, end;            // s32 [J]: group j's rows [begin, end) of entry j / Gl
  Val tile_begin, tile_end;  // s32 [J]: group j's tiles [tile_begin, tile_end)
  Val tiles;                 // s32 scalar: the tiles of all groups
};

Result<TilePlan> tile_plan(Writer& w, const Val& sizes, const Geometry& g) {
  KILN_ASSIGN_OR_RETURN(RaggedBounds b, bounds(w, sizes, g));
  TilePlan t;
  t.T = tile_rows(g.M, g.Gl);
  t.J = g.P * g.Gl;
  const Ints j_dims = {t.J};
  const std::string j_type = tensor_type(DType::kS32, j_dims);
  t.begin = w.reshape(b.begin, j_type);
  t.end = w.reshape(b.end, j_type);
  const Val rows = w.binary("stablehlo.subtract", t.end, t.begin);
  const Val count = w.binary("stablehlo.divide", w.binary("stablehlo.add", rows, w.splat(DType::kS32, j_dims, t.T - 1)),
                             w.splat(DType::kS32, j_dims, t.T));
  const int64_t max_tiles = g.P * ((g.M + t.T - 1) / t.T + g.Gl);  // never reached: no cut
  KILN_ASSIGN_OR_RETURN(RaggedBounds tb, ragged_bounds(w, count, j_dims, max_tiles));
  t.tile_begin = tb.begin;
  t.tile_end = tb.end;
  const Ints all = {0};
  t.tiles = w.reduce(count, w.scalar(DType::kS32, 0), all, "stablehlo.add", tensor_type(DType::kS32, Ints{}));
  return t;
}

// Tile i (s32 scalar) of the plan: its entry, its expert (w's dim 0), the window's first row
// `start` and which of the window's T rows are the group's (pred [T]).
struct Tile {
  Val p, expert, start, mine;
};

Tile locate(Writer& w, const Val& i, const Val& begin, const Val& end, const Val& tile_begin, const Val& tile_end,
            const Geometry& g, int64_t T, int64_t J) {
  const std::string s32 = tensor_type(DType::kS32, Ints{}), j_type = tensor_type(DType::kS32, Ints{J});
  const Ints j_dims = {J}, t_dims = {T}, all = {0}, one = {1};
  const Val done = w.compare(tile_end, w.broadcast(i, j_type, Ints{}), "LE");  // groups before tile i
  const Val j = w.reduce(select(w, done, w.splat(DType::kS32, j_dims, 1), w.splat(DType::kS32, j_dims, 0)),
                         w.scalar(DType::kS32, 0), all, "stablehlo.add", s32);
  auto at = [&](const Val& v) {
    const std::vector<Val> starts = {j};
    return w.reshape(attention::dynamic_slice(w, v, starts, one, tensor_type(DType::kS32, one)), s32);
  };
  const Val into = w.binary("stablehlo.subtract", i, at(tile_begin));
  const Val first = w.binary("stablehlo.add", at(begin), w.binary("stablehlo.multiply", into, attention::i32(w, T)));
  const Val last = w.binary("stablehlo.minimum", at(end), w.binary("stablehlo.add", first, attention::i32(w, T)));
  Tile t;
  t.start = w.binary("stablehlo.minimum", first, attention::i32(w, g.M - T));
  const std::string t_type = tensor_type(DType::kS32, t_dims);
  const Val row = w.binary("stablehlo.add", iota(w, DType::kS32, t_dims, 0), w.broadcast(t.start, t_type, Ints{}));
  t.mine = w.binary("stablehlo.and", w.compare(row, w.broadcast(first, t_type, Ints{}), "GE"),
                    w.compare(row, w.broadcast(last, t_type, Ints{}), "LT"));
  t.p = w.binary("stablehlo.divide", j, attention::i32(w, g.Gl));
  const Val group = w.binary("stablehlo.remainder", j, attention::i32(w, g.Gl));
  const Val block = w.binary("stablehlo.remainder", t.p, attention::i32(w, g.B));  // entry p's experts
  t.expert = w.binary("stablehlo.add", w.binary("stablehlo.multiply", block, attention::i32(w, g.Gl)), group);
  return t;
}

// Whether bf16 operands go into the product as they are (the mixed-precision dot), else the
// dtype they widen to; and the dtype that picks the dot's precision.
DType product_operand_dtype(const LowerContext& ctx, const Geometry& g) {
  const bool mixed = g.in == DType::kBF16 && g.acc == DType::kF32 && ctx.options.mixed_precision_dot;
  return mixed ? g.in : g.acc;
}

// [T, D] rows `start` + [0, T) of entry p of v [P, M, D], in `dtype`.
Val rows_of(Writer& w, const Val& v, const Tile& t, int64_t T, int64_t D, DType in, DType dtype) {
  const std::vector<Val> starts = {t.p, t.start, attention::i32(w, 0)};
  const Ints sizes = {1, T, D};
  const Val slice = attention::dynamic_slice(w, v, starts, sizes, tensor_type(in, sizes));
  return w.convert(w.reshape(slice, tensor_type(in, Ints{T, D})), tensor_type(dtype, Ints{T, D}));
}

Result<Vals> tiled_grouped_matmul(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands,
                                  const Geometry& g) {
  Writer& w = ctx.w;
  const Val &x = array_operand(operands, 0), &weights = array_operand(operands, 1), &sizes = array_operand(operands, 2);
  KILN_ASSIGN_OR_RETURN(const TilePlan plan, tile_plan(w, sizes, g));
  const int64_t T = plan.T, J = plan.J;
  const DType out = instr.shape().dtype(), op_dtype = product_operand_dtype(ctx, g);
  const Ints x3 = {g.P, g.M, g.K}, y3 = {g.P, g.M, g.N};
  const Ints w3 = g.transpose_rhs ? Ints{weights_experts(instr), g.N, g.K} : Ints{weights_experts(instr), g.K, g.N};
  const std::vector<Val> state = {w.reshape(x, tensor_type(g.in, x3)), w.reshape(weights, tensor_type(g.in, w3)),
                                  plan.begin, plan.end, plan.tile_begin, plan.tile_end,
                                  w.splat(out, y3, 0)};
  const std::vector<Val> done = attention::counted_loop(
      w, attention::i32(w, 0), plan.tiles, state, [&](Writer& w, const Val& i, std::span<const Val> st) {
        const Tile t = locate(w, i, st[2], st[3], st[4], st[5], g, T, J);
        const Val xt = rows_of(w, st[0], t, T, g.K, g.in, op_dtype);
        const std::vector<Val> w_at = {t.expert, attention::i32(w, 0), attention::i32(w, 0)};
        const Ints w_one = {1, w3[1], w3[2]}, w_two = {w3[1], w3[2]};
        const Val w_slice = attention::dynamic_slice(w, st[1], w_at, w_one, tensor_type(g.in, w_one));
        const Val wt = w.convert(w.reshape(w_slice, tensor_type(g.in, w_two)), tensor_type(op_dtype, w_two));
        const Ints tn = {T, g.N}, one_tn = {1, T, g.N};
        const Val product =
            dot(w, xt, wt, tensor_type(g.acc, tn), {}, {}, {1}, {g.transpose_rhs ? 1 : 0}, op_dtype);
        const Val fresh = w.reshape(w.convert(product, tensor_type(out, tn)), tensor_type(out, one_tn));
        const std::vector<Val> y_at = {t.p, t.start, attention::i32(w, 0)};
        const Val old = attention::dynamic_slice(w, st[6], y_at, one_tn, tensor_type(out, one_tn));
        const Ints rows_dim = {1};
        const Val mine = w.broadcast(t.mine, tensor_type(DType::kPred, one_tn), rows_dim);
        std::vector<Val> next(st.begin(), st.end());
        next[6] = attention::dynamic_update_slice(w, st[6], select(w, mine, fresh, old), y_at);
        return next;
      });
  return Vals{w.reshape(done[6], tensor_type(instr.shape()))};
}

Result<Vals> tiled_grouped_matmul_weight_grad(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands,
                                              const Geometry& g) {
  Writer& w = ctx.w;
  const Val &x = array_operand(operands, 0), &dy = array_operand(operands, 1), &sizes = array_operand(operands, 2);
  KILN_ASSIGN_OR_RETURN(const TilePlan plan, tile_plan(w, sizes, g));
  const int64_t T = plan.T, J = plan.J, E = instr.shape().dim(0);
  const DType op_dtype = product_operand_dtype(ctx, g);
  const Ints x3 = {g.P, g.M, g.K}, dy3 = {g.P, g.M, g.N}, out3 = {E, g.K, g.N};
  const std::vector<Val> state = {w.reshape(x, tensor_type(g.in, x3)), w.reshape(dy, tensor_type(g.in, dy3)),
                                  plan.begin, plan.end, plan.tile_begin, plan.tile_end,
                                  w.splat(g.acc, out3, 0)};
  const std::vector<Val> done = attention::counted_loop(
      w, attention::i32(w, 0), plan.tiles, state, [&](Writer& w, const Val& i, std::span<const Val> st) {
        const Tile t = locate(w, i, st[2], st[3], st[4], st[5], g, T, J);
        // Both tiles masked: a non-finite value in another group's row must not reach this one.
        auto masked = [&](const Val& v, int64_t D) {
          const Val rows = rows_of(w, v, t, T, D, g.in, op_dtype);
          const Ints td = {T, D}, rows_dim = {0};
          return select(w, w.broadcast(t.mine, tensor_type(DType::kPred, td), rows_dim), rows,
                        w.splat(op_dtype, td, 0));
        };
        const Ints kn = {g.K, g.N}, one_kn = {1, g.K, g.N};
        const Val product = dot(w, masked(st[0], g.K), masked(st[1], g.N), tensor_type(g.acc, kn), {}, {}, {0}, {0},
                                op_dtype);
        const std::vector<Val> at = {t.expert, attention::i32(w, 0), attention::i32(w, 0)};
        std::vector<Val> next(st.begin(), st.end());
        next[6] = attention::add_at(w, st[6], w.reshape(product, tensor_type(g.acc, one_kn)), at, one_kn);
        return next;
      });
  return Vals{w.convert(done[6], tensor_type(instr.shape()))};
}

//   grouped_matmul(x [P?, M, K], w [E, K, N] or [E, N, K], sizes s32 [P?, Gl]) -> [P?, M, N]
Result<Vals> grouped_matmul(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const Geometry g = gmm_geometry(instr);
  if (ctx.options.tiled_grouped_matmul && g.M > 0) return tiled_grouped_matmul(ctx, instr, operands, g);
  const Val &x = array_operand(operands, 0), &weights = array_operand(operands, 1), &sizes = array_operand(operands, 2);
  KILN_ASSIGN_OR_RETURN(RaggedBounds b, bounds(w, sizes, g));
  const Ints x3 = {g.P, g.M, g.K}, y3 = {g.P, g.M, g.N};
  const int64_t w_k = g.transpose_rhs ? 3 : 2;  // K's dimension in w as [B, Gl, K|N, N|K]
  const Ints w4 = g.transpose_rhs ? Ints{g.B, g.Gl, g.N, g.K} : Ints{g.B, g.Gl, g.K, g.N};
  Val y;
  if (ctx.options.ragged_dot) {
    const Val counts = w.binary("stablehlo.subtract", b.end, b.begin);
    if (g.P == 1) {  // the plain form: x [M, K], w [Gl, .., ..], sizes [Gl]
      const Val sizes1 = w.reshape(counts, tensor_type(DType::kS32, Ints{g.Gl}));
      y = ragged_dot(w, w.reshape(x, tensor_type(g.in, Ints{g.M, g.K})), weights, sizes1,
                     tensor_type(g.acc, Ints{g.M, g.N}), {}, {}, {1}, {w_k - 1}, {0}, {0}, g.in);
    } else {  // x [Q, B, M, K] against w [B, Gl, .., ..], batched over the blocks B
      const Val xq = w.reshape(x, tensor_type(g.in, Ints{g.Q(), g.B, g.M, g.K}));
      const Val sq = w.reshape(counts, tensor_type(DType::kS32, Ints{g.Q(), g.B, g.Gl}));
      const Ints r4 = {g.B, g.Q(), g.M, g.N};
      const Val r = ragged_dot(w, xq, w.reshape(weights, tensor_type(g.in, w4)), sq, tensor_type(g.acc, r4), {1}, {0},
                               {3}, {w_k}, {2}, {1}, g.in);
      y = transpose(w, r, g.acc, r4, Ints{1, 0, 2, 3});
    }
  } else {
    const Val xa = w.convert(w.reshape(x, tensor_type(g.in, x3)), tensor_type(g.acc, x3));
    const Val wa = w.convert(w.reshape(weights, tensor_type(g.in, w4)), tensor_type(g.acc, w4));
    const Ints all4 = {g.P, g.M, g.Gl, g.N};
    Val y_all;
    if (g.B == 1) {
      const Ints w3 = {w4[1], w4[2], w4[3]};
      y_all = dot(w, xa, w.reshape(wa, tensor_type(g.acc, w3)), tensor_type(g.acc, all4), {}, {}, {2}, {w_k - 1}, g.acc);
    } else {  // [Q, B, M, K] x [B, Gl, .., ..] over B -> [B, Q, M, Gl, N] -> [Q, B, M, Gl, N]
      const Ints r5 = {g.B, g.Q(), g.M, g.Gl, g.N};
      const Val r = dot(w, w.reshape(xa, tensor_type(g.acc, Ints{g.Q(), g.B, g.M, g.K})), wa, tensor_type(g.acc, r5),
                        {1}, {0}, {3}, {w_k}, g.acc);
      y_all = w.reshape(transpose(w, r, g.acc, r5, Ints{1, 0, 2, 3, 4}), tensor_type(g.acc, all4));
    }
    const Ints lead3 = {0, 1, 2}, groups = {2};
    const Val mine = w.broadcast(row_in_group(w, b, g, 1), tensor_type(DType::kPred, all4), lead3);
    const Val kept = select(w, mine, y_all, w.splat(g.acc, all4, 0));
    y = w.reduce(kept, w.scalar(g.acc, 0), groups, "stablehlo.add", tensor_type(g.acc, y3));
  }
  y = w.reshape(y, tensor_type(g.acc, y3));
  return Vals{w.reshape(w.convert(y, tensor_type(instr.shape().dtype(), y3)), tensor_type(instr.shape()))};
}

//   grouped_matmul_weight_grad(x [P?, M, K], dy [P?, M, N], sizes s32 [P?, Gl]) -> [E, K, N]
Result<Vals> grouped_matmul_weight_grad(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const ir::Shape &xs = instr.operand(0)->shape(), &dys = instr.operand(1)->shape(), &s = instr.operand(2)->shape();
  const bool batched = xs.rank() == 3;
  Geometry g;
  g.P = batched ? xs.dim(0) : 1;
  g.M = xs.dim(batched ? 1 : 0);
  g.K = xs.dim(batched ? 2 : 1);
  g.N = dys.dim(batched ? 2 : 1);
  g.Gl = s.dim(batched ? 1 : 0);
  g.B = instr.shape().dim(0) / g.Gl;
  g.transpose_rhs = false;
  g.in = xs.dtype();
  g.acc = accumulate_dtype(xs.dtype());
  if (ctx.options.tiled_grouped_matmul && g.M > 0) return tiled_grouped_matmul_weight_grad(ctx, instr, operands, g);
  const int64_t E = instr.shape().dim(0);
  const Val &x = array_operand(operands, 0), &dy = array_operand(operands, 1), &sizes = array_operand(operands, 2);
  KILN_ASSIGN_OR_RETURN(RaggedBounds b, bounds(w, sizes, g));
  const Ints x3 = {g.P, g.M, g.K}, dy3 = {g.P, g.M, g.N}, out3 = {E, g.K, g.N};
  Val out;
  if (ctx.options.ragged_dot) {
    const Val counts = w.binary("stablehlo.subtract", b.end, b.begin);
    if (g.P == 1) {  // x [M, K], dy [M, N], sizes [Gl] -> [Gl, K, N]
      out = ragged_dot(w, w.reshape(x, tensor_type(g.in, Ints{g.M, g.K})), w.reshape(dy, tensor_type(g.in, Ints{g.M, g.N})),
                       w.reshape(counts, tensor_type(DType::kS32, Ints{g.Gl})), tensor_type(g.acc, out3), {}, {}, {0},
                       {0}, {0}, {}, g.in);
    } else {  // batched over entries -> [Gl, P, K, N], then the entries of one block summed
      const Ints r4 = {g.Gl, g.P, g.K, g.N}, r5 = {g.Gl, g.Q(), g.B, g.K, g.N}, s4 = {g.Gl, g.B, g.K, g.N};
      const Val r = ragged_dot(w, x, dy, counts, tensor_type(g.acc, r4), {0}, {0}, {1}, {1}, {1}, {}, g.in);
      const Ints over_q = {1};
      const Val summed = w.reduce(w.reshape(r, tensor_type(g.acc, r5)), w.scalar(g.acc, 0), over_q, "stablehlo.add",
                                  tensor_type(g.acc, s4));
      out = w.reshape(transpose(w, summed, g.acc, s4, Ints{1, 0, 2, 3}), tensor_type(g.acc, out3));
    }
  } else {
    // Both operands masked per group: [P, Gl, M, K] and [P, Gl, M, N], viewed as
    // [Q, B, Gl, M, ..] and contracted over the entries of a block (Q) and the rows (M).
    const Val in_group = row_in_group(w, b, g, 2);
    auto masked = [&](const Val& v, const Ints& dims3) {
      const Ints dims4 = {g.P, g.Gl, g.M, dims3[2]};
      const Ints spread = {0, 2, 3}, lead = {0, 1, 2};
      const Val wide = w.broadcast(w.convert(w.reshape(v, tensor_type(g.in, dims3)), tensor_type(g.acc, dims3)),
                                   tensor_type(g.acc, dims4), spread);
      const Val kept = select(w, w.broadcast(in_group, tensor_type(DType::kPred, dims4), lead), wide,
                              w.splat(g.acc, dims4, 0));
      return w.reshape(kept, tensor_type(g.acc, Ints{g.Q(), g.B, g.Gl, g.M, dims3[2]}));
    };
    const Ints r4 = {g.B, g.Gl, g.K, g.N};
    const Val r = dot(w, masked(x, x3), masked(dy, dy3), tensor_type(g.acc, r4), {1, 2}, {1, 2}, {0, 3}, {0, 3}, g.acc);
    out = w.reshape(r, tensor_type(g.acc, out3));
  }
  return Vals{w.convert(out, tensor_type(instr.shape()))};
}

}  // namespace

void register_grouped_matmul_lowerings(LoweringTable& table) {
  table.add(Opcode::kGroupedMatmul, grouped_matmul);
  table.add(Opcode::kGroupedMatmulWeightGrad, grouped_matmul_weight_grad);
}

}  // namespace kiln::backend::pjrt
