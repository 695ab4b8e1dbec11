// Fused attention (flash attention with GPT-OSS sinks) and its gradient.
//
//   attention(q, k, v [, sinks] [, q_segment, kv_segment]), scale=S, causal=0|1, window=W
//     q [B,T,H,Dh], k and v [B,S,K,Dh] (H a multiple of K: query head h reads kv head
//     h / (H/K)), sinks [H] (any float dtype), q_segment [B,T] and kv_segment [B,S] s32.
//     -> (out [B,T,H,Dh] in q's dtype, lse [B,H,T] in f32 (f64 for f64 inputs))
//
//   Query i may see key j when (causal=0 or j <= i), (window=0 or j > i - W: W keys
//   including self; needs causal=1) and q_segment[i] == kv_segment[j]. With z_ij =
//   S * q_i . k_j over the allowed keys and s_h the sink logit,
//     lse_i = log(exp(s_h) + sum_j exp(z_ij)),  p_ij = exp(z_ij - lse_i),  out_i = sum_j p_ij v_j.
//   A row with no allowed key (only possible with segments) gives out 0 and lse s_h (-inf
//   without sinks). Which optional operands are present follows from the operand count
//   (3: none, 4: sinks, 5: segments, 6: both).
//
//   attention_grad(q, k, v [, sinks] [, q_segment, kv_segment], out, lse, dout, dlse), same
//   attrs -> (dq, dk, dv [, dsinks]) in the dtypes of q, k, v, sinks. The flash backward:
//   p is recomputed from lse, D_i = dout_i . out_i - dlse_i, ds_ij = p_ij (dout_i . v_j - D_i),
//   dq_i = S sum_j ds_ij k_j, dk_j = S sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i and
//   dsinks_h = -sum_{b,i} p_sink,i D_i with p_sink = exp(s_h - lse_i). It has no gradient.
//
// The gradient rule of attention emits one attention_grad, so a backend with a fused
// backward kernel runs the whole backward in one call. The reference evaluations
// accumulate in double.
#include <cmath>
#include <limits>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;

// Operand positions; -1 when absent.
struct Slots {
  int sinks = -1, q_seg = -1, kv_seg = -1;
  int out = -1, lse = -1, dout = -1, dlse = -1;  // attention_grad only
};

Slots slots(int n, bool grad) {
  Slots s;
  int opt = grad ? n - 7 : n - 3;  // 0: none, 1: sinks, 2: segments, 3: both
  int i = 3;
  if (opt == 1 || opt == 3) s.sinks = i++;
  if (opt >= 2) {
    s.q_seg = i++;
    s.kv_seg = i++;
  }
  if (grad) {
    s.out = i++;
    s.lse = i++;
    s.dout = i++;
    s.dlse = i++;
  }
  return s;
}

DType stats_dtype(DType d) { return d == DType::kF64 ? DType::kF64 : DType::kF32; }

struct Params {
  double scale;
  bool causal;
  int64_t window;
};

Params params(const ir::Attrs& a) {
  return {a.get_float("scale"), a.get_int_or("causal", 0) != 0, a.get_int_or("window", 0)};
}

// ---- shape rules ----

Status check_shape(std::string_view op, const Shape& got, const std::vector<int64_t>& dims, std::string_view what) {
  KILN_RETURN_IF_ERROR(check_array(op, got));
  if (got.dims() != dims) {
    return invalid_argument("{} {} must be {}, got {}", op, what, ir::dims_to_string(dims), got.to_string());
  }
  return ok_status();
}

