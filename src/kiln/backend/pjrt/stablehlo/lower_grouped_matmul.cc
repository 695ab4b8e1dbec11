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
// correctness target, not a fast one. Products of bf16 accumulate in f32 (f64 for f64) and
// round once to the declared result dtype, as Kiln's reference does.
#include <fmt/format.h>
#include <fmt/ranges.h>

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

//   grouped_matmul(x [P?, M, K], w [E, K, N] or [E, N, K], sizes s32 [P?, Gl]) -> [P?, M, N]
Result<Vals> grouped_matmul(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const Geometry g = gmm_geometry(instr);
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
