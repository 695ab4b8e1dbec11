#include "kiln/ops/registry.h"

#include <unordered_map>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ir/verifier.h"

namespace kiln::ops {

void OpTable::add(OpDef def) {
  int i = static_cast<int>(def.opcode);
  KILN_CHECK(!present_[i]) << "op " << ir::opcode_name(def.opcode) << " registered twice";
  def.name = ir::opcode_name(def.opcode);
  defs_[i] = std::move(def);
  present_[i] = true;
}

const OpDef& OpTable::get(ir::Opcode opcode) const {
  int i = static_cast<int>(opcode);
  KILN_CHECK(present_[i]) << "op " << ir::opcode_name(opcode) << " has no registry entry";
  return defs_[i];
}

bool OpTable::has(ir::Opcode opcode) const { return present_[static_cast<int>(opcode)]; }

const OpTable& registry() {
  static const OpTable* table = [] {
    auto* t = new OpTable();
    register_structural_ops(*t);
    register_elementwise_ops(*t);
    register_shape_ops(*t);
    register_reduce_ops(*t);
    register_dot_ops(*t);
    register_index_ops(*t);
    register_sort_ops(*t);
    register_fusion_ops(*t);
    register_attention_ops(*t);
    register_grouped_matmul_ops(*t);
    register_collective_ops(*t);
    register_ragged_all_to_all_op(*t);
    register_async_collective_ops(*t);  // after the collectives and ragged: copies their rules
    return t;
  }();
  return *table;
}

namespace {

const char* kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "an integer";
    case AttrKind::kFloat: return "a number";
    case AttrKind::kString: return "a name";
    case AttrKind::kInts: return "an integer list {..}";
  }
  return "?";
}

bool attr_has_kind(const ir::AttrValue& v, AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return std::holds_alternative<int64_t>(v);
    case AttrKind::kFloat: return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
    case AttrKind::kString: return std::holds_alternative<std::string>(v);
    case AttrKind::kInts: return std::holds_alternative<std::vector<int64_t>>(v);
  }
  return false;
}

Status check_attrs(const OpDef& def, const ir::Attrs& attrs) {
  for (const auto& spec : def.attrs) {
    if (!attrs.has(spec.name)) {
      if (spec.required) return invalid_argument("{} needs attribute '{}' ({})", def.name, spec.name, kind_name(spec.kind));
      continue;
    }
    const ir::AttrValue& v = attrs.map().at(spec.name);
    if (!attr_has_kind(v, spec.kind)) {
      return invalid_argument("{} attribute '{}' must be {}", def.name, spec.name, kind_name(spec.kind));
    }
    if (!spec.choices.empty()) {
      const auto& s = std::get<std::string>(v);
      bool ok = false;
      for (const auto& c : spec.choices) ok = ok || c == s;
      if (!ok) return invalid_argument("{} attribute '{}' is '{}'; accepted: {}", def.name, spec.name, s, fmt::join(spec.choices, ", "));
    }
  }
  for (const auto& [key, value] : attrs.map()) {
    bool known = false;
    for (const auto& spec : def.attrs) known = known || spec.name == key;
    if (!known) {
      std::vector<std::string> names;
      for (const auto& spec : def.attrs) names.push_back(spec.name);
      return invalid_argument("{} has no attribute '{}'; accepted: {}", def.name, key,
                              names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
    }
  }
  return ok_status();
}

}  // namespace

Result<ir::Shape> infer_shape(ir::Opcode opcode, std::span<const ir::Shape> operands, const ir::Attrs& attrs,
                              const ir::Shape* declared) {
  const OpDef& def = op_def(opcode);
  int n = static_cast<int>(operands.size());
  if (n < def.min_operands || (def.max_operands >= 0 && n > def.max_operands)) {
    std::string expected = def.max_operands < 0 ? fmt::format("at least {}", def.min_operands)
                           : def.min_operands == def.max_operands ? fmt::format("{}", def.min_operands)
                                                                  : fmt::format("{} to {}", def.min_operands, def.max_operands);
    return invalid_argument("{} takes {} operands, got {}", def.name, expected, n);
  }
  KILN_RETURN_IF_ERROR(check_attrs(def, attrs));
  KILN_ASSIGN_OR_RETURN(ir::Shape shape, def.infer(InferContext{operands, attrs, declared}));
  if (declared && *declared != shape) {
    return invalid_argument("{} result is {} but {} was declared", def.name, shape.to_string(), declared->to_string());
  }
  return shape;
}

namespace {

// An op that calls a body (OpDef::calls_body) calls one computation, not the entry, whose
// parameters take the operands' shapes and whose root has the result's shape.
Status verify_calls(const ir::Module& module, const ir::Instr& instr) {
  const OpDef& def = op_def(instr.opcode());
  if (!def.calls_body) {
    if (!instr.called().empty()) return invalid_argument("{} calls no computation", def.name);
    return ok_status();
  }
  if (instr.called().size() != 1) return invalid_argument("{} calls exactly one computation (calls={{@body}})", def.name);
  const ir::Computation& body = *instr.called()[0];
  if (&body == module.entry()) return invalid_argument("{} cannot call the entry computation", def.name);
  if (body.num_params() != instr.num_operands()) {
    return invalid_argument("@{} takes {} parameters, the {} has {} operands", body.name(), body.num_params(), def.name,
                            instr.num_operands());
  }
  for (int i = 0; i < body.num_params(); ++i) {
    if (body.param(i)->shape() != instr.operand(i)->shape()) {
      return invalid_argument("parameter {} of @{} is {}, operand {} is {}", i, body.name(),
                              body.param(i)->shape().to_string(), i, instr.operand(i)->shape().to_string());
    }
  }
  if (body.root() == nullptr || body.root()->shape() != instr.shape()) {
    return invalid_argument("@{} returns {}, the {} declares {}", body.name(),
                            body.root() ? body.root()->shape().to_string() : "nothing", def.name, instr.shape().to_string());
  }
  return ok_status();
}

// A computation reached again while its own calls are being followed calls itself.
Status verify_no_call_cycle(const ir::Computation& comp, std::unordered_map<const ir::Computation*, int>& state) {
  int& s = state[&comp];
  if (s == 2) return ok_status();
  if (s == 1) return invalid_argument("@{} calls itself (directly or through others)", comp.name());
  s = 1;
  for (const auto& instr : comp.instructions()) {
    for (const ir::Computation* callee : instr->called()) KILN_RETURN_IF_ERROR(verify_no_call_cycle(*callee, state));
  }
  state[&comp] = 2;
  return ok_status();
}

}  // namespace

Status verify(const ir::Module& module) {
  KILN_RETURN_IF_ERROR(ir::verify_structure(module));
  std::unordered_map<const ir::Computation*, int> visit;
  for (const auto& comp : module.computations()) KILN_RETURN_IF_ERROR(verify_no_call_cycle(*comp, visit));
  for (const auto& comp : module.computations()) {
    for (const auto& instr : comp->instructions()) {
      std::vector<ir::Shape> shapes;
      for (const ir::Instr* o : instr->operands()) shapes.push_back(o->shape());
      auto result = infer_shape(instr->opcode(), shapes, instr->attrs(), &instr->shape());
      if (!result.ok()) return invalid_argument("{} in: {}", result.status().message(), instr->to_string());
      Status calls = verify_calls(module, *instr);
      if (!calls.ok()) return invalid_argument("{} in: {}", calls.message(), instr->to_string());
    }
  }
  return ok_status();
}

Cost cost_of(const ir::Instr& instr) { return op_def(instr.opcode()).cost(instr); }

}  // namespace kiln::ops