Result<Shape> infer_common(std::string_view op, const InferContext& ctx, bool grad) {
  int n = static_cast<int>(ctx.operands.size());
  Slots s = slots(n, grad);
  const Shape& q = ctx.operands[0];
  const Shape& k = ctx.operands[1];
  const Shape& v = ctx.operands[2];
  for (const Shape* x : {&q, &k, &v}) {
    KILN_RETURN_IF_ERROR(check_array(op, *x));
    if (x->rank() != 4 || !ir::is_floating(x->dtype())) {
      return invalid_argument("{} wants floating q [B,T,H,Dh], k and v [B,S,K,Dh]; got q {}, k {}, v {}", op,
                              q.to_string(), k.to_string(), v.to_string());
    }
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    return invalid_argument("{} q, k and v must share a dtype, got {}, {}, {}", op, q.to_string(), k.to_string(),
                            v.to_string());
  }
  const int64_t B = q.dim(0), T = q.dim(1), H = q.dim(2), Dh = q.dim(3), S = k.dim(1), K = k.dim(2);
  if (k.dims() != v.dims() || k.dim(0) != B || k.dim(3) != Dh) {
    return invalid_argument("{} k and v must be [{}, S, K, {}] alike, got k {}, v {}", op, B, Dh, k.to_string(),
                            v.to_string());
  }
  if (K == 0 || H % K != 0) return invalid_argument("{} {} query heads are not a multiple of {} kv heads", op, H, K);
  Params p = params(ctx.attrs);
  if (ctx.attrs.get_int_or("causal", 0) != 0 && ctx.attrs.get_int_or("causal", 0) != 1) {
    return invalid_argument("{} causal must be 0 or 1", op);
  }
  if (p.window < 0) return invalid_argument("{} window={} must be >= 0", op, p.window);
  if (p.window > 0 && !p.causal) return invalid_argument("{} window={} needs causal=1", op, p.window);
  if (s.sinks >= 0) {
    const Shape& sk = ctx.operands[s.sinks];
    KILN_RETURN_IF_ERROR(check_shape(op, sk, {H}, "sinks"));
    if (!ir::is_floating(sk.dtype())) return invalid_argument("{} sinks must be floating, got {}", op, sk.to_string());
  }
  if (s.q_seg >= 0) {
    KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.q_seg], {B, T}, "q_segment"));
    KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.kv_seg], {B, S}, "kv_segment"));
    if (ctx.operands[s.q_seg].dtype() != DType::kS32 || ctx.operands[s.kv_seg].dtype() != DType::kS32) {
      return invalid_argument("{} segment ids must be s32", op);
    }
  }
  Shape lse(stats_dtype(q.dtype()), {B, H, T});
  if (!grad) return Shape::tuple({q, lse});
  KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.out], q.dims(), "out"));
  KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.lse], lse.dims(), "lse"));
  KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.dout], q.dims(), "dout"));
  KILN_RETURN_IF_ERROR(check_shape(op, ctx.operands[s.dlse], lse.dims(), "dlse"));
  std::vector<Shape> elems = {q, k, v};
  if (s.sinks >= 0) elems.push_back(ctx.operands[s.sinks]);
  return Shape::tuple(elems);
}

Result<Shape> infer_attention(const InferContext& ctx) { return infer_common("attention", ctx, false); }
Result<Shape> infer_attention_grad(const InferContext& ctx) { return infer_common("attention_grad", ctx, true); }

// ---- reference evaluation ----

struct Dims {
  int64_t B, T, H, Dh, S, K, G;
};

Dims dims_of(const ir::Literal& q, const ir::Literal& k) {
  const auto& qd = q.shape().dims();
  const auto& kd = k.shape().dims();
  return {qd[0], qd[1], qd[2], qd[3], kd[1], kd[2], qd[2] / kd[2]};
}

bool allowed(const Params& p, const ir::Literal* qs, const ir::Literal* ks, int64_t b, int64_t i, int64_t j,
             int64_t T, int64_t S) {
  if (p.causal && j > i) return false;
  if (p.window > 0 && j <= i - p.window) return false;
  if (qs && qs->at(b * T + i) != ks->at(b * S + j)) return false;
  return true;
}

// Calls fn(b, h, i, logits of the allowed keys as (j, z) pairs, sink logit or -inf).
template <typename Fn>
void for_each_row(const Instr& instr, std::span<const ir::Literal* const> args, const Slots& s, Fn&& fn) {
  const ir::Literal& q = *args[0];
  const ir::Literal& k = *args[1];
  Dims d = dims_of(q, k);
  Params p = params(instr.attrs());
  const ir::Literal* qs = s.q_seg >= 0 ? args[s.q_seg] : nullptr;
  const ir::Literal* ks = s.kv_seg >= 0 ? args[s.kv_seg] : nullptr;
  std::vector<std::pair<int64_t, double>> z;
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t kh = h / d.G;
      const double sink = s.sinks >= 0 ? args[s.sinks]->at(h) : -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < d.T; ++i) {
        z.clear();
        const double* qi = q.values().data() + ((b * d.T + i) * d.H + h) * d.Dh;
        for (int64_t j = 0; j < d.S; ++j) {
          if (!allowed(p, qs, ks, b, i, j, d.T, d.S)) continue;
          const double* kj = k.values().data() + ((b * d.S + j) * d.K + kh) * d.Dh;
          double dot = 0;
          for (int64_t e = 0; e < d.Dh; ++e) dot += qi[e] * kj[e];
          z.emplace_back(j, p.scale * dot);
        }
        fn(b, h, kh, i, z, sink);
      }
    }
  }
}

