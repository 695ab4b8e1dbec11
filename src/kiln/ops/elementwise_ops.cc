// Elementwise ops: unary, binary and ternary functions applied element by element to
// operands of equal shape. Each entry gives the scalar function (reference evaluation in
// double, rounded to the result dtype), the gradient rule and the C++ snippet.
#include <cmath>
#include <limits>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::elementwise_cost;
using internal::identity_dim_map;
using internal::same_size_dims;

// ---- shape rules ----

Result<Shape> same_shape_rule(const InferContext& ctx, std::string_view op) {
  for (const auto& s : ctx.operands) KILN_RETURN_IF_ERROR(internal::check_array(op, s));
  for (size_t i = 1; i < ctx.operands.size(); ++i) {
    if (ctx.operands[i] != ctx.operands[0]) {
      return invalid_argument("{} operands must have equal shapes, got {} and {}", op, ctx.operands[0].to_string(),
                              ctx.operands[i].to_string());
    }
  }
  return ctx.operands[0];
}

Result<Shape> float_unary_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape s, same_shape_rule(ctx, "elementwise op"));
  if (!ir::is_floating(s.dtype())) return invalid_argument("operand must be floating point, got {}", s.to_string());
  return s;
}

Result<Shape> numeric_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape s, same_shape_rule(ctx, "elementwise op"));
  if (s.dtype() == DType::kPred) return invalid_argument("operands must be numeric, got {}", s.to_string());
  return s;
}

Result<Shape> pred_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape s, same_shape_rule(ctx, "logical op"));
  if (s.dtype() != DType::kPred) return invalid_argument("operands must be pred, got {}", s.to_string());
  return s;
}

Result<Shape> compare_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape s, same_shape_rule(ctx, "compare"));
  return s.with_dtype(DType::kPred);
}

Result<Shape> is_finite_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape s, float_unary_rule(ctx));
  return s.with_dtype(DType::kPred);
}

Result<Shape> convert_rule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(internal::check_array("convert", ctx.operands[0]));
  KILN_ASSIGN_OR_RETURN(Shape declared, internal::require_declared(ctx, "convert"));
  if (declared.is_tuple() || declared.dims() != ctx.operands[0].dims()) {
    return invalid_argument("convert keeps dimensions: {} cannot become {}", ctx.operands[0].to_string(), declared.to_string());
  }
  return declared;
}

Result<Shape> select_rule(const InferContext& ctx) {
  for (const auto& s : ctx.operands) KILN_RETURN_IF_ERROR(internal::check_array("select", s));
  const Shape& p = ctx.operands[0];
  if (p.dtype() != DType::kPred || p.dims() != ctx.operands[1].dims()) {
    return invalid_argument("select predicate must be pred with the dims of the values, got {}", p.to_string());
  }
  if (ctx.operands[1] != ctx.operands[2]) {
    return invalid_argument("select values must have equal shapes, got {} and {}", ctx.operands[1].to_string(),
                            ctx.operands[2].to_string());
  }
  return ctx.operands[1];
}

// ---- reference evaluation ----

ir::Literal eval_elementwise(const Instr& instr, std::span<const ir::Literal* const> args) {
  const OpDef& def = op_def(instr.opcode());
  int64_t n = instr.shape().num_elements();
  std::vector<double> out(n);
  double x[3];
  for (int64_t i = 0; i < n; ++i) {
    for (size_t a = 0; a < args.size(); ++a) x[a] = args[a]->at(i);
    out[i] = def.scalar(instr, x);
  }
  return ir::Literal(instr.shape(), std::move(out));
}

double compare_scalar(const Instr& instr, const double* x) {
  const std::string& d = instr.attrs().get_string("direction");
  if (d == "eq") return x[0] == x[1];
  if (d == "ne") return x[0] != x[1];
  if (d == "lt") return x[0] < x[1];
  if (d == "le") return x[0] <= x[1];
  if (d == "gt") return x[0] > x[1];
  return x[0] >= x[1];
}

