// Structural ops: parameters, constants, iota, tuples and the counter-based RNG.
#include <cmath>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"
#include "kiln/ops/op_helpers.h"
#include "kiln/ops/rng.h"

namespace kiln::ops {
namespace {

using internal::empty_dim_map;
using internal::for_each_index;
using internal::require_declared;

Result<Shape> declared_array(const InferContext& ctx, std::string_view op) {
  KILN_ASSIGN_OR_RETURN(Shape s, require_declared(ctx, op));
  if (s.is_tuple()) return invalid_argument("{} must produce an array, not {}", op, s.to_string());
  return s;
}

ir::Literal eval_unavailable(const Instr& instr, std::span<const ir::Literal* const>) {
  // Parameters and constants are bound by the interpreter itself, never evaluated.
  KILN_CHECK(false) << "no evaluation for " << instr.to_string();
  return ir::Literal();
}

// ---- rng: counter-based, so element i depends only on (seed, i) (ops/rng.h) ----

ir::Literal eval_rng(const Instr& instr, std::span<const ir::Literal* const>) {
  const RngDistribution dist = rng_distribution(instr);
  const int64_t seed = instr.attrs().get_int("seed");
  const RngBlock block = rng_block(instr);  // the device's block of a split rng
  std::vector<double> out(static_cast<size_t>(instr.shape().num_elements()));
  std::vector<float> run;
  for_each_global_run(block, instr.shape().dims(), 0, instr.shape().num_elements(),
                      [&](int64_t local, int64_t global, int64_t count) {
                        run.resize(static_cast<size_t>(count));
                        rng_fill(dist, seed, global, count, run.data());
                        std::copy(run.begin(), run.end(), out.begin() + local);
                      });
  // Uniform values must stay below 1 after rounding to a narrow dtype.
  if (dist == RngDistribution::kUniform) {
    for (double& v : out) v = round_uniform(instr.shape().dtype(), v);
  }
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_iota(const Instr& instr, std::span<const ir::Literal* const>) {
  int64_t dim = instr.attrs().get_int("dim");
  std::vector<double> out;
  out.reserve(instr.shape().num_elements());
  for_each_index(instr.shape().dims(), [&](const std::vector<int64_t>& idx) { out.push_back(static_cast<double>(idx[dim])); });
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_tuple(const Instr&, std::span<const ir::Literal* const> args) {
  std::vector<ir::Literal> elements;
  for (const ir::Literal* a : args) elements.push_back(*a);
  return ir::Literal::tuple(std::move(elements));
}

ir::Literal eval_gte(const Instr& instr, std::span<const ir::Literal* const> args) {
  return args[0]->element(static_cast<int>(instr.attrs().get_int("index")));
}

std::vector<std::vector<int>> tuple_dim_map(const Instr& instr) {
  // Element 0 of the tuple keeps its dims; other elements have no counterpart in element 0.
  std::vector<std::vector<int>> out = empty_dim_map(instr);
  if (!out.empty()) {
    for (size_t i = 0; i < out[0].size(); ++i) out[0][i] = static_cast<int>(i);
  }
  return out;
}

std::vector<std::vector<int>> gte_dim_map(const Instr&) { return {{}}; }

}  // namespace

void register_structural_ops(OpTable& table) {
  {
    OpDef d;
    d.opcode = Opcode::kParameter;
    d.examples = {{R"(module @example

ENTRY computation @main {
  ROOT %x = f32[2,3] parameter(), index=0
}
)"}};
    d.attrs = {{"index", AttrKind::kInt}};
    d.source = true;
    d.infer = [](const InferContext& c) { return require_declared(c, "parameter"); };
    d.eval = eval_unavailable;
    d.grad = GradKind::kNone;  // a leaf: autodiff differentiates *with respect to* parameters
    d.dim_map = empty_dim_map;
    d.cost = internal::zero_cost;
    d.plumbing = true;
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kConstant;
    d.examples = {{R"(module @example

ENTRY computation @main {
  ROOT %c = f32[3] constant({1, 2.5, -3})
}
)"}};
    d.source = true;
    d.infer = [](const InferContext& c) { return declared_array(c, "constant"); };
    d.eval = eval_unavailable;
    d.grad = GradKind::kNone;
    d.dim_map = empty_dim_map;
    d.cost = internal::memory_cost;
    d.plumbing = true;
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kIota;
    d.examples = {{R"(module @example

ENTRY computation @main {
  ROOT %i = s32[2,3] iota(), dim=1
}
)"}};
    d.attrs = {{"dim", AttrKind::kInt}};
    d.source = true;
    d.infer = [](const InferContext& c) -> Result<Shape> {
      KILN_ASSIGN_OR_RETURN(Shape s, declared_array(c, "iota"));
      int64_t dim = c.attrs.get_int("dim");
      if (dim < 0 || dim >= s.rank()) return invalid_argument("iota dim {} outside the rank {} of {}", dim, s.rank(), s.to_string());
      if (s.dtype() == DType::kPred) return invalid_argument("iota cannot produce pred");
      return s;
    };
    d.eval = eval_iota;
    d.grad = GradKind::kNone;
    d.dim_map = empty_dim_map;
    d.cost = internal::memory_cost;
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kRng;
    d.examples = {{R"(module @example

ENTRY computation @main {
  ROOT %r = f32[4,4] rng(), distribution=truncated_normal, seed=3
}
)"}};
    d.attrs = {{"distribution", AttrKind::kString, true, {"uniform", "normal", "truncated_normal"}},
               {"seed", AttrKind::kInt},
               {"split", AttrKind::kString, false}};
    d.source = true;
    d.splittable_source = true;
    d.infer = [](const InferContext& c) -> Result<Shape> {
      KILN_ASSIGN_OR_RETURN(Shape s, declared_array(c, "rng"));
      if (!ir::is_floating(s.dtype())) return invalid_argument("rng produces floating point values, not {}", s.to_string());
      return s;
    };
    d.eval = eval_rng;
    d.grad = GradKind::kNone;
    d.dim_map = empty_dim_map;
    d.cost = [](const Instr& i) { return internal::elementwise_cost(i, 20, 2); };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kTuple;
    d.examples = {{R"(module @example

ENTRY computation @main {
  %a = f32[2] parameter(), index=0
  %b = s32[3] parameter(), index=1
  ROOT %t = (f32[2], s32[3]) tuple(%a, %b)
}
)"}};
    d.max_operands = -1;
    d.infer = [](const InferContext& c) -> Result<Shape> {
      std::vector<Shape> elements(c.operands.begin(), c.operands.end());
      return Shape::tuple(std::move(elements));
    };
    d.eval = eval_tuple;
    d.grad = GradKind::kTupleStructure;
    d.dim_map = tuple_dim_map;
    d.cost = internal::zero_cost;
    d.plumbing = true;
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kGetTupleElement;
    d.examples = {{R"(module @example

ENTRY computation @main {
  %a = f32[2] parameter(), index=0
  %b = f32[3] parameter(), index=1
  %t = (f32[2], f32[3]) tuple(%a, %b)
  ROOT %g = f32[3] get_tuple_element(%t), index=1
}
)"}};
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"index", AttrKind::kInt}};
    d.infer = [](const InferContext& c) -> Result<Shape> {
      const Shape& t = c.operands[0];
      if (!t.is_tuple()) return invalid_argument("get_tuple_element of a non-tuple {}", t.to_string());
      int64_t i = c.attrs.get_int("index");
      if (i < 0 || i >= static_cast<int64_t>(t.elements().size())) {
        return invalid_argument("get_tuple_element index {} outside {}", i, t.to_string());
      }
      return t.element(static_cast<int>(i));
    };
    d.eval = eval_gte;
    d.grad = GradKind::kTupleStructure;
    d.dim_map = gte_dim_map;
    d.cost = internal::zero_cost;
    d.plumbing = true;
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