double row_lse(const std::vector<std::pair<int64_t, double>>& z, double sink) {
  double m = sink;
  for (const auto& [j, x] : z) m = std::max(m, x);
  if (m == -std::numeric_limits<double>::infinity()) return m;
  double sum = std::exp(sink - m);
  for (const auto& [j, x] : z) sum += std::exp(x - m);
  return m + std::log(sum);
}

ir::Literal eval_attention(const Instr& instr, std::span<const ir::Literal* const> args) {
  Slots s = slots(static_cast<int>(args.size()), false);
  const ir::Literal& v = *args[2];
  Dims d = dims_of(*args[0], *args[1]);
  std::vector<double> out(d.B * d.T * d.H * d.Dh, 0.0), lse(d.B * d.H * d.T);
  for_each_row(instr, args, s, [&](int64_t b, int64_t h, int64_t kh, int64_t i, const auto& z, double sink) {
    double l = row_lse(z, sink);
    lse[(b * d.H + h) * d.T + i] = l;
    double* o = out.data() + ((b * d.T + i) * d.H + h) * d.Dh;
    for (const auto& [j, x] : z) {
      double pij = std::exp(x - l);
      const double* vj = v.values().data() + ((b * d.S + j) * d.K + kh) * d.Dh;
      for (int64_t e = 0; e < d.Dh; ++e) o[e] += pij * vj[e];
    }
  });
  return ir::Literal::tuple({ir::Literal(instr.shape().element(0), std::move(out)),
                             ir::Literal(instr.shape().element(1), std::move(lse))});
}

ir::Literal eval_attention_grad(const Instr& instr, std::span<const ir::Literal* const> args) {
  Slots s = slots(static_cast<int>(args.size()), true);
  const ir::Literal& q = *args[0];
  const ir::Literal& k = *args[1];
  const ir::Literal& v = *args[2];
  const ir::Literal& out = *args[s.out];
  const ir::Literal& lse = *args[s.lse];
  const ir::Literal& dout = *args[s.dout];
  const ir::Literal& dlse = *args[s.dlse];
  Dims d = dims_of(q, k);
  const double scale = params(instr.attrs()).scale;
  std::vector<double> dq(q.values().size(), 0.0), dk(k.values().size(), 0.0), dv(v.values().size(), 0.0),
      dsinks(d.H, 0.0);
  for_each_row(instr, args, s, [&](int64_t b, int64_t h, int64_t kh, int64_t i, const auto& z, double sink) {
    const int64_t qo = ((b * d.T + i) * d.H + h) * d.Dh;
    const int64_t r = (b * d.H + h) * d.T + i;
    const double l = lse.at(r);
    double D = -dlse.at(r);
    for (int64_t e = 0; e < d.Dh; ++e) D += dout.at(qo + e) * out.at(qo + e);
    if (s.sinks >= 0 && l != -std::numeric_limits<double>::infinity()) dsinks[h] -= std::exp(sink - l) * D;
    for (const auto& [j, x] : z) {
      const int64_t ko = ((b * d.S + j) * d.K + kh) * d.Dh;
      const double pij = std::exp(x - l);
      double dp = 0;
      for (int64_t e = 0; e < d.Dh; ++e) dp += dout.at(qo + e) * v.at(ko + e);
      const double ds = pij * (dp - D) * scale;
      for (int64_t e = 0; e < d.Dh; ++e) {
        dq[qo + e] += ds * k.at(ko + e);
        dk[ko + e] += ds * q.at(qo + e);
        dv[ko + e] += pij * dout.at(qo + e);
      }
    }
  });
  std::vector<ir::Literal> elems = {ir::Literal(instr.shape().element(0), std::move(dq)),
                                    ir::Literal(instr.shape().element(1), std::move(dk)),
                                    ir::Literal(instr.shape().element(2), std::move(dv))};
  if (s.sinks >= 0) elems.emplace_back(instr.shape().element(3), std::move(dsinks));
  return ir::Literal::tuple(std::move(elems));
}

// ---- gradient rule ----

