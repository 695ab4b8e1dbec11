#include "kiln/sched/memory_scheduler.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/check.h"
#include "kiln/passes/recompute_names.h"

namespace kiln::sched {

using ir::Instr;

Schedule program_order(const ir::Computation& computation) {
  Schedule order;
  order.reserve(computation.instructions().size());
  for (const auto& owned : computation.instructions()) order.push_back(owned.get());
  return order;
}

bool is_recomputation(const ir::Instr& instr) {
  // A fusion is named after one member (its root's first output), so a fusion that holds a
  // forward value and a recomputed one (a norm's statistic recomputed from the residual sum
  // the forward writes in the same kernel) may carry the recomputed one's name. It is
  // recomputation only when every member is: otherwise the forward would wait for it, and a
  // forward that waits runs after every other ready instruction (gpt-oss-120b: all 108
  // expert-weight gathers, 453 GiB, before its second layer).
  if (instr.called().empty()) return passes::is_recomputation_name(instr.meta().name);
  bool any = false;
  for (const ir::Computation* c : instr.called()) {
    for (const auto& member : c->instructions()) {
      if (member->opcode() == ir::Opcode::kParameter || member->opcode() == ir::Opcode::kTuple) continue;
      if (!is_recomputation(*member)) return false;
      any = true;
    }
  }
  return any;
}

bool recomputes_loss_tile(const ir::Instr& instr) {
  return passes::is_loss_tile_name(instr.meta().name) && is_recomputation(instr);
}

std::vector<std::pair<int, int>> donated_buffers(const BufferModel& model,
                                                 const std::vector<std::pair<int64_t, int64_t>>& donated) {
  std::unordered_map<int64_t, std::vector<int>> argument_leaves;
  for (const LogicalBuffer& b : model.buffers()) {
    if (b.source == BufferSource::kArgument) argument_leaves[b.def->attrs().get_int("index")].push_back(b.id);
  }
  const auto& outputs = model.outputs();
  std::vector<std::pair<int, int>> pairs;
  std::unordered_set<int64_t> taken;
  for (const auto& [out, arg] : donated) {
    if (out < 0 || out >= static_cast<int64_t>(outputs.size())) continue;
    auto it = argument_leaves.find(arg);
    if (it == argument_leaves.end() || it->second.size() != 1) continue;
    const int r = outputs[out], p = it->second[0];
    const LogicalBuffer& rb = model.buffer(r);
    const LogicalBuffer& pb = model.buffer(p);
    if (rb.source != BufferSource::kComputed || pb.output || rb.bytes != pb.bytes) continue;
    if (std::count(outputs.begin(), outputs.end(), r) != 1 || !taken.insert(arg).second) continue;
    pairs.push_back({r, p});
  }
  return pairs;
}

int64_t peak_live_bytes(const BufferModel& model, const Schedule& schedule, const ScheduleOptions& options) {
  std::vector<int> last(model.buffers().size(), -1);
  std::unordered_map<const Instr*, int> pos;
  for (size_t s = 0; s < schedule.size(); ++s) {
    pos[schedule[s]] = static_cast<int>(s);
    for (int b : model.used(schedule[s])) last[b] = static_cast<int>(s);
  }
  // Donated outputs written once their argument is read no more take its storage.
  std::vector<bool> in_argument(model.buffers().size(), false);
  for (const auto& [r, p] : donated_buffers(model, options.donated)) {
    in_argument[r] = last[p] <= pos.at(model.buffer(r).def);
  }
  std::vector<int64_t> freed_at(schedule.size() + 1, 0);
  int64_t live = 0, peak = 0;
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (int b : model.defined(schedule[s])) {
      const LogicalBuffer& buf = model.buffer(b);
      if (buf.source != BufferSource::kComputed || in_argument[b]) continue;
      live += buf.bytes;
      // Never read and not an output: freed right after it is written.
      size_t end = buf.output ? schedule.size() : static_cast<size_t>(std::max(last[b], static_cast<int>(s)));
      freed_at[end] += buf.bytes;
    }
    peak = std::max(peak, live);
    live -= freed_at[s];
  }
  return peak;
}

