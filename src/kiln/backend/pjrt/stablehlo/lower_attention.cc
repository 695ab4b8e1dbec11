// attention: flash attention with GQA, causal and sliding-window masks, segment ids and
// sinks (ops/attention_ops.cc), without ever building the [B, H, T, S] score matrix of a
// long sequence.
//
//   q [B,T,H,Dh], k and v [B,S,K,Dh] [, sinks [H]] [, q_segment [B,T], kv_segment [B,S]]
//     -> out [B,T,H,Dh] (q's dtype), lse [B,H,T] (f32; f64 for f64)
//
// Direct form (T and S within one block): scores [B,K,G,T,S], masked, one online-softmax
// step from the sink (below), out and lse.
//
// Blocked form: stablehlo.while over query blocks of bq rows; inside it, stablehlo.while
// over the key blocks the block's rows can see (causal: none past its last row; window:
// none before its first row's window), each a dynamic_slice of k and v: scores
// [B,K,G,bq,bk], then the online softmax
//   m' = max(m, rowmax z), alpha = exp(m - m'), p = exp(z - m'),
//   l' = alpha l + rowsum p, o' = alpha o + p v,
// starting from the sink as a key with no value (m = sink, l = 1, o = 0). The block's out
// o / l and lse m + log l go in place with dynamic_update_slice. A row that sees no key and
// has no sink ends with m = -inf, l = 0: out 0 and lse -inf, as the reference.
#include "kiln/backend/pjrt/stablehlo/lower_attention_blocks.h"

namespace kiln::backend::pjrt {

namespace {

using namespace attention;

// A query block's online-softmax state: running max m and sum l [B,K,G,bq], the
// unnormalised output o [B,K,G,bq,Dh].
struct Online {
  Val m, l, o;
};

// The state before any key: the sink (sink_kg [K,G]) is a key whose logit is the sink and
// whose value is 0.
Online online_init(Writer& w, const Info& a, int64_t bq, const Val* sink_kg) {
  const std::vector<int64_t> stats = {a.B, a.K, a.G, bq};
  const std::string stats_type = tensor_type(a.acc, stats);
  Online s;
  if (sink_kg != nullptr) {
    s.m = w.broadcast(*sink_kg, stats_type, std::vector<int64_t>{1, 2});
    s.l = w.op("stablehlo.select",
               {w.compare(s.m, w.splat(a.acc, stats, -kInf), "EQ"), w.splat(a.acc, stats, 0), w.splat(a.acc, stats, 1)},
               stats_type);
  } else {
    s.m = w.splat(a.acc, stats, -kInf);
    s.l = w.splat(a.acc, stats, 0);
  }
  s.o = w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, bq, a.Dh}, 0);
  return s;
}

// One key tile: zm the masked scores [B,K,G,bq,bk] (-inf where masked), vblk [B,bk,K,Dh].
Online online_step(Writer& w, const Info& a, const Online& s, const Val& zm, const Val& vblk, int64_t bq, int64_t bk) {
  const std::vector<int64_t> stats = {a.B, a.K, a.G, bq};
  const std::string stats_type = tensor_type(a.acc, stats);
  const std::string tile_type = a.acc_type({a.B, a.K, a.G, bq, bk});
  const std::string o_type = a.acc_type({a.B, a.K, a.G, bq, a.Dh});
  const std::vector<int64_t> rows = {0, 1, 2, 3};
  const std::vector<int64_t> last = {4};
  const Val row_max = w.reduce(zm, w.scalar(a.acc, -kInf), last, "stablehlo.maximum", stats_type);
  const Val m = w.binary("stablehlo.maximum", s.m, row_max);
  const Val m_safe = w.op("stablehlo.select",
                          {w.compare(m, w.splat(a.acc, stats, -kInf), "EQ"), w.splat(a.acc, stats, 0), m}, stats_type);
  const Val alpha = w.unary("stablehlo.exponential", w.binary("stablehlo.subtract", s.m, m_safe));
  const Val p = w.unary("stablehlo.exponential", w.binary("stablehlo.subtract", zm, w.broadcast(m_safe, tile_type, rows)));
  const Val row_sum = w.reduce(p, w.scalar(a.acc, 0), last, "stablehlo.add", stats_type);
  const Val l = w.binary("stablehlo.add", w.binary("stablehlo.multiply", s.l, alpha), row_sum);
  const Val pv = dot(w, p, vblk, {0, 1}, {0, 2}, {4}, {1}, o_type);
  const Val o = w.binary("stablehlo.add", w.binary("stablehlo.multiply", s.o, w.broadcast(alpha, o_type, rows)), pv);
  return {m, l, o};
}

