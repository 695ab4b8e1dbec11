#include "kiln/passes/fusion.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/logging.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/fusion_inputs.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

ops::MappedRead mapped_read_kind(const Instr& o) { return ops::op_def(o.opcode()).mapped_read; }

// The bytes fusing the mapped read `o` into a group saves, or 0 with the reason it does not
// join (see fusion.h).
int64_t mapped_read_saving(const Instr* o, const std::unordered_set<const Instr*>& in_group, std::string* why) {
  const int64_t out = o->shape().num_elements() * ir::dtype_size(o->shape().dtype());
  const int64_t operand = o->operand(0)->shape().num_elements() * ir::dtype_size(o->operand(0)->shape().dtype());
  const bool all_inside =
      std::all_of(o->users().begin(), o->users().end(), [&](const Instr* u) { return in_group.count(u) > 0; });
  switch (mapped_read_kind(*o)) {
    case ops::MappedRead::kWindow:
      // Copied into every group that reads it: each reads the window of the operand instead
      // of the slice or pad, and once every reader has it (drop_windows_written_anyway) it is
      // neither written nor read back.
      return out;
    case ops::MappedRead::kTranspose:
      if (!all_inside) {
        *why = "a transpose used outside the group is written anyway; a strided read of its operand saves nothing";
        return 0;
      }
      return 2 * out;  // the copy is neither written nor read back
    case ops::MappedRead::kBroadcast: {
      // This group reads `operand` bytes instead of `out`; when it is the only reader the copy
      // is not written either.
      const int64_t saved = out - operand + (all_inside ? out : 0);
      if (saved <= 0) *why = "the broadcast does not expand its operand";
      return std::max<int64_t>(saved, 0);
    }
    case ops::MappedRead::kNone: break;
  }
  *why = "not a mapped read";
  return 0;
}

bool is_elementwise(const Instr* i) {
  return !i->shape().is_tuple() && ops::op_def(i->opcode()).elementwise;
}

// Broadcasts, windows (slices, pads) and fusible iotas are copied into every group that
// reads them (an outside copy stays while another op reads it): they are neither taken by
// one group nor moved.
bool copied_into_groups(const Instr* i) {
  const ops::MappedRead kind = mapped_read_kind(*i);
  return kind == ops::MappedRead::kBroadcast || kind == ops::MappedRead::kWindow || i->opcode() == Opcode::kIota;
}

// A broadcast of a scalar: reading it costs nothing inside a loop, so groups may copy it.
bool is_scalar_broadcast(const Instr* i) {
  return i->opcode() == Opcode::kBroadcast && i->operand(0)->shape().rank() == 0;
}

// A reduction that can end an input fusion: floating point, over one contiguous block of
// dimensions (so the generated loop reads its input as [outer, reduced, inner] in place).
bool is_fusible_reduce(const Instr* i) {
  if (i->opcode() != Opcode::kReduceSum && i->opcode() != Opcode::kReduceMax && i->opcode() != Opcode::kReduceMin) {
    return false;
  }
  ir::DType d = i->shape().dtype();
  if (d != ir::DType::kF32 && d != ir::DType::kF64) return false;
  std::vector<int64_t> dims = i->attrs().get_ints("dims");
  std::sort(dims.begin(), dims.end());
  return !dims.empty() && dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
}

// Scheduling stages order the micro-batches of gradient accumulation (step_program.cc: stage
// m + 1 is micro-batch m; 0 is unstaged work, scheduled as soon as it is ready). A group holds
// unstaged instructions and those of at most one stage: a fusion runs as one kernel, so an
// earlier stage's member would wait for the later stage with all its operands. Fused whole,
// the chain of gradient sums g0 + g1 + ... + gk kept every micro-batch's gradients alive until
// the last micro-batch ended, and memory grew with the number of micro-batches.
bool of_another_stage(const Instr* o, int32_t group_stage) {
  const int32_t s = o->meta().stage;
  return s != 0 && group_stage != 0 && s != group_stage;
}

struct Group {
  Instr* root;
  std::vector<Instr*> members;  // program order once sorted
  const char* kind = "loop";    // "input": the root is a reduction of the loop's values
};

}  // namespace

// (SwiGLU's gradient reads three: the up and gate projections and the down projection's
// gradient.)
bool is_library_result(const ir::Instr& instr) {
  return ops::op_def(instr.opcode()).kernel_class != ops::KernelClass::kOther && !instr.shape().is_tuple();
}