std::vector<Instr*> vjp_attention(VjpContext& c) {
  const int n = c.instr->num_operands();
  Slots s = slots(n, false);
  std::vector<Instr*> operands;
  for (int i = 0; i < n; ++i) operands.push_back(c.operand(i));
  Instr* out = c.b.get_tuple_element(c.instr, 0);
  Instr* lse = c.b.get_tuple_element(c.instr, 1);
  operands.push_back(out);
  operands.push_back(lse);
  operands.push_back(c.dout(0));
  operands.push_back(c.dout(1));
  Instr* g = c.b.emit(Opcode::kAttentionGrad, operands, c.instr->attrs());
  std::vector<Instr*> grads(n, nullptr);
  for (int i = 0; i < 3; ++i) grads[i] = c.b.get_tuple_element(g, i);
  if (s.sinks >= 0) grads[s.sinks] = c.b.get_tuple_element(g, 3);
  return grads;
}

// ---- sharding rules and cost ----

// Batch and query dims follow the query; the contracted head dim and the kv dims do not map.
std::vector<std::vector<int>> attention_dim_map(const Instr& instr, bool grad) {
  Slots s = slots(instr.num_operands(), grad);
  std::vector<std::vector<int>> m = {{0, 1, 2, -1}, {0, -1, -1, -1}, {0, -1, -1, -1}};
  if (s.sinks >= 0) m.push_back({2});
  if (s.q_seg >= 0) {
    m.push_back({0, 1});
    m.push_back({0, -1});
  }
  if (grad) {
    m.push_back({0, 1, 2, -1});  // out
    m.push_back({0, 2, 1});      // lse
    m.push_back({0, 1, 2, -1});  // dout
    m.push_back({0, 2, 1});      // dlse
  }
  return m;
}

// Allowed (query, key) pairs per (batch, head), ignoring segments.
double allowed_pairs(const Instr& instr) {
  const Shape& q = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  Params p = params(instr.attrs());
  const int64_t T = q.dim(1), S = k.dim(1);
  if (!p.causal) return static_cast<double>(T) * static_cast<double>(S);
  double pairs = 0;
  for (int64_t i = 0; i < T; ++i) {
    int64_t hi = std::min(i, S - 1);
    int64_t lo = p.window > 0 ? std::max<int64_t>(0, i - p.window + 1) : 0;
    if (hi >= lo) pairs += static_cast<double>(hi - lo + 1);
  }
  return pairs;
}

// Forward: q.k and p.v (2 flops per multiply-add each) per pair; backward: q.k, dout.v,
// dq, dk and dv.
Cost attention_cost(const Instr& instr, bool grad) {
  Cost c = internal::memory_cost(instr);
  const Shape& q = instr.operand(0)->shape();
  double rows = static_cast<double>(q.dim(0)) * static_cast<double>(q.dim(2));
  double pairs = rows * allowed_pairs(instr);
  c.flops = (grad ? 10.0 : 4.0) * pairs * static_cast<double>(q.dim(3));
  c.transcendentals = pairs;
  return c;
}

// ---- examples ----

struct Case {
  int64_t B = 2, T = 5, S = 5, H = 4, K = 2, Dh = 3;
  bool sinks = true, segments = false;
  std::string attrs;
};

// Segment ids for the examples: two documents per row, split at different places.
std::string segment_constant(int64_t B, int64_t L) {
  std::vector<std::string> ids;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < L; ++t) ids.push_back(t < 2 + b ? "1" : "2");
  }
  return fmt::format("s32[{},{}] constant({{{}}})", B, L, fmt::join(ids, ", "));
}

std::string operand_decls(const Case& c, std::vector<std::string>& names) {
  std::string text;
  int index = 0;
  auto param = [&](const std::string& name, const std::string& type) {
    text += fmt::format("  %{} = {} parameter(), index={}\n", name, type, index++);
    names.push_back("%" + name);
  };
  param("q", fmt::format("f32[{},{},{},{}]", c.B, c.T, c.H, c.Dh));
  param("k", fmt::format("f32[{},{},{},{}]", c.B, c.S, c.K, c.Dh));
  param("v", fmt::format("f32[{},{},{},{}]", c.B, c.S, c.K, c.Dh));
  if (c.sinks) param("sinks", fmt::format("f32[{}]", c.H));
  if (c.segments) {
    text += fmt::format("  %qseg = {}\n  %kvseg = {}\n", segment_constant(c.B, c.T), segment_constant(c.B, c.S));
    names.push_back("%qseg");
    names.push_back("%kvseg");
  }
  return text;
}

// Sinks drawn from [1, 3]: large against logits of a few units, so they matter.
std::vector<std::pair<double, double>> ranges(const Case& c) {
  std::vector<std::pair<double, double>> r = {{-2, 2}, {-2, 2}, {-2, 2}};
  if (c.sinks) r.push_back({1, 3});
  return r;
}

