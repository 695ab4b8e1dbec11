// attention_grad: the flash backward (ops/attention_ops.cc), block by block.
//
//   q [B,T,H,Dh], k and v [B,S,K,Dh] [, sinks [H]] [, q_segment, kv_segment], out [B,T,H,Dh],
//   lse [B,H,T], dout [B,T,H,Dh], dlse [B,H,T] -> dq, dk, dv [, dsinks [H]]
//
// Per row, before any tile: D = rowsum(dout * out) - dlse [B,K,G,T], and
// dsinks_h = -sum_{b,i} exp(sink_h - lse_i) D_i (rows with lse -inf left out).
// Per tile (query rows x keys), p recomputed from the GIVEN lse (not from a new softmax):
//   z = S q k^T, p = exp(z - lse) (0 where masked), dp = dout v^T, ds = p (dp - D) S,
//   dq += ds k, dk += ds^T q, dv += p^T dout   (sums over the G query heads of a kv head).
//
// Direct form (T and S within one block): one tile. Blocked form: stablehlo.while over key
// blocks (dk, dv of the block accumulate in the loop and are added in place after it);
// inside it stablehlo.while over the query blocks that can see the key block (causal: none
// before its first key; window: none past its last key's window), dq added in place per
// tile. Clamped last blocks mask out their overlap (qmin, kmin) so no pair counts twice.
#include "kiln/backend/pjrt/stablehlo/lower_attention_blocks.h"

