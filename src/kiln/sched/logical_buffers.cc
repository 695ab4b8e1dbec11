#include "kiln/sched/logical_buffers.h"

#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/registry.h"

namespace kiln::sched {

using ir::Instr;
using ir::Opcode;

bool is_view(const Instr& instr) {
  const ops::OpDef& def = ops::op_def(instr.opcode());
  return def.aliases_operand && (def.async_role == ops::AsyncRole::kDone || !instr.shape().is_tuple());
}

namespace {
void flatten(const ir::Shape& shape, std::vector<ir::Shape>& out) {
  if (!shape.is_tuple()) {
    out.push_back(shape);
    return;
  }
  for (const auto& e : shape.elements()) flatten(e, out);
}
}  // namespace

BufferModel::BufferModel(const ir::Computation& computation) {
  for (const auto& owned : computation.instructions()) {
    const Instr* instr = owned.get();
    std::vector<int>& leaves = leaves_[instr];
    defined_[instr];
    switch (instr->opcode()) {
      case Opcode::kTuple:
        for (const Instr* o : instr->operands()) {
          const auto& l = leaves_.at(o);
          leaves.insert(leaves.end(), l.begin(), l.end());
        }
        continue;
      case Opcode::kGetTupleElement:
        // The executable flattens tuples; index into the operand's flattened leaves.
        leaves.push_back(leaves_.at(instr->operand(0)).at(instr->attrs().get_int("index")));
        continue;
      default:
        if (is_view(*instr)) {
          leaves = leaves_.at(instr->operand(0));
          continue;
        }
    }
    BufferSource source = instr->opcode() == Opcode::kParameter  ? BufferSource::kArgument
                          : instr->opcode() == Opcode::kConstant ? BufferSource::kConstant
                                                                 : BufferSource::kComputed;
    std::vector<ir::Shape> shapes;
    flatten(instr->shape(), shapes);
    for (size_t e = 0; e < shapes.size(); ++e) {
      LogicalBuffer b;
      b.id = static_cast<int>(buffers_.size());
      b.def = instr;
      b.element = static_cast<int>(e);
      b.shape = shapes[e];
      b.bytes = shapes[e].byte_size();
      b.source = source;
      leaves.push_back(b.id);
      defined_[instr].push_back(b.id);
      buffers_.push_back(std::move(b));
    }
  }
  outputs_ = leaves_.at(computation.root());
  for (int id : outputs_) buffers_[id].output = true;
  for (const auto& owned : computation.instructions()) {
    std::vector<int>& out = used_[owned.get()];
    for (const Instr* o : owned->operands()) {
      for (int id : leaves_.at(o)) {
        if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
      }
    }
  }
}

}  // namespace kiln::sched