Schedule post_order_schedule(const ir::Computation& computation) {
  Schedule order;
  order.reserve(computation.instructions().size());
  std::unordered_map<const Instr*, bool> done;
  // Iterative depth-first search: (instruction, next operand to visit).
  std::vector<std::pair<const Instr*, int>> stack = {{computation.root(), 0}};
  while (!stack.empty()) {
    auto& [instr, next] = stack.back();
    if (next < instr->num_operands()) {
      const Instr* o = instr->operand(next++);
      if (!done.count(o)) {
        done[o] = false;  // on the stack
        stack.push_back({o, 0});
      }
      continue;
    }
    done[instr] = true;
    order.push_back(instr);
    stack.pop_back();
  }
  // Instructions the root does not reach (dead code) go last, in program order.
  for (const auto& owned : computation.instructions()) {
    if (!done.count(owned.get())) order.push_back(owned.get());
  }
  return order;
}

void delay_donated_outputs(Schedule& schedule, const BufferModel& model, const ScheduleOptions& options) {
  std::unordered_map<const Instr*, int> pos;
  // Per buffer: the last step reading it, and the one before that (for a def that reads it).
  std::vector<std::pair<int, int>> last;
  auto index = [&] {
    pos.clear();
    last.assign(model.buffers().size(), {-1, -1});
    for (size_t s = 0; s < schedule.size(); ++s) {
      pos[schedule[s]] = static_cast<int>(s);
      for (int b : model.used(schedule[s])) last[b] = {static_cast<int>(s), last[b].first};
    }
  };
  index();
  for (const auto& [r, p] : donated_buffers(model, options.donated)) {
    const Instr* def = model.buffer(r).def;
    const int at = pos.at(def);
    // The last reader of the argument other than def itself.
    const int other = last[p].first == at ? last[p].second : last[p].first;
    if (other < at) continue;
    // def and what depends on it up to that reader move after it (in their order), unless
    // one of them reads the argument too.
    std::unordered_set<const Instr*> moving = {def};
    std::vector<const Instr*> work = {def};
    while (!work.empty()) {
      const Instr* i = work.back();
      work.pop_back();
      for (const Instr* u : i->users()) {
        if (pos.at(u) <= other && moving.insert(u).second) work.push_back(u);
      }
    }
    bool reads_argument = std::any_of(moving.begin(), moving.end(), [&](const Instr* i) {
      const auto& used = model.used(i);
      return i != def && std::find(used.begin(), used.end(), p) != used.end();
    });
    if (reads_argument) continue;
    std::stable_partition(schedule.begin() + at, schedule.begin() + other + 1,
                          [&](const Instr* i) { return !moving.count(i); });
    index();
  }
}

ScheduleChoice choose_schedule(const ir::Computation& computation, const BufferModel& model,
                               const ScheduleOptions& options) {
  ScheduleChoice choice;
  Schedule in_order = program_order(computation);
  Schedule listed = list_schedule(computation, model, options);
  Schedule post = post_order_schedule(computation);
  delay_donated_outputs(in_order, model, options);
  delay_donated_outputs(post, model, options);
  choice.program_order_peak = peak_live_bytes(model, in_order, options);
  choice.list_peak = peak_live_bytes(model, listed, options);
  choice.post_order_peak = peak_live_bytes(model, post, options);
  // The lowest peak wins; ties prefer the list schedule, then program order.
  choice.schedule = std::move(listed);
  choice.name = "list";
  choice.peak_bytes = choice.list_peak;
  if (choice.program_order_peak < choice.peak_bytes) {
    choice.schedule = std::move(in_order);
    choice.name = "program_order";
    choice.peak_bytes = choice.program_order_peak;
  }
  if (choice.post_order_peak < choice.peak_bytes) {
    choice.schedule = std::move(post);
    choice.name = "post_order";
    choice.peak_bytes = choice.post_order_peak;
  }
  return choice;
}

}  // namespace kiln::sched
