#include "kiln/memory/buffer_assignment.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ops/registry.h"

namespace kiln::memory {

using ir::Instr;
using ir::Opcode;
using sched::BufferSource;
using sched::LogicalBuffer;

namespace {
constexpr int64_t kAlign = 64;  // every arena offset: a cache line, as Buffer's own storage
int64_t aligned(int64_t bytes) { return (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

bool is_reduce(Opcode op) { return op == Opcode::kReduceSum || op == Opcode::kReduceMax || op == Opcode::kReduceMin; }

bool ends_with_grad(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
}

// The most bytes alive at one of n schedule steps, from intervals alive from a start step
// through an end step (an end past the schedule counts to its last step).
class StepPeak {
 public:
  explicit StepPeak(int n) : n_(n), delta_(static_cast<size_t>(n) + 2, 0) {}
  void add(int start, int end, int64_t bytes) {
    delta_[start] += bytes;
    delta_[std::min(end, n_) + 1] -= bytes;
  }
  int64_t peak() const {
    int64_t live = 0, most = 0;
    for (int s = 0; s < n_; ++s) most = std::max(most, live += delta_[s]);
    return most;
  }

 private:
  int n_;
  std::vector<int64_t> delta_;
};
}  // namespace

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kArgument: return "argument";
    case Placement::kConstant: return "constant";
    case Placement::kArena: return "arena";
    case Placement::kDonated: return "donated";
    case Placement::kOutput: return "output";
  }
  return "?";
}

bool can_write_in_place(const Instr& instr, int operand, int element) {
  if (instr.opcode() != Opcode::kFusion || instr.called().empty()) return false;
  const ir::Computation& body = *instr.called()[0];
  const Instr* root = body.root();
  // Every array output is written at the index the loop reads its operands at, after all of
  // them are read (an input fusion's loop nest visits each index of its input once too); a
  // reduction's result is not.
  const Instr* written = root;
  if (root->opcode() == Opcode::kTuple) {
    if (element < 0 || element >= root->num_operands()) return false;
    written = root->operand(element);
  } else if (element != 0) {
    return false;
  }
  if (written->shape().is_tuple() || is_reduce(written->opcode())) return false;
  const ir::Shape& out = written->shape();
  const Instr* param = nullptr;
  for (const Instr* p : body.params()) {
    if (p->attrs().get_int("index") == operand) param = p;
  }
  if (param == nullptr) return false;
  if (param->shape().is_tuple() || param->shape().dims() != out.dims() ||
      ir::dtype_size(param->shape().dtype()) != ir::dtype_size(out.dtype())) {
    return false;
  }
  for (const Instr* user : param->users()) {
    if (user->opcode() == Opcode::kTuple) continue;  // the operand passed through as an output
    if (is_reduce(user->opcode()) && user->operand(0)->shape().dims() == out.dims()) continue;  // read at idx too
    if (!ops::op_def(user->opcode()).elementwise) return false;
    if (user->shape().is_tuple() || user->shape().dims() != out.dims()) return false;
  }
  return true;
}

namespace {

// Whether `instr` reads buffer `b` only through operands its output `element` may overwrite
// in place.
bool reads_only_in_place(const Instr& instr, const sched::BufferModel& model, int b, int element) {
  bool reads = false;
  for (int k = 0; k < instr.num_operands(); ++k) {
    const auto& leaves = model.leaves(instr.operand(k));
    if (std::find(leaves.begin(), leaves.end(), b) == leaves.end()) continue;
    reads = true;
    if (leaves.size() != 1 || !can_write_in_place(instr, k, element)) return false;
  }
  return reads;
}

struct Group {
  std::vector<int> members;
  int start = 0, end = 0;
  int64_t bytes = 0;
  int64_t offset = -1;
};

// Greedy by decreasing size, best fit (XLA's GlobalDecreasingSizeBestFit): each group goes
// into the smallest gap between the groups already placed whose lifetimes overlap its own.
int64_t place(std::vector<Group>& groups) {
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (groups[a].bytes != groups[b].bytes) return groups[a].bytes > groups[b].bytes;
    return groups[a].start < groups[b].start;
  });
  std::vector<int> placed;
  int64_t arena = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + bytes) of overlapping groups
  for (int g : order) {
    Group& me = groups[g];
    busy.clear();
    for (int p : placed) {
      const Group& other = groups[p];
      if (other.start <= me.end && me.start <= other.end) busy.push_back({other.offset, other.offset + other.bytes});
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo - cursor >= me.bytes && (best < 0 || lo - cursor < best_gap)) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    me.offset = best >= 0 ? best : cursor;
    arena = std::max(arena, me.offset + me.bytes);
    placed.push_back(g);
  }
  return arena;
}

}  // namespace

