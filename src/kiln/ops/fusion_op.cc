// fusion: a group of ops outlined into a computation (calls={@body}) whose parameters are
// the fusion's operands. kind=loop: elementwise ops over the result's dims (with scalar
// operands broadcast); kind=input: the same over a reduction's input dims, ending in the
// reduction. Its value is the body's root, so the reference evaluation simply
// evaluates the body; backends generate one kernel from it. A multi-output fusion's root is
// a tuple of arrays (passes/multi_output_fusion.h): for kind=input the first is the
// reduction and the others are values over the reduction's input dims.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

ir::Literal eval_fusion(const Instr& instr, std::span<const ir::Literal* const> args) {
  KILN_CHECK_EQ(instr.called().size(), 1u) << instr.to_string();
  const ir::Computation& body = *instr.called()[0];
  std::unordered_map<const Instr*, ir::Literal> values;
  std::vector<const ir::Literal*> operand_values;
  for (const auto& owned : body.instructions()) {
    const Instr* i = owned.get();
    if (i->opcode() == Opcode::kParameter) {
      values[i] = *args[i->attrs().get_int("index")];
    } else if (i->opcode() == Opcode::kConstant) {
      values[i] = i->literal();
    } else {
      operand_values.clear();
      for (const Instr* o : i->operands()) operand_values.push_back(&values.at(o));
      values[i] = op_def(i->opcode()).eval(*i, operand_values);
    }
  }
  return values.at(body.root());
}

// Whether the fused body reads `param` only through slices, and then the bytes of the
// windows it reads (at most the whole operand: RoPE's two halves are the operand once).
std::optional<double> sliced_read_bytes(const Instr& param, double operand_bytes) {
  if (param.users().empty()) return std::nullopt;
  double bytes = 0;
  for (const Instr* u : param.users()) {
    if (u->opcode() != Opcode::kSlice) return std::nullopt;
    bytes += static_cast<double>(u->shape().byte_size());
  }
  return std::min(bytes, operand_bytes);
}

Cost fusion_cost(const Instr& instr) {
  // Arithmetic of the body; memory traffic of the fusion's own operands and result only
  // (that is the point of fusing), and of an operand read through slices only its windows.
  Cost c = internal::memory_cost(instr);
  const ir::Computation& body = *instr.called()[0];
  for (int i = 0; i < instr.num_operands(); ++i) {
    const double operand = static_cast<double>(instr.operand(i)->shape().byte_size());
    if (std::optional<double> read = sliced_read_bytes(*body.param(i), operand)) c.bytes_read -= operand - *read;
  }
  for (const auto& i : body.instructions()) {
    Cost inner = op_def(i->opcode()).cost(*i);
    c.flops += inner.flops;
    c.transcendentals += inner.transcendentals;
  }
  return c;
}

std::vector<std::vector<int>> fusion_dim_map(const Instr& instr) {
  // Loop fusions read full-rank operands at the result's index, scalars everywhere; input
  // fusions are left unmapped (conservative).
  std::vector<std::vector<int>> out = internal::empty_dim_map(instr);
  if (instr.attrs().get_string("kind") != "loop") return out;
  const ir::Computation& body = *instr.called()[0];
  for (int i = 0; i < instr.num_operands(); ++i) {
    // A parameter a transpose, broadcast, slice or pad reads (a mapped read) is read at other
    // indices.
    const auto& users = body.param(i)->users();
    bool mapped = std::any_of(users.begin(), users.end(),
                              [](const Instr* u) { return op_def(u->opcode()).mapped_read != MappedRead::kNone; });
    if (!mapped && instr.operand(i)->shape().dims() == instr.shape().dims()) {
      for (size_t d = 0; d < out[i].size(); ++d) out[i][d] = static_cast<int>(d);
    }
  }
  return out;
}

}  // namespace

