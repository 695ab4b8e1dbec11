#include "kiln/passes/async_collectives.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

struct AsyncPair {
  Opcode start, done;
};

// KILN_ASYNC_RAGGED=0 keeps ragged_all_to_all blocking (the other collectives still become
// pairs), to measure what its pair buys.
bool ragged_async() {
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_ASYNC_RAGGED");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

// The registry's async starts (OpDef::async_role, async_of, async_partner) give every pair:
// a collective that gets a start/done pair in ops/ gets it here too.
std::optional<AsyncPair> pair_of_sync(Opcode op) {
  if (op == Opcode::kRaggedAllToAll && !ragged_async()) return std::nullopt;
  static const std::vector<std::optional<AsyncPair>> pairs = [] {
    std::vector<std::optional<AsyncPair>> table(ir::kNumOpcodes);
    for (int i = 0; i < ir::kNumOpcodes; ++i) {
      const ops::OpDef& def = ops::op_def(static_cast<Opcode>(i));
      if (def.async_role == ops::AsyncRole::kStart) table[static_cast<int>(def.async_of)] = AsyncPair{def.opcode, def.async_partner};
    }
    return table;
  }();
  return pairs[static_cast<int>(op)];
}

}  // namespace

Result<bool> AsyncCollectivesPass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  std::vector<Instr*> sync;
  for (const auto& instr : comp.instructions()) {
    if (pair_of_sync(instr->opcode()).has_value() && !instr->shape().is_tuple()) sync.push_back(instr.get());
  }
  if (sync.empty()) return false;
  ops::Builder b(&comp);
  for (Instr* c : sync) {
    const AsyncPair p = *pair_of_sync(c->opcode());
    // The start takes every operand (ragged: x and its sizes); the done keeps x alive.
    Instr* x = c->operand(0);
    Instr* start = b.emit(p.start, c->operands(), c->attrs(), c->shape());
    Instr* done = b.emit(p.done, {start, x}, {}, c->shape());
    start->mutable_meta() = c->meta();
    done->mutable_meta() = c->meta();
    const bool was_root = comp.root() == c;
    c->replace_all_uses_with(done);
    if (was_root) comp.set_root(done);
  }
  for (Instr* c : sync) comp.remove(c);
  comp.topo_sort();
  KILN_VLOG(1) << fmt::format("async_collectives: {} collectives made start/done pairs", sync.size());
  return true;
}

}  // namespace kiln::passes