namespace {

Group grow(Instr* root, const std::unordered_set<const Instr*>& taken,
           const std::unordered_map<const Instr*, size_t>& position, bool single_op) {
  Group g{root, {root}};
  // The loop runs over the root's dims, or over its input's dims for a reduction.
  const std::vector<int64_t>& loop_dims =
      is_elementwise(root) ? root->shape().dims() : root->operand(0)->shape().dims();
  if (!is_elementwise(root)) g.kind = "input";
  std::unordered_set<const Instr*> in_group = {root};
  std::vector<Instr*> work = {root};
  int32_t group_stage = root->meta().stage;
  // Library kernels' results of the loop's size that the group reads (matmuls, grouped
  // matmuls): each must be alive when the kernel runs. A chain of adds over many of them (the
  // partial gradients of a weight used by every loss tile, summed before one reduce-scatter)
  // fused whole would keep them all alive at once; kept to a few, the chain runs as a few
  // kernels that each free what they add.
  const int64_t loop_elements = [&] {
    int64_t n = 1;
    for (int64_t d : loop_dims) n *= d;
    return n;
  }();
  auto library_result = [&](const Instr* x) {
    return is_library_result(*x) && x->shape().num_elements() == loop_elements;
  };
  std::unordered_set<const Instr*> library_inputs;
  for (const Instr* x : root->operands()) {
    if (library_result(x)) library_inputs.insert(x);
  }
  while (!work.empty()) {
    Instr* cur = work.back();
    work.pop_back();
    for (Instr* o : cur->operands()) {
      if (in_group.count(o)) continue;
      if (is_scalar_broadcast(o)) {
        in_group.insert(o);
        g.members.push_back(o);
        continue;
      }
      if (!single_op && is_fusible_iota(*o)) {
        if (o->shape().dims() == loop_dims && std::string(g.kind) == "loop") {
          in_group.insert(o);  // copied, like a scalar broadcast: the loop index is its value
          g.members.push_back(o);
        } else {
          KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id()
                       << ": an iota joins loop fusions over its own dims only";
        }
        continue;
      }
      if (!single_op && is_mapped_read(*o) && !taken.count(o)) {
        // Joins as a load at another index; its operand stays outside (not grown through).
        std::string why;
        if (o->shape().dims() != loop_dims) {
          why = "other dims";
        } else if (std::string(g.kind) == "input") {
          why = "an input fusion reads its operands at the loop index only";
        } else if (o->operand(0)->shape().rank() == 0 || o->operand(0)->shape().is_tuple()) {
          why = "a scalar or tuple operand";
        } else if (of_another_stage(o, group_stage)) {
          why = "another scheduling stage";
        } else if (int64_t saved = mapped_read_saving(o, in_group, &why); saved > 0) {
          group_stage = std::max(group_stage, o->meta().stage);
          KILN_VLOG(2) << "fusion: %" << o->id() << " into %" << root->id() << " as a mapped read, " << saved
                       << " bytes saved";
          in_group.insert(o);
          g.members.push_back(o);
          continue;
        }
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id() << ": " << why;
        continue;
      }
      if (single_op || !is_elementwise(o) || taken.count(o)) continue;
      if (o->shape().dims() != loop_dims) {
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id() << ": other dims";
        continue;
      }
      bool all_users_inside = std::all_of(o->users().begin(), o->users().end(),
                                          [&](const Instr* u) { return in_group.count(u) > 0; });
      if (!all_users_inside) {
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id() << ": used outside the group";
        continue;
      }
      if (std::any_of(o->users().begin(), o->users().end(), [](const Instr* u) { return is_mapped_read(*u); })) {
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id()
                     << ": a mapped read (transpose, broadcast, slice, pad) reads it (it would be needed at two indices)";
        continue;
      }
      if (of_another_stage(o, group_stage)) {
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id() << ": another scheduling stage";
        continue;
      }
      size_t more = 0;
      for (const Instr* x : o->operands()) more += library_result(x) && !library_inputs.count(x) ? 1 : 0;
      if (more > 0 && library_inputs.size() + more > kMaxLibraryInputs) {
        KILN_VLOG(2) << "fusion: %" << o->id() << " not into %" << root->id() << ": the kernel would read "
                     << library_inputs.size() + more << " matmul results at once (all alive until it runs)";
        continue;
      }
      for (const Instr* x : o->operands()) {
        if (library_result(x)) library_inputs.insert(x);
      }
      group_stage = std::max(group_stage, o->meta().stage);
      in_group.insert(o);
      g.members.push_back(o);
      work.push_back(o);
    }
  }
  std::sort(g.members.begin(), g.members.end(),
            [&](const Instr* a, const Instr* b) { return position.at(a) < position.at(b); });
  return g;
}

// A window (slice, pad) copied into groups saves its kernel only when every reader copied
// it. When some reader did not (a reduction's input fusion, a concatenate, a matmul), it is
// written anyway: the groups that copied it read it whole instead, as they would without it,
// so that multi-output fusion may still merge them into such a reader (an input fusion takes
// no mapped read; the gradient clipping's sum of squares and its scaling, on replicated
// parameters' slices of a combined all-reduce).
void drop_windows_written_anyway(std::vector<Group>& groups) {
  std::unordered_map<const Instr*, std::vector<size_t>> copies;  // window -> groups that copied it
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Instr* m : groups[g].members) {
      if (mapped_read_kind(*m) == ops::MappedRead::kWindow) copies[m].push_back(g);
    }
  }
  if (copies.empty()) return;
  std::vector<std::unordered_set<const Instr*>> members(groups.size());
  for (const auto& [window, in] : copies) {
    for (size_t g : in) {
      if (members[g].empty()) members[g].insert(groups[g].members.begin(), groups[g].members.end());
    }
  }
  for (const auto& [window, in] : copies) {
    const bool every_reader_copied = std::all_of(window->users().begin(), window->users().end(), [&](const Instr* u) {
      return std::any_of(in.begin(), in.end(), [&](size_t g) { return members[g].count(u) > 0; });
    });
    if (every_reader_copied) continue;
    KILN_VLOG(2) << "fusion: %" << window->id() << " stays a kernel: a reader outside the groups reads it";
    for (size_t g : in) std::erase(groups[g].members, window);
  }
}