void register_fusion_ops(OpTable& table) {
  OpDef d;
  d.opcode = Opcode::kFusion;
  d.max_operands = -1;
  d.attrs = {{"kind", AttrKind::kString, true, {"loop", "input"}}};
  d.infer = [](const InferContext& c) -> Result<Shape> {
    KILN_ASSIGN_OR_RETURN(Shape s, internal::require_declared(c, "fusion"));
    if (s.is_tuple()) {
      if (s.elements().empty()) return invalid_argument("a multi-output fusion produces at least one array");
      for (const Shape& e : s.elements()) {
        if (e.is_tuple()) return invalid_argument("a fusion produces arrays or a tuple of arrays, not {}", s.to_string());
      }
    }
    return s;
  };
  d.calls_body = true;
  d.eval = eval_fusion;
  d.grad = GradKind::kNone;  // fusion runs after gradients are built
  d.dim_map = fusion_dim_map;
  d.cost = fusion_cost;
  d.examples = {{R"(module @example

computation @fused.0 {
  %a = f32[2,3] parameter(), index=0
  %s = f32[] parameter(), index=1
  %b = f32[2,3] broadcast(%s), dims={}
  %m = f32[2,3] mul(%a, %b)
  ROOT %e = f32[2,3] exp(%m)
}

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %y = f32[] parameter(), index=1
  ROOT %f = f32[2,3] fusion(%x, %y), kind=loop, calls={@fused.0}
}
)"},
                {R"(module @example

computation @fused.1 {
  %a = f32[2,3,4] parameter(), index=0
  %b = f32[2,3,4] parameter(), index=1
  %m = f32[2,3,4] mul(%a, %b)
  ROOT %r = f32[2,4] reduce_sum(%m), dims={1}
}

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %y = f32[2,3,4] parameter(), index=1
  ROOT %f = f32[2,4] fusion(%x, %y), kind=input, calls={@fused.1}
}
)"},
                {R"(module @example

computation @fused.2 {
  %a = f32[2,3] parameter(), index=0
  %b = f32[2,3] parameter(), index=1
  %m = f32[2,3] mul(%a, %b)
  %e = f32[2,3] add(%m, %a)
  ROOT %t = (f32[2,3], f32[2,3]) tuple(%e, %m)
}

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %y = f32[2,3] parameter(), index=1
  ROOT %f = (f32[2,3], f32[2,3]) fusion(%x, %y), kind=loop, calls={@fused.2}
}
)"},
                {R"(module @example

computation @fused.3 {
  %a = f32[2,3,4] parameter(), index=0
  %m = f32[2,3,4] mul(%a, %a)
  %r = f32[2,4] reduce_max(%m), dims={1}
  ROOT %t = (f32[2,4], f32[2,3,4]) tuple(%r, %m)
}

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  ROOT %f = (f32[2,4], f32[2,3,4]) fusion(%x), kind=input, calls={@fused.3}
}
)"},
                // Mapped reads (passes/fusion.h): a transpose and a broadcast that expands a
                // size-1 dim, loaded at other indices by the loop (backend/cpu/codegen/index_map.h).
                {R"(module @example

computation @fused.4 {
  %a = f32[4,2,3] parameter(), index=0
  %b = f32[3,1] parameter(), index=1
  %c = f32[2,3,4] parameter(), index=2
  %t = f32[2,3,4] transpose(%a), perm={1,2,0}
  %bb = f32[2,3,4] broadcast(%b), dims={1,2}
  %m = f32[2,3,4] mul(%t, %bb)
  ROOT %e = f32[2,3,4] add(%m, %c)
}

ENTRY computation @main {
  %x = f32[4,2,3] parameter(), index=0
  %y = f32[3,1] parameter(), index=1
  %z = f32[2,3,4] parameter(), index=2
  ROOT %f = f32[2,3,4] fusion(%x, %y, %z), kind=loop, calls={@fused.4}
}
)"}};
  table.add(std::move(d));
}

}  // namespace kiln::ops