OpExample attention_example(const Case& c) {
  std::vector<std::string> names;
  std::string decls = operand_decls(c, names);
  return {fmt::format("module @ex\n\nENTRY computation @main {{\n{}"
                      "  ROOT %a = (f32[{},{},{},{}], f32[{},{},{}]) attention({}), {}\n}}\n",
                      decls, c.B, c.T, c.H, c.Dh, c.B, c.H, c.T, fmt::join(names, ", "), c.attrs),
          ranges(c)};
}

OpExample attention_grad_example(const Case& c) {
  std::vector<std::string> names;
  std::string decls = operand_decls(c, names);
  int index = 3 + (c.sinks ? 1 : 0);
  std::string q = fmt::format("f32[{},{},{},{}]", c.B, c.T, c.H, c.Dh);
  std::string kv = fmt::format("f32[{},{},{},{}]", c.B, c.S, c.K, c.Dh);
  std::string lse = fmt::format("f32[{},{},{}]", c.B, c.H, c.T);
  for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"out", q}, {"lse", lse}, {"dout", q}, {"dlse", lse}}) {
    decls += fmt::format("  %{} = {} parameter(), index={}\n", name, type, index++);
    names.push_back("%" + name);
  }
  std::string result = fmt::format("({}, {}, {}{})", q, kv, kv, c.sinks ? fmt::format(", f32[{}]", c.H) : "");
  auto r = ranges(c);
  r.push_back({-1, 1});  // out
  r.push_back({2, 4});   // lse (above every row's logits: probabilities below 1)
  return {fmt::format("module @ex\n\nENTRY computation @main {{\n{}  ROOT %g = {} attention_grad({}), {}\n}}\n", decls,
                      result, fmt::join(names, ", "), c.attrs),
          r};
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({.attrs = "causal=1, scale=0.5"});                             // causal with sinks
  v.push_back({.attrs = "causal=1, scale=0.5, window=2"});                   // window shorter than T
  v.push_back({.attrs = "causal=1, scale=0.5, window=8"});                   // window longer than T
  v.push_back({.segments = true, .attrs = "causal=1, scale=0.7, window=3"});  // packed, sliding
  v.push_back({.sinks = false, .attrs = "causal=1, scale=0.5"});             // no sinks
  v.push_back({.B = 1, .T = 4, .S = 6, .H = 2, .K = 1, .Dh = 2, .sinks = false, .attrs = "scale=0.5"});  // cross
  v.push_back({.segments = true, .attrs = "scale=0.6"});                      // non-causal, packed
  return v;
}

}  // namespace

void register_attention_ops(OpTable& table) {
  const std::vector<AttrSpec> attrs = {{"scale", AttrKind::kFloat, true, {}},
                                       {"causal", AttrKind::kInt, false, {}},
                                       {"window", AttrKind::kInt, false, {}}};
  {
    OpDef d;
    d.opcode = Opcode::kAttention;
    d.kernel_class = KernelClass::kAttention;
    d.min_operands = 3;
    d.max_operands = 6;
    d.attrs = attrs;
    d.infer = infer_attention;
    d.eval = eval_attention;
    d.grad = GradKind::kRule;
    d.vjp = vjp_attention;
    d.dim_map = [](const Instr& i) { return attention_dim_map(i, false); };
    d.batch_rows = [](const Instr& i) {  // out [B,T,H,Dh], lse [B,H,T]
      return std::vector<bool>(i.shape().elements().size(), true);
    };
    d.cost = [](const Instr& i) { return attention_cost(i, false); };
    for (const Case& c : cases()) d.examples.push_back(attention_example(c));
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kAttentionGrad;
    d.kernel_class = KernelClass::kAttention;
    d.min_operands = 7;
    d.max_operands = 10;
    d.attrs = attrs;
    d.infer = infer_attention_grad;
    d.eval = eval_attention_grad;
    d.grad = GradKind::kNone;
    d.dim_map = [](const Instr& i) { return attention_dim_map(i, true); };
    d.batch_rows = [](const Instr& i) {  // dq, dk, dv [B,...]; dsinks [H] (with sinks) sums over the batch
      std::vector<bool> rows(i.shape().elements().size(), true);
      if (rows.size() == 4) rows[3] = false;
      return rows;
    };
    d.cost = [](const Instr& i) { return attention_cost(i, true); };
    for (const Case& c : cases()) d.examples.push_back(attention_grad_example(c));
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