std::string compare_snippet(const Instr& instr, std::span<const std::string> a) {
  const std::string& d = instr.attrs().get_string("direction");
  const char* op = d == "eq" ? "==" : d == "ne" ? "!=" : d == "lt" ? "<" : d == "le" ? "<=" : d == "gt" ? ">" : ">=";
  return fmt::format("({} {} {})", a[0], op, a[1]);
}

const char* cpp_type(DType dtype) {
  switch (dtype) {
    case DType::kPred: return "bool";
    case DType::kS32: return "int32_t";
    case DType::kU32: return "uint32_t";
    case DType::kBF16: return "float";  // bf16 computes in float; stores round to bf16
    case DType::kF32: return "float";
    case DType::kF64: return "double";
  }
  return "float";
}

std::string convert_snippet(const Instr& instr, std::span<const std::string> a) {
  DType to = instr.shape().dtype();
  DType from = instr.operand(0)->shape().dtype();
  if (ir::is_integral(to) && ir::is_floating(from)) {
    // Saturating truncation, as the reference does (a plain cast is undefined out of range).
    return fmt::format("kiln_saturate<{}>({})", cpp_type(to), a[0]);
  }
  return fmt::format("static_cast<{}>({})", cpp_type(to), a[0]);
}

// ---- gradient rules ----
// Each returns one gradient per operand. `g` is the output gradient.

std::vector<Instr*> vjp_neg(VjpContext& c) { return {c.b.neg(c.dout())}; }
std::vector<Instr*> vjp_abs(VjpContext& c) {
  // sign(x) * g, with sign(0) = 0.
  Instr* x = c.operand(0);
  Instr* zero = c.b.zeros_like(x);
  Instr* g = c.dout();
  Instr* pos = c.b.select(c.b.compare(x, zero, "gt"), g, c.b.zeros_like(g));
  Instr* neg = c.b.select(c.b.compare(x, zero, "lt"), c.b.neg(g), c.b.zeros_like(g));
  return {c.b.add(pos, neg)};
}
std::vector<Instr*> vjp_exp(VjpContext& c) { return {c.b.mul(c.dout(), c.instr)}; }
std::vector<Instr*> vjp_log(VjpContext& c) { return {c.b.div(c.dout(), c.operand(0))}; }
std::vector<Instr*> vjp_log1p(VjpContext& c) { return {c.b.div(c.dout(), c.b.add_scalar(c.operand(0), 1.0))}; }
std::vector<Instr*> vjp_sqrt(VjpContext& c) {
  return {c.b.div(c.b.mul_scalar(c.dout(), 0.5), c.instr)};
}
std::vector<Instr*> vjp_rsqrt(VjpContext& c) {
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 * rsqrt(x) / x
  return {c.b.mul(c.b.mul_scalar(c.dout(), -0.5), c.b.div(c.instr, c.operand(0)))};
}
std::vector<Instr*> vjp_tanh(VjpContext& c) {
  Instr* y = c.instr;
  Instr* one_minus_y2 = c.b.sub(c.b.full(y->shape(), 1.0), c.b.mul(y, y));
  return {c.b.mul(c.dout(), one_minus_y2)};
}
std::vector<Instr*> vjp_logistic(VjpContext& c) {
  Instr* y = c.instr;
  Instr* y_1my = c.b.mul(y, c.b.sub(c.b.full(y->shape(), 1.0), y));
  return {c.b.mul(c.dout(), y_1my)};
}
std::vector<Instr*> vjp_sin(VjpContext& c) { return {c.b.mul(c.dout(), c.b.unary(Opcode::kCos, c.operand(0)))}; }
std::vector<Instr*> vjp_cos(VjpContext& c) {
  return {c.b.neg(c.b.mul(c.dout(), c.b.unary(Opcode::kSin, c.operand(0))))};
}
std::vector<Instr*> vjp_convert(VjpContext& c) {
  DType from = c.operand(0)->shape().dtype();
  if (!ir::is_floating(from)) return {nullptr};
  return {c.b.convert(c.dout(), from)};
}
std::vector<Instr*> vjp_copy(VjpContext& c) { return {c.dout()}; }