// Moves the group into a new computation and replaces its root by one fusion instruction
// (the members, now unused, are removed by the caller).
void outline(ir::Module& module, ir::Computation& comp, const Group& g) {
  ir::Computation* body = module.add_computation(module.fresh_id("fused"));
  std::unordered_map<const Instr*, Instr*> inside;
  std::unordered_set<const Instr*> members(g.members.begin(), g.members.end());
  FusionInputs inputs(*body);
  for (Instr* m : g.members) {
    std::vector<Instr*> operands;
    operands.reserve(m->operands().size());
    for (Instr* o : m->operands()) operands.push_back(members.count(o) ? inside.at(o) : inputs.param_for(o));
    // Members other than the root (whose metadata the fusion takes below) and copied
    // broadcasts (which may stay) are removed by the caller: their attributes and metadata
    // move instead of being copied (a 16-layer step outlines tens of thousands).
    const bool dies = m != g.root && !copied_into_groups(m);
    Instr* copy = body->add(m->opcode(), m->shape(), std::move(operands), dies ? std::move(m->mutable_attrs()) : m->attrs());
    copy->mutable_meta() = dies ? std::move(m->mutable_meta()) : m->meta();
    inside[m] = copy;
  }
  body->set_root(inside.at(g.root));
  Instr* fusion = comp.add(Opcode::kFusion, g.root->shape(), inputs.inputs(), {{"kind", std::string(g.kind)}});
  fusion->set_called({body});
  fusion->mutable_meta().name = g.root->meta().name;
  fusion->mutable_meta().loc = g.root->meta().loc;
  fusion->mutable_meta().axes = g.root->meta().axes;
  fusion->mutable_meta().sharding = g.root->meta().sharding;
  fusion->mutable_meta().stage = g.root->meta().stage;
  g.root->replace_all_uses_with(fusion);
}

}  // namespace

bool is_mapped_read(const Instr& instr) {
  switch (mapped_read_kind(instr)) {
    case ops::MappedRead::kTranspose: return true;
    case ops::MappedRead::kBroadcast: return instr.operand(0)->shape().rank() > 0;  // else the scalar itself
    case ops::MappedRead::kWindow: {
      if (instr.shape().rank() == 0) return false;
      // Interior padding would need a stride test per element: such a pad stays a kernel.
      const std::vector<int64_t> interior = instr.attrs().get_ints_or("interior", {});
      return std::all_of(interior.begin(), interior.end(), [](int64_t i) { return i == 0; });
    }
    case ops::MappedRead::kNone: return false;
  }
  return false;
}

bool is_fusible_iota(const Instr& instr) {
  if (instr.opcode() != Opcode::kIota) return false;
  const ir::DType d = instr.shape().dtype();
  return d == ir::DType::kS32 || d == ir::DType::kU32;
}

Result<bool> FusionPass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  std::vector<Instr*> order = comp.post_order();
  std::unordered_map<const Instr*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::unordered_set<const Instr*> taken;
  std::vector<Group> groups;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Instr* instr = *it;
    if (taken.count(instr)) continue;
    bool reduce_root = !single_ops_ && is_fusible_reduce(instr);
    if (!is_elementwise(instr) && !reduce_root) continue;
    Group g = grow(instr, taken, position, single_ops_);
    if (reduce_root && g.members.size() == 1) continue;  // nothing to fuse into it: a native reduction
    for (Instr* m : g.members) {
      if (!copied_into_groups(m)) taken.insert(m);
    }
    groups.push_back(std::move(g));
  }
  drop_windows_written_anyway(groups);
  for (const Group& g : groups) outline(module, comp, g);
  // The outlined members die together, in one sweep over the computation (removing them
  // group by group rescans the whole list each time: quadratic in a 16-layer step). A copied
  // scalar broadcast stays while something outside the fusions still reads it.
  std::vector<Instr*> members;
  for (const Group& g : groups) members.insert(members.end(), g.members.begin(), g.members.end());
  std::sort(members.begin(), members.end(), [&](const Instr* a, const Instr* b) { return position.at(a) > position.at(b); });
  members.erase(std::unique(members.begin(), members.end()), members.end());
  std::vector<Instr*> dead;
  std::unordered_set<const Instr*> dying;
  for (Instr* m : members) {
    bool users_dying = std::all_of(m->users().begin(), m->users().end(), [&](const Instr* u) { return dying.count(u) > 0; });
    if (users_dying) {
      dead.push_back(m);
      dying.insert(m);
    }
  }
  comp.remove(dead);
  if (!groups.empty()) comp.topo_sort();
  return !groups.empty();
}

}  // namespace kiln::passes
