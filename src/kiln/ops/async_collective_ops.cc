// Asynchronous collectives: each SPMD collective (collective_ops.cc) split into a start and
// a done, so a scheduler can run compute between the two (passes/async_collectives.h makes
// them; sched/latency_hiding.h moves them apart).
//
//   s = all_gather_start(x [.., n, ..]), dim, mesh_axes, group_size  -> [.., n*g, ..]
//   r = all_gather_done(s, x)                                        -> s's shape and buffer
//   (reduce_scatter_start / _done and all_reduce_start / _done alike)
//   s = ragged_all_to_all_start(x, sizes), ...  -> ragged_all_to_all's result
//   r = ragged_all_to_all_done(s, x)            -> s's shape and buffer
// (the ragged start reads `sizes` only when it posts the exchange, so the done keeps just x)
//
// The start's result is the buffer the collective writes while it is in flight; the done
// returns that buffer (a view: no copy, sched/logical_buffers.cc) once the collective has
// finished. The done also reads the start's operand x, so liveness keeps x alive and
// unwritten until the done: the runtime may read it at any point of the window.
//
// The reference evaluation runs the whole collective in the start (the sync op's
// evaluation) and the done is the identity: every device runs the same instruction order,
// so this cannot deadlock, and the values are exactly the sync op's. The ops appear only
// after autodiff (the backend's pipeline makes them), so they have no gradient rule.
#include "kiln/ops/op_helpers.h"
#include "kiln/ops/registry.h"

namespace kiln::ops {
namespace {

using ir::Opcode;

Result<ir::Shape> done_rule(const InferContext& c, std::string_view op) {
  if (c.operands[0].is_tuple() || c.operands[1].is_tuple()) {
    return invalid_argument("{}: operands must be arrays (the start and its operand)", op);
  }
  return c.operands[0];
}

// The start's value maps dimension by dimension; the operand it keeps alive maps to nothing.
std::vector<std::vector<int>> done_dim_map(const ir::Instr& instr) {
  std::vector<std::vector<int>> map = internal::identity_dim_map(instr);
  std::fill(map[1].begin(), map[1].end(), -1);
  return map;
}

// `sizes`: the ragged pair's second operand (s32 counts), empty for the others.
std::string example(std::string_view op, std::string_view shape, std::string_view result, std::string_view attrs,
                    std::string_view sizes, bool with_done) {
  std::string text = fmt::format("module @ex\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n", shape);
  if (!sizes.empty()) text += fmt::format("  %sizes = {} parameter(), index=1\n", sizes);
  const std::string args = sizes.empty() ? "%x" : "%x, %sizes";
  if (!with_done) return text + fmt::format("  ROOT %s = {} {}_start({}), {}\n}}\n", result, op, args, attrs);
  return text + fmt::format("  %s = {} {}_start({}), {}\n  ROOT %r = {} {}_done(%s, %x)\n}}\n", result, op, args,
                            attrs, result, op);
}

}  // namespace

void register_async_collective_ops(OpTable& table) {
  struct Pair {
    Opcode sync, start, done;
    const char* name;
    const char* shape;
    const char* result;
    const char* attrs;
    const char* sizes = "";  // ragged: the counts operand of the example
  };
  const Pair pairs[] = {
      {Opcode::kAllGather, Opcode::kAllGatherStart, Opcode::kAllGatherDone, "all_gather", "f32[2,3]", "f32[2,3]",
       "dim=1, mesh_axes=fsdp, group_size=1"},
      {Opcode::kReduceScatter, Opcode::kReduceScatterStart, Opcode::kReduceScatterDone, "reduce_scatter", "f32[4,2]",
       "f32[4,2]", "dim=0, mesh_axes=data, group_size=1"},
      {Opcode::kAllReduce, Opcode::kAllReduceStart, Opcode::kAllReduceDone, "all_reduce", "f32[3]", "f32[3]",
       "mesh_axes=\"fsdp,expert\", group_size=1"},
      // The global form (two groups of two) with a capacity cut: the start moves the rows.
      {Opcode::kRaggedAllToAll, Opcode::kRaggedAllToAllStart, Opcode::kRaggedAllToAllDone, "ragged_all_to_all",
       "f32[4,3,2]", "f32[4,4,2]", "group_size=2, rows=3, slot=2, reverse=0", "s32[4,2]"},
  };
  for (const Pair& p : pairs) {
    const OpDef& sync = table.get(p.sync);  // registered before (registry.cc orders the families)
    OpDef start;
    start.opcode = p.start;
    start.min_operands = start.max_operands = sync.max_operands;
    start.device_dependent = true;
    start.attrs = sync.attrs;
    start.infer = sync.infer;
    start.eval = sync.eval;
    start.grad = GradKind::kNone;
    start.dim_map = sync.dim_map;
    start.cost = sync.cost;
    start.async_role = AsyncRole::kStart;
    start.async_partner = p.done;
    start.async_of = p.sync;
    // Sizes in [-1, 3): empty, cut and negative blocks (as ragged_all_to_all's own examples).
    const std::vector<std::pair<double, double>> ranges =
        *p.sizes ? std::vector<std::pair<double, double>>{{-2, 2}, {-1, 3}} : std::vector<std::pair<double, double>>{};
    start.examples = {OpExample{example(p.name, p.shape, p.result, p.attrs, p.sizes, false), ranges}};
    table.add(std::move(start));

    OpDef done;
    done.opcode = p.done;
    done.min_operands = done.max_operands = 2;
    done.device_dependent = true;
    std::string name = std::string(p.name) + "_done";
    done.infer = [name](const InferContext& c) { return done_rule(c, name); };
    done.eval = [](const ir::Instr& instr, std::span<const ir::Literal* const> args) {
      return ir::Literal(instr.shape(), args[0]->values());
    };
    done.grad = GradKind::kNone;
    done.dim_map = done_dim_map;
    done.cost = internal::zero_cost;  // the data moved in the start
    done.async_role = AsyncRole::kDone;
    done.async_partner = p.start;
    done.async_of = p.sync;
    done.aliases_operand = true;  // the buffer its start wrote
    done.examples = {OpExample{example(p.name, p.shape, p.result, p.attrs, p.sizes, true), ranges}};
    table.add(std::move(done));
  }
}

}  // namespace kiln::ops
