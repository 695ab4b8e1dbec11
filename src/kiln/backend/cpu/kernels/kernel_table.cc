#include <unordered_map>

#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/base/check.h"
#include "kiln/ops/registry.h"

namespace kiln::backend::cpu {

namespace {
const std::unordered_multimap<int, NativeKernelEntry>& table() {
  static const auto* t = [] {
    auto* m = new std::unordered_multimap<int, NativeKernelEntry>();
    for (auto* family : {&data_movement_kernels, &reduction_kernels, &gemm_kernels, &attention_kernels, &grouped_matmul_kernels,
                         &collective_kernels, &ragged_all_to_all_kernels, &sort_kernels, &integer_kernels,
                         &rng_kernels}) {
      for (auto& e : (*family)()) m->emplace(static_cast<int>(e.opcode), std::move(e));
    }
    return m;
  }();
  return *t;
}
}  // namespace

const NativeKernelEntry* find_native_entry(const ir::Instr& instr) {
  auto [begin, end] = table().equal_range(static_cast<int>(instr.opcode()));
  for (auto it = begin; it != end; ++it) {
    if (it->second.accepts(instr)) return &it->second;
  }
  return nullptr;
}

const KernelFactory* find_native_kernel(const ir::Instr& instr) {
  const NativeKernelEntry* entry = find_native_entry(instr);
  return entry == nullptr ? nullptr : &entry->make;
}

int64_t widened_f32_bytes(const ir::Instr& instr) {
  auto widened = [](const ir::Shape& s) { return s.dtype() == ir::DType::kBF16 ? 4 * s.num_elements() : 0; };
  int64_t bytes = widened(instr.shape());
  for (const ir::Instr* o : instr.operands()) {
    if (!o->shape().is_tuple()) bytes += widened(o->shape());
  }
  return bytes;
}

Kernel fallback_kernel(const ir::Instr& instr) {
  const ops::OpDef& def = ops::op_def(instr.opcode());
  return [&def, &instr](std::span<const Value* const> inputs, Value& output) {
    std::vector<ir::Literal> literals;
    literals.reserve(inputs.size());
    for (const Value* v : inputs) {
      if (v->size() == 1 && !instr.operand(static_cast<int>(literals.size()))->shape().is_tuple()) {
        literals.push_back((*v)[0].to_literal());
      } else {
        std::vector<ir::Literal> elements;
        for (const Buffer& b : *v) elements.push_back(b.to_literal());
        literals.push_back(ir::Literal::tuple(std::move(elements)));
      }
    }
    std::vector<const ir::Literal*> ptrs;
    for (const auto& l : literals) ptrs.push_back(&l);
    ir::Literal result = def.eval(instr, ptrs);
    output.clear();
    if (result.shape().is_tuple()) {
      for (const auto& e : result.elements()) output.push_back(Buffer::from_literal(e));
    } else {
      output.push_back(Buffer::from_literal(result));
    }
  };
}

}  // namespace kiln::backend::cpu