// The scores z [B,K,G,bq,bk] with -inf where the mask says no.
Val masked(Writer& w, const Info& a, const Val& z, const std::optional<Val>& mask, int64_t bq, int64_t bk) {
  if (!mask) return z;
  return w.op("stablehlo.select", {*mask, z, w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, bq, bk}, -kInf)},
              z.type);
}

// out o / l [B,K,G,bq,Dh] and lse m + log l [B,K,G,bq] of a finished block.
std::pair<Val, Val> online_finish(Writer& w, const Info& a, const Online& s, int64_t bq) {
  const std::vector<int64_t> stats = {a.B, a.K, a.G, bq};
  const std::string stats_type = tensor_type(a.acc, stats);
  const Val m_safe = w.op("stablehlo.select",
                          {w.compare(s.m, w.splat(a.acc, stats, -kInf), "EQ"), w.splat(a.acc, stats, 0), s.m}, stats_type);
  const Val lse = w.binary("stablehlo.add", m_safe, w.unary("stablehlo.log", s.l));
  const Val denominator = w.op(
      "stablehlo.select", {w.compare(s.l, w.splat(a.acc, stats, 0), "EQ"), w.splat(a.acc, stats, 1), s.l}, stats_type);
  const Val out = w.binary("stablehlo.divide", s.o,
                           w.broadcast(denominator, s.o.type, std::vector<int64_t>{0, 1, 2, 3}));
  return {out, lse};
}