namespace kiln::backend::pjrt {
namespace {

using namespace attention;

// One tile's contributions: dq [B,K,G,bq,Dh], dk and dv [B,K,bk,Dh].
struct TileGrads {
  Val dq, dk, dv;
};

// qblk and doblk [B,K,G,bq,Dh], lse and D [B,K,G,bq], kblk and vblk [B,bk,K,Dh].
TileGrads tile_grads(Writer& w, const Info& a, const Val& qblk, const Val& doblk, const Val& lse, const Val& d,
                     const Val& kblk, const Val& vblk, const std::optional<Val>& mask, int64_t bq, int64_t bk) {
  const std::vector<int64_t> tile = {a.B, a.K, a.G, bq, bk};
  const std::string tile_type = tensor_type(a.acc, tile);
  const std::vector<int64_t> rows = {0, 1, 2, 3};
  const Val z = tile_scores(w, a, qblk, kblk, bq, bk);
  Val p = w.unary("stablehlo.exponential", w.binary("stablehlo.subtract", z, w.broadcast(lse, tile_type, rows)));
  if (mask) p = w.op("stablehlo.select", {*mask, p, w.splat(a.acc, tile, 0)}, tile_type);
  const Val dp = dot(w, doblk, vblk, {0, 1}, {0, 2}, {4}, {3}, tile_type);
  const Val centred = w.binary("stablehlo.subtract", dp, w.broadcast(d, tile_type, rows));
  const Val ds = w.binary("stablehlo.multiply", w.binary("stablehlo.multiply", p, centred), w.splat(a.acc, tile, a.scale));
  const std::string kv_type = a.acc_type({a.B, a.K, bk, a.Dh});
  TileGrads g;
  g.dv = dot(w, p, doblk, {0, 1}, {0, 1}, {2, 3}, {2, 3}, kv_type);
  g.dk = dot(w, ds, qblk, {0, 1}, {0, 1}, {2, 3}, {2, 3}, kv_type);
  g.dq = dot(w, ds, kblk, {0, 1}, {0, 2}, {4}, {1}, a.acc_type({a.B, a.K, a.G, bq, a.Dh}));
  return g;
}

// [B,K,S,Dh] acc -> [B,S,K,Dh] in `dtype`.
Val kv_result(Writer& w, const Info& a, const Val& x, ir::DType dtype) {
  const Val t = transpose(w, x, {0, 2, 1, 3}, a.acc_type({a.B, a.S, a.K, a.Dh}));
  return w.convert(t, tensor_type(dtype, std::vector<int64_t>{a.B, a.S, a.K, a.Dh}));
}

Result<Vals> lower_attention_grad(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const Info a = info_of(instr, /*grad=*/true);
  const std::vector<int64_t> stats = {a.B, a.K, a.G, a.T};
  const std::string stats_type = tensor_type(a.acc, stats);
  const Val qt = heads_major(w, a, array_operand(operands, 0));
  const Val dot_t = heads_major(w, a, array_operand(operands, a.dout));
  const Val out_t = heads_major(w, a, array_operand(operands, a.out));
  const std::string kv_type = a.acc_type({a.B, a.S, a.K, a.Dh});
  const Val k = w.convert(array_operand(operands, 1), kv_type);
  const Val v = w.convert(array_operand(operands, 2), kv_type);
  const Val lse = w.reshape(w.convert(array_operand(operands, a.lse), a.acc_type({a.B, a.H, a.T})), stats_type);
  const Val dlse = w.reshape(w.convert(array_operand(operands, a.dlse), a.acc_type({a.B, a.H, a.T})), stats_type);
  const Val d = w.binary("stablehlo.subtract",
                         w.reduce(w.binary("stablehlo.multiply", dot_t, out_t), w.scalar(a.acc, 0),
                                  std::vector<int64_t>{4}, "stablehlo.add", stats_type),
                         dlse);
  std::optional<Val> qseg, kvseg;
  if (a.q_seg >= 0) qseg = array_operand(operands, a.q_seg), kvseg = array_operand(operands, a.kv_seg);

  // dsinks [H] = -sum over (b, i) of exp(sink - lse) D, where lse is finite.
  std::optional<Val> dsinks;
  if (a.sinks >= 0) {
    const Val& sinks = array_operand(operands, a.sinks);
    const Val sink_kg = w.reshape(w.convert(sinks, a.acc_type({a.H})), a.acc_type({a.K, a.G}));
    const Val sink = w.broadcast(sink_kg, stats_type, std::vector<int64_t>{1, 2});
    const Val p_sink = w.unary("stablehlo.exponential", w.binary("stablehlo.subtract", sink, lse));
    const Val terms = w.op("stablehlo.select",
                           {w.compare(lse, w.splat(a.acc, stats, -kInf), "EQ"), w.splat(a.acc, stats, 0),
                            w.binary("stablehlo.multiply", p_sink, d)},
                           stats_type);
    const Val sum = w.reduce(terms, w.scalar(a.acc, 0), std::vector<int64_t>{0, 3}, "stablehlo.add", a.acc_type({a.K, a.G}));
    dsinks = w.convert(w.reshape(w.unary("stablehlo.negate", sum), a.acc_type({a.H})), sinks.type);
  }

  Vals results;
  auto finish = [&](const Val& dq, const Val& dk, const Val& dv) {
    results = {heads_minor(w, a, dq, a.in), kv_result(w, a, dk, a.in), kv_result(w, a, dv, a.in)};
    if (dsinks) results.push_back(*dsinks);
    return results;
  };

  if (a.direct()) {
    const Val zero = i32(w, 0);
    const std::optional<Val> mask = tile_mask(w, a, a.T, a.S, zero, nullptr, zero, nullptr, ptr(qseg), ptr(kvseg));
    const TileGrads g = tile_grads(w, a, qt, dot_t, lse, d, k, v, mask, a.T, a.S);
    return finish(g.dq, g.dk, g.dv);
  }

  // Blocked: the key-block loop carries the inputs and the three accumulators.
  Carry outer;
  const int c_q = outer.add(qt), c_do = outer.add(dot_t), c_lse = outer.add(lse), c_d = outer.add(d);
  const int c_k = outer.add(k), c_v = outer.add(v), c_qseg = outer.add_if(qseg), c_kvseg = outer.add_if(kvseg);
  const int c_dq = outer.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, a.T, a.Dh}, 0));
  const int c_dk = outer.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.S, a.Dh}, 0));
  const int c_dv = outer.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.S, a.Dh}, 0));
  const std::vector<Val> done = counted_loop(w, i32(w, 0), i32(w, a.nk), outer.values, [&](Writer& w, const Val& kb,
                                                                                              std::span<const Val> st) {
    const Val zero = i32(w, 0);
    const Val ks = block_start(w, kb, a.bk, a.S);
    const Val kmin = w.binary("stablehlo.multiply", kb, i32(w, a.bk));
    const std::vector<Val> k_at = {zero, ks, zero, zero};
    const std::vector<int64_t> kv_sizes = {a.B, a.bk, a.K, a.Dh};
    const Val kblk = dynamic_slice(w, st[c_k], k_at, kv_sizes, a.acc_type({a.B, a.bk, a.K, a.Dh}));
    const Val vblk = dynamic_slice(w, st[c_v], k_at, kv_sizes, a.acc_type({a.B, a.bk, a.K, a.Dh}));
    std::optional<Val> kvseg_blk;
    if (c_kvseg >= 0) {
      kvseg_blk = dynamic_slice(w, st[c_kvseg], std::vector<Val>{zero, ks}, std::vector<int64_t>{a.B, a.bk},
                                tensor_type(ir::DType::kS32, std::vector<int64_t>{a.B, a.bk}));
    }
    // The query blocks whose rows can see keys [kmin, min(kmin + bk, S)).
    Val lo = zero, hi = i32(w, a.nq);
    if (a.causal) lo = w.binary("stablehlo.divide", kmin, i32(w, a.bq));
    if (a.window > 0) {
      const Val last_key = w.binary("stablehlo.subtract",
                                    w.binary("stablehlo.minimum", w.binary("stablehlo.add", kmin, i32(w, a.bk)), i32(w, a.S)),
                                    i32(w, 1));
      const Val last_row = w.binary("stablehlo.add", last_key, i32(w, a.window - 1));
      hi = w.binary("stablehlo.minimum", hi,
                    w.binary("stablehlo.add", w.binary("stablehlo.divide", last_row, i32(w, a.bq)), i32(w, 1)));
    }
    Carry inner;
    const int i_q = inner.add(st[c_q]), i_do = inner.add(st[c_do]), i_lse = inner.add(st[c_lse]);
    const int i_d = inner.add(st[c_d]), i_k = inner.add(kblk), i_v = inner.add(vblk), i_ks = inner.add(ks);
    const int i_kmin = inner.add(kmin), i_qseg = c_qseg >= 0 ? inner.add(st[c_qseg]) : -1;
    const int i_kvseg = inner.add_if(kvseg_blk), i_dq = inner.add(st[c_dq]);
    const int i_dk = inner.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.bk, a.Dh}, 0));
    const int i_dv = inner.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.bk, a.Dh}, 0));
    const std::vector<Val> fin = counted_loop(w, lo, hi, inner.values, [&](Writer& w, const Val& qb,
                                                                          std::span<const Val> in) {
      const Val zero = i32(w, 0);
      const Val qs = block_start(w, qb, a.bq, a.T);
      const Val qmin = w.binary("stablehlo.multiply", qb, i32(w, a.bq));
      const std::vector<Val> q_at = {zero, zero, zero, qs, zero};
      const std::vector<Val> row_at = {zero, zero, zero, qs};
      const std::vector<int64_t> q_sizes = {a.B, a.K, a.G, a.bq, a.Dh};
      const std::vector<int64_t> row_sizes = {a.B, a.K, a.G, a.bq};
      const std::string q_type = a.acc_type({a.B, a.K, a.G, a.bq, a.Dh});
      const std::string row_type = a.acc_type({a.B, a.K, a.G, a.bq});
      const Val qblk = dynamic_slice(w, in[i_q], q_at, q_sizes, q_type);
      const Val doblk = dynamic_slice(w, in[i_do], q_at, q_sizes, q_type);
      const Val lse_blk = dynamic_slice(w, in[i_lse], row_at, row_sizes, row_type);
      const Val d_blk = dynamic_slice(w, in[i_d], row_at, row_sizes, row_type);
      std::optional<Val> qseg_blk;
      if (i_qseg >= 0) {
        qseg_blk = dynamic_slice(w, in[i_qseg], std::vector<Val>{zero, qs}, std::vector<int64_t>{a.B, a.bq},
                                 tensor_type(ir::DType::kS32, std::vector<int64_t>{a.B, a.bq}));
      }
      const std::optional<Val> mask =
          tile_mask(w, a, a.bq, a.bk, qs, a.ragged_q() ? &qmin : nullptr, in[i_ks], a.ragged_k() ? &in[i_kmin] : nullptr,
                    ptr(qseg_blk), at(in, i_kvseg));
      const TileGrads g = tile_grads(w, a, qblk, doblk, lse_blk, d_blk, in[i_k], in[i_v], mask, a.bq, a.bk);
      std::vector<Val> next(in.begin(), in.end());
      next[i_dq] = add_at(w, in[i_dq], g.dq, q_at, q_sizes);
      next[i_dk] = w.binary("stablehlo.add", in[i_dk], g.dk);
      next[i_dv] = w.binary("stablehlo.add", in[i_dv], g.dv);
      return next;
    });
    const std::vector<Val> kv_at = {zero, zero, ks, zero};
    const std::vector<int64_t> kv_blk = {a.B, a.K, a.bk, a.Dh};
    std::vector<Val> next(st.begin(), st.end());
    next[c_dq] = fin[i_dq];
    next[c_dk] = add_at(w, st[c_dk], fin[i_dk], kv_at, kv_blk);
    next[c_dv] = add_at(w, st[c_dv], fin[i_dv], kv_at, kv_blk);
    return next;
  });
  return finish(done[c_dq], done[c_dk], done[c_dv]);
}

}  // namespace

void register_attention_grad_lowering(LoweringTable& table) {
  table.add(ir::Opcode::kAttentionGrad, lower_attention_grad);
}

}  // namespace kiln::backend::pjrt