Result<BufferAssignment> assign_buffers(const ir::Computation& computation, const sched::BufferModel& model,
                                        sched::Schedule schedule, const AssignmentOptions& options) {
  BufferAssignment a;
  a.schedule = std::move(schedule);
  const int n = static_cast<int>(a.schedule.size());
  std::unordered_map<const Instr*, int> pos;
  for (int s = 0; s < n; ++s) pos[a.schedule[s]] = s;
  KILN_CHECK_EQ(pos.size(), computation.instructions().size()) << "schedule does not cover the computation";

  const auto& buffers = model.buffers();
  a.slots.resize(buffers.size());
  for (const LogicalBuffer& b : buffers) {
    Slot& slot = a.slots[b.id];
    slot.start = slot.end = pos.at(b.def);
  }
  for (int s = 0; s < n; ++s) {
    for (int b : model.used(a.schedule[s])) a.slots[b].end = std::max(a.slots[b].end, s);
  }
  for (const LogicalBuffer& b : buffers) {
    Slot& slot = a.slots[b.id];
    if (b.output) slot.end = n;  // the caller reads it after the run
    switch (b.source) {
      case BufferSource::kArgument:
        slot.placement = Placement::kArgument;
        slot.argument = static_cast<int>(b.def->attrs().get_int("index"));
        a.argument_bytes += b.bytes;
        break;
      case BufferSource::kConstant:
        slot.placement = Placement::kConstant;
        a.constant_bytes += b.bytes;
        break;
      case BufferSource::kComputed: slot.placement = b.output ? Placement::kOutput : Placement::kArena; break;
    }
  }

  // Donated state: the output written into its argument's storage when the argument is
  // read for the last time before (or, in place, by) the instruction computing the output.
  const auto& outputs = model.outputs();
  std::vector<bool> argument_taken(computation.num_params(), false);
  for (const auto& [out, arg] : options.donated) {
    if (out < 0 || out >= static_cast<int64_t>(outputs.size())) {
      return invalid_argument("donated output {} out of range: the program has {} outputs", out, outputs.size());
    }
    if (arg < 0 || arg >= computation.num_params()) {
      return invalid_argument("donated argument {} out of range: the program has {} arguments", arg,
                              computation.num_params());
    }
    ++a.donated_requested;
    int r = outputs[out];
    const auto& param_leaves = model.leaves(computation.param(static_cast<int>(arg)));
    if (param_leaves.size() != 1 || argument_taken[arg]) continue;
    int p = param_leaves[0];
    const LogicalBuffer& rb = buffers[r];
    if (rb.source != BufferSource::kComputed || a.slots[r].placement != Placement::kOutput) continue;
    if (buffers[p].output || rb.bytes != buffers[p].bytes) continue;  // a passed-through argument stays as it is
    if (std::count(outputs.begin(), outputs.end(), r) != 1) continue;
    const Slot& ps = a.slots[p];
    Slot& rs = a.slots[r];
    if (ps.end > rs.start) continue;  // the argument is still read after the output is written
    if (ps.end == rs.start) {
      if (!reads_only_in_place(*rb.def, model, p, rb.element)) continue;
      rs.in_place_of = p;
    }
    rs.placement = Placement::kDonated;
    rs.argument = static_cast<int>(arg);
    argument_taken[arg] = true;
    ++a.donated_in_place;
  }

  // In-place reuse and arena groups: a buffer joins its operand's group when the fusion
  // writing it is that operand's last reader.
  std::vector<int> group_of(buffers.size(), -1);
  std::vector<Group> groups;
  for (int s = 0; s < n; ++s) {
    const Instr* instr = a.schedule[s];
    for (int r : model.defined(instr)) {
      if (a.slots[r].placement != Placement::kArena) continue;
      int joined = -1;
      if (options.in_place) {
        for (int b : model.used(instr)) {
          int g = group_of[b];
          if (g < 0 || groups[g].end != s || groups[g].members.back() != b) continue;
          if (buffers[b].bytes != buffers[r].bytes || !reads_only_in_place(*instr, model, b, buffers[r].element)) continue;
          joined = g;
          a.slots[r].in_place_of = b;
          ++a.in_place_reuses;
          break;
        }
      }
      if (joined < 0) {
        joined = static_cast<int>(groups.size());
        groups.push_back({{}, a.slots[r].start, a.slots[r].end, aligned(buffers[r].bytes), -1});
      }
      Group& g = groups[joined];
      g.members.push_back(r);
      g.end = std::max(g.end, a.slots[r].end);
      group_of[r] = joined;
    }
  }
  a.arena_bytes = place(groups);
  for (const Group& g : groups) {
    for (int m : g.members) a.slots[m].offset = g.offset;
  }
  for (const LogicalBuffer& b : buffers) {
    if (a.slots[b.id].placement == Placement::kOutput) a.output_bytes += b.bytes;
  }

  // Arena bytes live per step (a group occupies its storage from start through end).
  StepPeak arena_live(n);
  for (const Group& g : groups) arena_live.add(g.start, g.end, g.bytes);
  a.max_live_arena_bytes = arena_live.peak();
  // Activations: the forward's values the backward pass reads, at their peak. The backward
  // pass is every gradient instruction (named *.grad) and everything computed from one: the
  // forward pass never reads a gradient. Whatever else writes a buffer that a backward
  // instruction reads made an activation: the forward pass itself, or the backward's
  // recomputation of it (remat), or a fusion holding both (a fusion takes one member's name,
  // so names cannot tell them apart). The figure is the most such bytes alive at one step:
  // where the backward starts every saved value is alive; later a layer's recomputed values
  // join the saved ones still waiting for their layer. Micro-batches (scheduling stages) keep
  // their values at different times, and the peak over the schedule sees that.
  std::unordered_set<const Instr*> backward;
  for (const Instr* i : computation.post_order()) {
    bool b = ends_with_grad(i->meta().name);
    for (const Instr* o : i->operands()) b = b || backward.count(o) > 0;
    if (b) backward.insert(i);
  }
  std::vector<bool> read_by_backward(buffers.size(), false);
  for (const Instr* reader : backward) {
    for (int b : model.used(reader)) read_by_backward[b] = true;
  }
  StepPeak saved(n);
  for (const LogicalBuffer& b : buffers) {
    const Slot& slot = a.slots[b.id];
    if (!read_by_backward[b.id] || slot.placement != Placement::kArena || backward.count(b.def)) continue;
    saved.add(slot.start, slot.end, b.bytes);
  }
  a.saved_activation_bytes = saved.peak();
  return a;
}