Result<Vals> lower_attention(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const Info a = info_of(instr, /*grad=*/false);
  const Val qt = heads_major(w, a, array_operand(operands, 0));
  const std::string kv_type = a.acc_type({a.B, a.S, a.K, a.Dh});
  const Val k = w.convert(array_operand(operands, 1), kv_type);
  const Val v = w.convert(array_operand(operands, 2), kv_type);
  std::optional<Val> sink_kg, qseg, kvseg;
  if (a.sinks >= 0) {
    const Val sinks = w.convert(array_operand(operands, a.sinks), a.acc_type({a.H}));
    sink_kg = w.reshape(sinks, a.acc_type({a.K, a.G}));
  }
  if (a.q_seg >= 0) qseg = array_operand(operands, a.q_seg), kvseg = array_operand(operands, a.kv_seg);
  const std::string lse_type = tensor_type(instr.shape().element(1));

  if (a.direct()) {
    const Val zero = i32(w, 0);
    const std::optional<Val> mask =
        tile_mask(w, a, a.T, a.S, zero, nullptr, zero, nullptr, ptr(qseg), ptr(kvseg));
    const Val zm = masked(w, a, tile_scores(w, a, qt, k, a.T, a.S), mask, a.T, a.S);
    const Online s = online_step(w, a, online_init(w, a, a.T, ptr(sink_kg)), zm, v, a.T, a.S);
    const auto [out, lse] = online_finish(w, a, s, a.T);
    return Vals{heads_minor(w, a, out, a.in), w.reshape(lse, lse_type)};
  }

  // Blocked: the query-block loop carries the inputs and the results it fills in.
  Carry outer;
  const int c_q = outer.add(qt), c_k = outer.add(k), c_v = outer.add(v);
  const int c_sink = outer.add_if(sink_kg);
  const int c_qseg = outer.add_if(qseg), c_kvseg = outer.add_if(kvseg);
  const int c_out = outer.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, a.T, a.Dh}, 0));
  const int c_lse = outer.add(w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, a.T}, 0));
  const std::vector<Val> done = counted_loop(w, i32(w, 0), i32(w, a.nq), outer.values, [&](Writer& w, const Val& qb,
                                                                                              std::span<const Val> st) {
    const Val zero = i32(w, 0);
    const Val qs = block_start(w, qb, a.bq, a.T);
    const std::vector<Val> q_at = {zero, zero, zero, qs, zero};
    const Val qblk = dynamic_slice(w, st[c_q], q_at, std::vector<int64_t>{a.B, a.K, a.G, a.bq, a.Dh},
                                   a.acc_type({a.B, a.K, a.G, a.bq, a.Dh}));
    std::optional<Val> qseg_blk;
    if (c_qseg >= 0) {
      qseg_blk = dynamic_slice(w, st[c_qseg], std::vector<Val>{zero, qs}, std::vector<int64_t>{a.B, a.bq},
                               tensor_type(ir::DType::kS32, std::vector<int64_t>{a.B, a.bq}));
    }
    // The key blocks these rows [qs, qs + bq) can see.
    Val lo = zero, hi = i32(w, a.nk);
    if (a.causal) {
      const Val last_row = w.binary("stablehlo.add", qs, i32(w, a.bq - 1));
      hi = w.binary("stablehlo.minimum", hi,
                    w.binary("stablehlo.add", w.binary("stablehlo.divide", last_row, i32(w, a.bk)), i32(w, 1)));
    }
    if (a.window > 0) {
      const Val first_key = w.binary("stablehlo.maximum", zero, w.binary("stablehlo.subtract", qs, i32(w, a.window - 1)));
      lo = w.binary("stablehlo.divide", first_key, i32(w, a.bk));
    }
    const Online init = online_init(w, a, a.bq, at(st, c_sink));
    Carry inner;
    const int i_q = inner.add(qblk), i_k = inner.add(st[c_k]), i_v = inner.add(st[c_v]), i_qs = inner.add(qs);
    const int i_qseg = inner.add_if(qseg_blk), i_kvseg = c_kvseg >= 0 ? inner.add(st[c_kvseg]) : -1;
    const int i_m = inner.add(init.m), i_l = inner.add(init.l), i_o = inner.add(init.o);
    const std::vector<Val> fin = counted_loop(w, lo, hi, inner.values, [&](Writer& w, const Val& kb,
                                                                          std::span<const Val> in) {
      const Val zero = i32(w, 0);
      const Val ks = block_start(w, kb, a.bk, a.S);
      const Val kmin = w.binary("stablehlo.multiply", kb, i32(w, a.bk));
      const std::vector<Val> k_at = {zero, ks, zero, zero};
      const std::vector<int64_t> kv_sizes = {a.B, a.bk, a.K, a.Dh};
      const Val kblk = dynamic_slice(w, in[i_k], k_at, kv_sizes, a.acc_type({a.B, a.bk, a.K, a.Dh}));
      const Val vblk = dynamic_slice(w, in[i_v], k_at, kv_sizes, a.acc_type({a.B, a.bk, a.K, a.Dh}));
      std::optional<Val> kvseg_blk;
      if (i_kvseg >= 0) {
        kvseg_blk = dynamic_slice(w, in[i_kvseg], std::vector<Val>{zero, ks}, std::vector<int64_t>{a.B, a.bk},
                                  tensor_type(ir::DType::kS32, std::vector<int64_t>{a.B, a.bk}));
      }
      const std::optional<Val> mask = tile_mask(w, a, a.bq, a.bk, in[i_qs], nullptr, ks, a.ragged_k() ? &kmin : nullptr,
                                                at(in, i_qseg), ptr(kvseg_blk));
      const Val zm = masked(w, a, tile_scores(w, a, in[i_q], kblk, a.bq, a.bk), mask, a.bq, a.bk);
      const Online s = online_step(w, a, Online{in[i_m], in[i_l], in[i_o]}, zm, vblk, a.bq, a.bk);
      std::vector<Val> next(in.begin(), in.end());
      next[i_m] = s.m, next[i_l] = s.l, next[i_o] = s.o;
      return next;
    });
    const auto [out_blk, lse_blk] = online_finish(w, a, Online{fin[i_m], fin[i_l], fin[i_o]}, a.bq);
    std::vector<Val> next(st.begin(), st.end());
    next[c_out] = dynamic_update_slice(w, st[c_out], out_blk, q_at);
    next[c_lse] = dynamic_update_slice(w, st[c_lse], lse_blk, std::vector<Val>{zero, zero, zero, qs});
    return next;
  });
  return Vals{heads_minor(w, a, done[c_out], a.in), w.reshape(done[c_lse], lse_type)};
}

}  // namespace

void register_attention_lowerings(LoweringTable& table) {
  table.add(ir::Opcode::kAttention, lower_attention);
  register_attention_grad_lowering(table);
}

}  // namespace kiln::backend::pjrt
