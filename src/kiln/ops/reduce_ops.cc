// Reductions: reduce_sum, reduce_max, reduce_min over a set of dimensions, which are removed
// from the result. The reference evaluation accumulates in double and rounds once to the
// result dtype; max and min propagate NaN, like the elementwise max and min.
#include <cmath>
#include <limits>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::for_each_index;
using internal::same_size_dims;
using ir::dims_to_string;
using Ints = std::vector<int64_t>;

// The operand dimensions that survive, in order (result dim j is operand dim kept[j]).
Ints kept_dims(int rank, const Ints& reduced) {
  std::vector<bool> gone(rank, false);
  for (int64_t d : reduced) gone[d] = true;
  Ints kept;
  for (int i = 0; i < rank; ++i) {
    if (!gone[i]) kept.push_back(i);
  }
  return kept;
}

Result<Shape> reduce_rule(const InferContext& ctx, std::string_view op) {
  const Shape& x = ctx.operands[0];
  KILN_RETURN_IF_ERROR(internal::check_array(op, x));
  if (x.dtype() == DType::kPred) {
    return invalid_argument("{} needs a numeric operand, got {} (convert pred to s32 first)", op, x.to_string());
  }
  const Ints& dims = ctx.attrs.get_ints("dims");
  Status s = internal::check_dims(op, "dims", dims, x.rank());
  if (!s.ok()) return invalid_argument("{}; dims={} must be distinct dimensions of {}", s.message(), dims_to_string(dims), x.to_string());
  Ints out;
  for (int64_t d : kept_dims(x.rank(), dims)) out.push_back(x.dim(static_cast<int>(d)));
  return x.with_dims(std::move(out));
}

// Folds every operand element into its result element with `combine`, starting at `init`.
template <typename Combine>
ir::Literal eval_reduce(const Instr& instr, const ir::Literal& x, double init, Combine combine) {
  Ints kept = kept_dims(x.shape().rank(), instr.attrs().get_ints("dims"));
  Ints out_strides = ir::row_major_strides(instr.shape().dims());
  std::vector<double> acc(instr.shape().num_elements(), init);
  int64_t k = 0;
  for_each_index(x.shape().dims(), [&](const Ints& xi) {
    int64_t o = 0;
    for (size_t j = 0; j < kept.size(); ++j) o += xi[kept[j]] * out_strides[j];
    acc[o] = combine(acc[o], x.at(k++));
  });
  return ir::Literal(instr.shape(), std::move(acc));
}

ir::Literal eval_reduce_sum(const Instr& instr, std::span<const ir::Literal* const> args) {
  return eval_reduce(instr, *args[0], 0.0, [](double a, double b) { return a + b; });
}

double nan_or(double a, double b, double chosen) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : chosen;
}

// An empty reduction gives the identity: -inf for max, +inf for min (the lowest and highest
// integers after rounding to an integer dtype).
ir::Literal eval_reduce_max(const Instr& instr, std::span<const ir::Literal* const> args) {
  return eval_reduce(instr, *args[0], -std::numeric_limits<double>::infinity(),
                     [](double a, double b) { return nan_or(a, b, std::max(a, b)); });
}

ir::Literal eval_reduce_min(const Instr& instr, std::span<const ir::Literal* const> args) {
  return eval_reduce(instr, *args[0], std::numeric_limits<double>::infinity(),
                     [](double a, double b) { return nan_or(a, b, std::min(a, b)); });
}

// Broadcasts a value shaped like the reduction's result back to the operand's shape.
Instr* unreduce(VjpContext& c, Instr* y) {
  const Shape& x = c.operand(0)->shape();
  return c.b.broadcast(y, x.dims(), kept_dims(x.rank(), c.instr->attrs().get_ints("dims")));
}

std::vector<Instr*> vjp_reduce_sum(VjpContext& c) { return {unreduce(c, c.dout())}; }

// max / min: the gradient goes to the elements equal to the result, split equally among
// ties (as JAX does): g * indicator / count, with count the number of tied elements.
std::vector<Instr*> vjp_reduce_extremum(VjpContext& c) {
  Instr* x = c.operand(0);
  Instr* indicator = c.b.convert(c.b.compare(x, unreduce(c, c.instr), "eq"), x->shape().dtype());
  Instr* count = c.b.reduce_sum(indicator, c.instr->attrs().get_ints("dims"));
  Instr* share = c.b.div(c.dout(), count);  // per result element, so one division each
  return {c.b.mul(unreduce(c, share), indicator)};
}

std::vector<std::vector<int>> reduce_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  std::vector<int> m(x.rank(), -1);
  Ints kept = kept_dims(x.rank(), instr.attrs().get_ints("dims"));
  for (size_t j = 0; j < kept.size(); ++j) m[kept[j]] = static_cast<int>(j);
  return {m};
}

Cost reduce_cost(const Instr& instr) {
  Cost c = internal::memory_cost(instr);
  c.flops = static_cast<double>(instr.operand(0)->shape().num_elements());
  return c;
}

// Examples: several dims, all dims, one dim. Uniform random inputs have no ties, so finite
// differences see one maximal element per group.
std::vector<OpExample> reduce_examples(std::string_view op) {
  auto ex = [&](std::string_view x, std::string_view result, std::string_view dims) {
    return OpExample{fmt::format("module @ex\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n"
                                 "  ROOT %r = {} {}(%x), dims={}\n}}\n",
                                 x, result, op, dims)};
  };
  return {ex("f32[2,3,4]", "f32[3]", "{0,2}"), ex("f32[3,4]", "f32[]", "{0,1}"), ex("f32[2,5]", "f32[2]", "{1}")};
}

}  // namespace

void register_reduce_ops(OpTable& table) {
  struct Spec {
    Opcode opcode;
    EvalFn eval;
    VjpFn vjp;
  };
  const Spec specs[] = {
      {Opcode::kReduceSum, eval_reduce_sum, vjp_reduce_sum},
      {Opcode::kReduceMax, eval_reduce_max, vjp_reduce_extremum},
      {Opcode::kReduceMin, eval_reduce_min, vjp_reduce_extremum},
  };
  for (const Spec& s : specs) {
    OpDef d;
    d.opcode = s.opcode;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"dims", AttrKind::kInts}};
    std::string_view name = ir::opcode_name(s.opcode);
    d.infer = [name](const InferContext& c) { return reduce_rule(c, name); };
    d.eval = s.eval;
    d.vjp = s.vjp;
    d.dim_map = reduce_dim_map;
    d.split_map = same_size_dims(reduce_dim_map);
    d.cost = reduce_cost;
    d.examples = reduce_examples(name);
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