std::vector<Instr*> vjp_add(VjpContext& c) { return {c.dout(), c.dout()}; }
std::vector<Instr*> vjp_sub(VjpContext& c) { return {c.dout(), c.b.neg(c.dout())}; }
std::vector<Instr*> vjp_mul(VjpContext& c) {
  return {c.b.mul(c.dout(), c.operand(1)), c.b.mul(c.dout(), c.operand(0))};
}
std::vector<Instr*> vjp_div(VjpContext& c) {
  Instr* g_over_b = c.b.div(c.dout(), c.operand(1));
  return {g_over_b, c.b.neg(c.b.mul(g_over_b, c.instr))};  // d/db a/b = -(a/b)/b
}
// max/min: the gradient goes to the chosen operand; at ties it is split in half, as in
// PyTorch and JAX, so the rule is symmetric.
std::vector<Instr*> vjp_max_min(VjpContext& c, const char* wins) {
  Instr* a = c.operand(0);
  Instr* b = c.operand(1);
  Instr* g = c.dout();
  Instr* half = c.b.mul_scalar(g, 0.5);
  Instr* zero = c.b.zeros_like(g);
  Instr* a_wins = c.b.compare(a, b, wins);
  Instr* tie = c.b.compare(a, b, "eq");
  Instr* ga = c.b.select(tie, half, c.b.select(a_wins, g, zero));
  Instr* gb = c.b.select(tie, half, c.b.select(a_wins, zero, g));
  return {ga, gb};
}
std::vector<Instr*> vjp_max(VjpContext& c) { return vjp_max_min(c, "gt"); }
std::vector<Instr*> vjp_min(VjpContext& c) { return vjp_max_min(c, "lt"); }
std::vector<Instr*> vjp_pow(VjpContext& c) {
  Instr* a = c.operand(0);
  Instr* p = c.operand(1);
  Instr* g = c.dout();
  // d/da a^p = p * a^(p-1); d/dp a^p = log(a) * a^p, taken as 0 where a <= 0.
  Instr* da = c.b.mul(g, c.b.mul(p, c.b.binary(Opcode::kPow, a, c.b.add_scalar(p, -1.0))));
  Instr* zero = c.b.zeros_like(a);
  Instr* positive = c.b.compare(a, zero, "gt");
  Instr* safe_a = c.b.select(positive, a, c.b.full(a->shape(), 1.0));
  Instr* dp = c.b.select(positive, c.b.mul(g, c.b.mul(c.b.log(safe_a), c.instr)), zero);
  return {da, dp};
}
std::vector<Instr*> vjp_select(VjpContext& c) {
  Instr* g = c.dout();
  Instr* zero = c.b.zeros_like(g);
  return {nullptr, c.b.select(c.operand(0), g, zero), c.b.select(c.operand(0), zero, g)};
}
// clamp(lo, x, hi): x gets the gradient where lo <= x <= hi (inclusive, as PyTorch's clamp),
// lo where x < lo, hi where x > hi.
std::vector<Instr*> vjp_clamp(VjpContext& c) {
  Instr* lo = c.operand(0);
  Instr* x = c.operand(1);
  Instr* hi = c.operand(2);
  Instr* g = c.dout();
  Instr* zero = c.b.zeros_like(g);
  Instr* below = c.b.compare(x, lo, "lt");
  Instr* above = c.b.compare(x, hi, "gt");
  Instr* glo = c.b.select(below, g, zero);
  Instr* ghi = c.b.select(above, g, zero);
  Instr* gx = c.b.select(below, zero, c.b.select(above, zero, g));
  return {glo, gx, ghi};
}

// ---- examples ----

