#include "kiln/sched/memory_scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "kiln/base/check.h"

namespace kiln::sched {

using ir::Instr;

Schedule program_order(const ir::Computation& computation) {
  Schedule order;
  order.reserve(computation.instructions().size());
  for (const auto& owned : computation.instructions()) order.push_back(owned.get());
  return order;
}

namespace {
// Computed buffers are the ones a schedule can free; arguments and constants live throughout.
bool freeable(const LogicalBuffer& b) { return b.source == BufferSource::kComputed && !b.output; }
}  // namespace

Schedule list_schedule(const ir::Computation& computation, const BufferModel& model) {
  const auto& instrs = computation.instructions();
  std::unordered_map<const Instr*, int> index;
  for (size_t i = 0; i < instrs.size(); ++i) index[instrs[i].get()] = static_cast<int>(i);
  // Per buffer: instructions still to run that read it. Per instruction: operands not done.
  std::vector<int> readers_left(model.buffers().size(), 0);
  std::vector<std::vector<int>> used(instrs.size());
  std::vector<int> waiting(instrs.size(), 0);
  std::vector<std::vector<int>> users(instrs.size());
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr* instr = instrs[i].get();
    used[i] = model.used(instr);
    for (int b : used[i]) ++readers_left[b];
    std::vector<const Instr*> distinct;
    for (const Instr* o : instr->operands()) {
      if (std::find(distinct.begin(), distinct.end(), o) != distinct.end()) continue;
      distinct.push_back(o);
      ++waiting[i];
      users[index.at(o)].push_back(static_cast<int>(i));
    }
  }
  std::vector<int64_t> allocates(instrs.size(), 0);
  for (size_t i = 0; i < instrs.size(); ++i) {
    for (int b : model.defined(instrs[i].get())) {
      if (model.buffer(b).source == BufferSource::kComputed) allocates[i] += model.buffer(b).bytes;
    }
  }
  // Bytes freed by running i now: buffers for which i is the last reader left.
  auto score = [&](int i) {
    int64_t freed = 0;
    for (int b : used[i]) {
      if (readers_left[b] == 1 && freeable(model.buffer(b))) freed += model.buffer(b).bytes;
    }
    return freed - allocates[i];
  };
  std::vector<int> ready;
  for (size_t i = 0; i < instrs.size(); ++i) {
    if (waiting[i] == 0) ready.push_back(static_cast<int>(i));
  }
  Schedule order;
  order.reserve(instrs.size());
  while (!ready.empty()) {
    size_t best = 0;
    int64_t best_score = score(ready[0]);
    for (size_t r = 1; r < ready.size(); ++r) {
      int64_t s = score(ready[r]);
      if (s > best_score || (s == best_score && ready[r] < ready[best])) {
        best = r;
        best_score = s;
      }
    }
    int i = ready[best];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
    order.push_back(instrs[i].get());
    for (int b : used[i]) --readers_left[b];
    for (int u : users[i]) {
      if (--waiting[u] == 0) ready.push_back(u);
    }
  }
  KILN_CHECK_EQ(order.size(), instrs.size()) << "list scheduler: the computation has a cycle";
  return order;
}

int64_t peak_live_bytes(const BufferModel& model, const Schedule& schedule) {
  std::vector<int> last(model.buffers().size(), -1);
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (int b : model.used(schedule[s])) last[b] = static_cast<int>(s);
  }
  std::vector<int64_t> freed_at(schedule.size() + 1, 0);
  int64_t live = 0, peak = 0;
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (int b : model.defined(schedule[s])) {
      const LogicalBuffer& buf = model.buffer(b);
      if (buf.source != BufferSource::kComputed) continue;
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

ScheduleChoice choose_schedule(const ir::Computation& computation, const BufferModel& model) {
  ScheduleChoice choice;
  Schedule in_order = program_order(computation);
  Schedule listed = list_schedule(computation, model);
  Schedule post = post_order_schedule(computation);
  choice.program_order_peak = peak_live_bytes(model, in_order);
  choice.list_peak = peak_live_bytes(model, listed);
  choice.post_order_peak = peak_live_bytes(model, post);
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