std::string BufferAssignment::to_string(const sched::BufferModel& model) const {
  std::string out = fmt::format(
      "# buffer assignment: {} steps; arena {} bytes (schedule peak {}), outputs of their own {} bytes, "
      "arguments {} bytes, constants {} bytes\n# in-place reuses {}, donated outputs written in place {} of {}, "
      "saved activations {} bytes\n# step instruction[element] shape placement offset/argument lifetime\n",
      schedule.size(), arena_bytes, max_live_arena_bytes, output_bytes, argument_bytes, constant_bytes,
      in_place_reuses, donated_in_place, donated_requested, saved_activation_bytes);
  for (size_t s = 0; s < schedule.size(); ++s) {
    const Instr* instr = schedule[s];
    for (int b : model.defined(instr)) {
      const Slot& slot = slots[b];
      const LogicalBuffer& lb = model.buffer(b);
      std::string where = slot.placement == Placement::kArena ? fmt::format("@{}", slot.offset)
                          : slot.argument >= 0               ? fmt::format("arg{}", slot.argument)
                                                             : std::string("-");
      std::string in_place =
          slot.in_place_of >= 0 ? fmt::format(" in_place_of=%{}[{}]", model.buffer(slot.in_place_of).def->id(),
                                              model.buffer(slot.in_place_of).element)
                                : "";
      out += fmt::format("{} %{}[{}] {} {} {} [{}, {}]{}\n", s, instr->id(), lb.element, lb.shape.to_string(),
                         placement_name(slot.placement), where, slot.start, slot.end, in_place);
    }
  }
  return out;
}

}  // namespace kiln::memory