// A module applying `op` to parameters of the given shapes.
std::string example_ir(std::string_view op, const std::vector<std::string>& operand_shapes, const std::string& result_shape,
                       const std::string& attrs = "") {
  std::string text = "module @example\n\nENTRY computation @main {\n";
  std::string operands;
  for (size_t i = 0; i < operand_shapes.size(); ++i) {
    text += fmt::format("  %p{} = {} parameter(), index={}\n", i, operand_shapes[i], i);
    operands += (i ? ", %p" : "%p") + std::to_string(i);
  }
  text += fmt::format("  ROOT %r = {} {}({}){}\n}}\n", result_shape, op, operands, attrs);
  return text;
}

std::vector<OpExample> default_examples(Opcode opcode, int arity) {
  const std::string f = "f32[2,3]", p = "pred[2,3]";
  std::string_view name = ir::opcode_name(opcode);
  using R = std::pair<double, double>;
  switch (opcode) {
    case Opcode::kLog:
    case Opcode::kSqrt:
    case Opcode::kRsqrt:
    case Opcode::kLog1p: return {{example_ir(name, {f}, f), {R{0.2, 3.0}}}};
    case Opcode::kNot: return {{example_ir(name, {p}, p)}};
    case Opcode::kIsFinite: return {{example_ir(name, {f}, p)}};
    case Opcode::kConvert:
      return {{example_ir(name, {f}, "f64[2,3]")}, {example_ir(name, {f}, "s32[2,3]"), {R{-9.0, 9.0}}},
              {example_ir(name, {"s32[2,3]"}, f)}, {example_ir(name, {f}, "bf16[2,3]")}};
    case Opcode::kDiv:
      return {{example_ir(name, {f, f}, f), {R{-2.0, 2.0}, R{0.5, 2.0}}},
              {example_ir(name, {"s32[2,3]", "s32[2,3]"}, "s32[2,3]"), {R{-9.0, 9.0}, R{1.0, 4.0}}}};
    case Opcode::kPow: return {{example_ir(name, {f, f}, f), {R{0.2, 2.0}, R{-2.0, 2.0}}}};
    case Opcode::kAnd:
    case Opcode::kOr: return {{example_ir(name, {p, p}, p)}};
    case Opcode::kCompare:
      return {{example_ir(name, {f, f}, p, ", direction=lt")}, {example_ir(name, {"s32[2,3]", "s32[2,3]"}, p, ", direction=eq")}};
    case Opcode::kSelect: return {{example_ir(name, {p, f, f}, f)}};
    case Opcode::kClamp: return {{example_ir(name, {f, f, f}, f), {R{-2.0, -0.5}, R{-3.0, 3.0}, R{0.5, 2.0}}}};
    default: return {{example_ir(name, std::vector<std::string>(arity, f), f)}};
  }
}

// ---- registration helpers ----

struct Spec {
  Opcode opcode;
  int arity;
  InferFn infer;
  ScalarFn scalar;
  VjpFn vjp;  // nullptr: no gradient
  const char* snippet_format;  // "({0} + {1})"; nullptr when snippet_fn is used
  SnippetFn snippet_fn;
  double flops;
  double transcendentals;
  std::vector<AttrSpec> attrs = {};
};

std::string format_snippet(const char* f, std::span<const std::string> a) {
  switch (a.size()) {
    case 1: return fmt::format(fmt::runtime(f), a[0]);
    case 2: return fmt::format(fmt::runtime(f), a[0], a[1]);
    default: return fmt::format(fmt::runtime(f), a[0], a[1], a[2]);
  }
}

}  // namespace

