#include "kiln/passes/cse.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kiln/base/hash.h"
#include "kiln/base/logging.h"
#include "kiln/ir/printer.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

namespace {

uint64_t hash_string(const std::string& s) { return fnv1a64(s); }

uint64_t hash_literal(const ir::Literal& literal) {
  uint64_t h = hash_string(literal.shape().to_string());
  for (double v : literal.values()) {
    // Literal equality treats every NaN as equal; hash them alike.
    uint64_t bits = std::isnan(v) ? 0x7ff8000000000000ull : std::bit_cast<uint64_t>(v);
    h = hash_combine(h, bits);
  }
  for (const ir::Literal& e : literal.elements()) h = hash_combine(h, hash_literal(e));
  return h;
}

uint64_t hash_instr(const ir::Instr& instr) {
  uint64_t h = static_cast<uint64_t>(instr.opcode());
  h = hash_combine(h, hash_string(instr.shape().to_string()));
  // Pointers only choose the bucket; which instruction survives depends on program order.
  for (const ir::Instr* o : instr.operands()) h = hash_combine(h, reinterpret_cast<uintptr_t>(o));
  for (const auto& [key, value] : instr.attrs().map()) {
    h = hash_combine(h, hash_string(key));
    h = hash_combine(h, hash_string(ir::attr_value_to_string(value)));
  }
  for (const ir::Computation* c : instr.called()) h = hash_combine(h, reinterpret_cast<uintptr_t>(c));
  if (instr.has_literal()) h = hash_combine(h, hash_literal(instr.literal()));
  if (instr.meta().sharding) h = hash_combine(h, hash_string(instr.meta().sharding->to_string()));
  return h;
}

bool same_value(const ir::Instr& a, const ir::Instr& b) {
  if (a.opcode() != b.opcode() || a.shape() != b.shape() || a.operands() != b.operands() || !(a.attrs() == b.attrs()) ||
      a.called() != b.called() || a.meta().sharding != b.meta().sharding || a.has_literal() != b.has_literal()) {
    return false;
  }
  return !a.has_literal() || a.literal() == b.literal();
}

// Merges duplicates in one computation; returns how many instructions were merged away.
int64_t cse_computation(ir::Computation& comp) {
  std::unordered_map<uint64_t, std::vector<ir::Instr*>> seen;
  std::vector<ir::Instr*> merged;
  for (ir::Instr* instr : comp.post_order()) {
    if (instr->opcode() == ir::Opcode::kParameter) continue;
    std::vector<ir::Instr*>& bucket = seen[hash_instr(*instr)];
    ir::Instr* first = nullptr;
    for (ir::Instr* candidate : bucket) {
      if (same_value(*candidate, *instr)) {
        first = candidate;
        break;
      }
    }
    if (!first) {
      bucket.push_back(instr);
      continue;
    }
    KILN_VLOG(2) << "cse: %" << instr->id() << " is %" << first->id();
    // A value two scheduling stages compute (a weight's transpose in every micro-batch of
    // gradient accumulation) belongs to neither: unstaged, it is placed when it is ready and
    // fusion may read it from any stage's kernel.
    if (instr->meta().stage != first->meta().stage) first->mutable_meta().stage = 0;
    instr->replace_all_uses_with(first);
    merged.push_back(instr);
  }
  // Each merged instruction is now unused; its operands stay (the first occurrence uses them).
  remove_if_dead(comp, merged);
  return static_cast<int64_t>(merged.size());
}

}  // namespace

Result<bool> CsePass::run(ir::Module& module) {
  int64_t merged = 0;
  for (const auto& comp : module.computations()) merged += cse_computation(*comp);
  if (merged > 0) {
    KILN_VLOG(2) << "cse: merged " << merged << " instructions";
  }
  return merged > 0;
}

}  // namespace kiln::passes