void register_elementwise_ops(OpTable& table) {
  // Snippets are C++ expressions over element values; bf16 elements are computed as float.
  // The kernel prelude of a backend provides kiln_saturate<T>, kiln_min, kiln_max (std::min and
  // std::max by value, which vectorize) and kiln_exp (a vectorizable float exp within 1 ulp).
  const std::vector<Spec> specs = {
      {Opcode::kNeg, 1, numeric_rule, [](const Instr&, const double* x) { return -x[0]; }, vjp_neg, "(-{0})", nullptr, 1, 0},
      {Opcode::kAbs, 1, numeric_rule, [](const Instr&, const double* x) { return std::fabs(x[0]); }, vjp_abs, "std::abs({0})", nullptr, 1, 0},
      {Opcode::kExp, 1, float_unary_rule, [](const Instr&, const double* x) { return std::exp(x[0]); }, vjp_exp, "kiln_exp({0})", nullptr, 1, 1},
      {Opcode::kLog, 1, float_unary_rule, [](const Instr&, const double* x) { return std::log(x[0]); }, vjp_log, "std::log({0})", nullptr, 1, 1},
      {Opcode::kLog1p, 1, float_unary_rule, [](const Instr&, const double* x) { return std::log1p(x[0]); }, vjp_log1p, "std::log1p({0})", nullptr, 1, 1},
      {Opcode::kSqrt, 1, float_unary_rule, [](const Instr&, const double* x) { return std::sqrt(x[0]); }, vjp_sqrt, "std::sqrt({0})", nullptr, 1, 1},
      {Opcode::kRsqrt, 1, float_unary_rule, [](const Instr&, const double* x) { return 1.0 / std::sqrt(x[0]); }, vjp_rsqrt, "(1 / std::sqrt({0}))", nullptr, 2, 1},
      {Opcode::kTanh, 1, float_unary_rule, [](const Instr&, const double* x) { return std::tanh(x[0]); }, vjp_tanh, "std::tanh({0})", nullptr, 1, 1},
      {Opcode::kLogistic, 1, float_unary_rule, [](const Instr&, const double* x) { return 1.0 / (1.0 + std::exp(-x[0])); }, vjp_logistic, "(1 / (1 + kiln_exp(-{0})))", nullptr, 3, 1},
      {Opcode::kSin, 1, float_unary_rule, [](const Instr&, const double* x) { return std::sin(x[0]); }, vjp_sin, "std::sin({0})", nullptr, 1, 1},
      {Opcode::kCos, 1, float_unary_rule, [](const Instr&, const double* x) { return std::cos(x[0]); }, vjp_cos, "std::cos({0})", nullptr, 1, 1},
      {Opcode::kFloor, 1, float_unary_rule, [](const Instr&, const double* x) { return std::floor(x[0]); }, nullptr, "std::floor({0})", nullptr, 1, 0},
      {Opcode::kNot, 1, pred_rule, [](const Instr&, const double* x) { return x[0] == 0.0 ? 1.0 : 0.0; }, nullptr, "(!{0})", nullptr, 1, 0},
      {Opcode::kIsFinite, 1, is_finite_rule, [](const Instr&, const double* x) { return std::isfinite(x[0]) ? 1.0 : 0.0; }, nullptr, "std::isfinite({0})", nullptr, 1, 0},
      {Opcode::kConvert, 1, convert_rule, [](const Instr&, const double* x) { return x[0]; }, vjp_convert, nullptr, convert_snippet, 1, 0},
      {Opcode::kCopy, 1, [](const InferContext& c) { return same_shape_rule(c, "copy"); }, [](const Instr&, const double* x) { return x[0]; }, vjp_copy, "{0}", nullptr, 0, 0},
      // Identity whose gradient is zero: keeps shifts such as the max in a stable softmax out of
      // the backward pass. Simplification drops it once gradients are built.
      {Opcode::kStopGradient, 1, [](const InferContext& c) { return same_shape_rule(c, "stop_gradient"); }, [](const Instr&, const double* x) { return x[0]; }, nullptr, "{0}", nullptr, 0, 0},
      {Opcode::kAdd, 2, numeric_rule, [](const Instr&, const double* x) { return x[0] + x[1]; }, vjp_add, "({0} + {1})", nullptr, 1, 0},
      {Opcode::kSub, 2, numeric_rule, [](const Instr&, const double* x) { return x[0] - x[1]; }, vjp_sub, "({0} - {1})", nullptr, 1, 0},
      {Opcode::kMul, 2, numeric_rule, [](const Instr&, const double* x) { return x[0] * x[1]; }, vjp_mul, "({0} * {1})", nullptr, 1, 0},
      {Opcode::kDiv, 2, numeric_rule,
       [](const Instr& i, const double* x) {
         if (ir::is_integral(i.shape().dtype())) return x[1] == 0 ? 0.0 : std::trunc(x[0] / x[1]);
         return x[0] / x[1];
       },
       vjp_div, "({0} / {1})", nullptr, 1, 0},
      {Opcode::kMax, 2, numeric_rule, [](const Instr&, const double* x) { return std::isnan(x[0]) || std::isnan(x[1]) ? std::numeric_limits<double>::quiet_NaN() : std::max(x[0], x[1]); }, vjp_max, "kiln_max({0}, {1})", nullptr, 1, 0},
      {Opcode::kMin, 2, numeric_rule, [](const Instr&, const double* x) { return std::isnan(x[0]) || std::isnan(x[1]) ? std::numeric_limits<double>::quiet_NaN() : std::min(x[0], x[1]); }, vjp_min, "kiln_min({0}, {1})", nullptr, 1, 0},
      {Opcode::kPow, 2, float_unary_rule, [](const Instr&, const double* x) { return std::pow(x[0], x[1]); }, vjp_pow, "std::pow({0}, {1})", nullptr, 1, 1},
      {Opcode::kAnd, 2, pred_rule, [](const Instr&, const double* x) { return (x[0] != 0 && x[1] != 0) ? 1.0 : 0.0; }, nullptr, "({0} && {1})", nullptr, 1, 0},
      {Opcode::kOr, 2, pred_rule, [](const Instr&, const double* x) { return (x[0] != 0 || x[1] != 0) ? 1.0 : 0.0; }, nullptr, "({0} || {1})", nullptr, 1, 0},
      {Opcode::kCompare, 2, compare_rule, compare_scalar, nullptr, nullptr, compare_snippet, 1, 0,
       {{"direction", AttrKind::kString, true, {"eq", "ne", "lt", "le", "gt", "ge"}}}},
      {Opcode::kSelect, 3, select_rule, [](const Instr&, const double* x) { return x[0] != 0 ? x[1] : x[2]; }, vjp_select, "({0} ? {1} : {2})", nullptr, 1, 0},
      {Opcode::kClamp, 3, [](const InferContext& c) { return same_shape_rule(c, "clamp"); },
       [](const Instr&, const double* x) { return std::min(std::max(x[1], x[0]), x[2]); }, vjp_clamp,
       "kiln_min(kiln_max({1}, {0}), {2})", nullptr, 2, 0},
  };
  for (const Spec& s : specs) {
    OpDef def;
    def.opcode = s.opcode;
    def.min_operands = def.max_operands = s.arity;
    def.attrs = s.attrs;
    def.elementwise = true;
    // A copy and a stop_gradient are their operand's storage seen again.
    def.aliases_operand = s.opcode == Opcode::kCopy || s.opcode == Opcode::kStopGradient;
    def.infer = s.infer;
    def.eval = eval_elementwise;
    def.scalar = s.scalar;
    def.grad = s.vjp ? GradKind::kRule : GradKind::kNone;
    def.vjp = s.vjp;
    if (s.snippet_fn) {
      def.snippet = s.snippet_fn;
    } else {
      KILN_CHECK(s.snippet_format != nullptr);
      const char* format = s.snippet_format;
      def.snippet = [format](const Instr&, std::span<const std::string> a) { return format_snippet(format, a); };
    }
    def.dim_map = identity_dim_map;
    def.split_map = same_size_dims(identity_dim_map);
    def.examples = default_examples(s.opcode, s.arity);
    double flops = s.flops, transcendentals = s.transcendentals;
    def.cost = [flops, transcendentals](const Instr& instr) { return elementwise_cost(instr, flops, transcendentals); };
    table.add(std::move(def));
  }
}

}  // namespace kiln::ops
