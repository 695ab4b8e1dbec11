#include "kiln/sched/latency_hiding.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/registry.h"

namespace kiln::sched {

using ir::Instr;
using ir::Opcode;

bool is_async_done(const Instr& instr) { return ops::op_def(instr.opcode()).async_role == ops::AsyncRole::kDone; }

bool is_async_start(const Instr& instr) { return ops::op_def(instr.opcode()).async_role == ops::AsyncRole::kStart; }

std::string LatencyHidingStats::to_string() const {
  return fmt::format("{} async collective pairs, {} overlapped with compute; in flight at most {:.1f} MiB (limit {:.1f} MiB); "
                     "{} readers delayed",
                     pairs, overlapped, peak_in_flight_bytes / 1048576.0, limit_bytes / 1048576.0, sunk_readers);
}

namespace {

// "layers.12.mlp.wi_0" -> 12; -1 when the name has no layer.
int64_t layer_of(const std::string& name) {
  const std::string key = "layers.";
  size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  size_t p = at + key.size(), q = p;
  while (q < name.size() && name[q] >= '0' && name[q] <= '9') ++q;
  if (q == p || q >= name.size() || name[q] != '.') return -1;
  return std::stoll(name.substr(p, q - p));
}

// Bytes a pair holds while its window is open: the result, and the operand when it is a
// computed value (an argument lives anyway).
int64_t window_bytes(const Instr& start, const BufferModel* model) {
  int64_t bytes = start.shape().byte_size();
  if (model == nullptr) return bytes + start.operand(0)->shape().byte_size();
  for (int b : model->leaves(start.operand(0))) {
    if (model->buffer(b).source == BufferSource::kComputed) bytes += model->buffer(b).bytes;
  }
  return bytes;
}

// Parameters, constants and views of them (a weight reshaped for a combined all-gather's
// concatenation): nothing to run, so they go first and a collective's operand made of them
// counts as made from arguments.
bool is_source(const Instr* i) {
  if (i->opcode() == Opcode::kParameter || i->opcode() == Opcode::kConstant) return true;
  return is_view(*i) && !is_async_done(*i) && i->operands().size() == 1 && is_source(i->operand(0));
}

// The non-async part of the schedule, with the async instructions' places between its
// entries ("gap" k: right before base[k]).
struct Layout {
  Schedule base;
  std::unordered_map<const Instr*, int> base_pos, orig_gap;
  std::vector<const Instr*> pending;  // async instructions in scheduled order
};

// Delays the readers of a reduce-scatter's or all-reduce's done that the memory scheduler
// ran right after it (a gradient's transpose, its squared-norm fusion), so the done can
// move later. A reader sinks to right before its first reader (which may sink first), only
// when that keeps live bytes as they were: each operand is a source, is read again later,
// or is no larger than the reader's own result (allocated that much later); and never past
// the writer of a donated output that takes an operand's storage.
class ReaderSinker {
 public:
  ReaderSinker(Layout& l, const BufferModel& model, const std::unordered_map<int, const Instr*>& donated_writer)
      : l_(l), model_(model), donated_writer_(donated_writer) {}

  int run() {
    int moved = 0;
    for (const Instr* done : l_.pending) {
      // (Gathered weights and exchanged tokens are read at once by compute that needs them.)
      if (!is_async_done(*done) || done->opcode() == Opcode::kAllGatherDone ||
          done->opcode() == Opcode::kRaggedAllToAllDone) {
        continue;
      }
      const Instr* reader = nullptr;
      bool single = true;
      for (const Instr* u : done->users()) {
        if (!l_.base_pos.count(u) || (reader != nullptr && reader != u)) single = false;
        reader = u;
      }
      if (single && reader != nullptr && sink(reader, 0)) ++moved;
      if (!single) moved += sink_slices(done);
    }
    return moved;
  }

 private:
  int64_t bytes(const std::vector<int>& buffers) const {
    int64_t total = 0;
    for (int b : buffers) total += model_.buffer(b).bytes;
    return total;
  }

  // The position of `u`'s first reader, or -1 when one is not in the base order.
  int first_reader(const Instr* u) const {
    int first = static_cast<int>(l_.base.size());
    for (const Instr* r : u->users()) {
      if (!l_.base_pos.count(r)) return -1;
      first = std::min(first, l_.base_pos.at(r));
    }
    return first;
  }

  // A combined collective's done is read by one slice per member (passes/combiner_groups.h),
  // all of which the memory scheduler runs right after it. Each moves to right before its
  // own first reader, all or none (the done can only move past compute when every reader
  // does): the combined buffer then lives until the last slice, at most the members' bytes
  // more, which the combiner caps (4 MiB by default).
  int sink_slices(const Instr* done) {
    std::vector<std::pair<int, const Instr*>> slices;  // (first reader, slice)
    for (const Instr* u : done->users()) {
      if (u->opcode() != Opcode::kSlice || !l_.base_pos.count(u)) return 0;
      int target = first_reader(u);
      // (its reshape back to the member's shape, a view, moves first when it comes next, with
      // what reads it; a view costs nothing, so it starts with the whole depth budget)
      if (target == l_.base_pos.at(u) + 1 && target < static_cast<int>(l_.base.size()) &&
          sink(l_.base[target], 0)) {
        target = first_reader(u);
      }
      if (target <= l_.base_pos.at(u) + 1 || writes_donated_before(u, target)) return 0;
      slices.emplace_back(target, u);
    }
    std::sort(slices.begin(), slices.end(), [&](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [target, u] : slices) move(u, first_reader(u));  // latest first: the others stay above
    return static_cast<int>(slices.size());
  }

  // Whether a donated output that takes the storage of one of `u`'s operands is written
  // before position `target`.
  bool writes_donated_before(const Instr* u, int target) const {
    for (const Instr* o : u->operands()) {
      for (int b : model_.leaves(o)) {
        auto w = donated_writer_.find(b);
        if (w != donated_writer_.end() && l_.base_pos.count(w->second) && l_.base_pos.at(w->second) < target) {
          return true;
        }
      }
    }
    return false;
  }

  // Moves `u` to right before base[target].
  void move(const Instr* u, int target) {
    const int from = l_.base_pos.at(u);
    l_.base.erase(l_.base.begin() + from);
    const int to = target - 1;
    l_.base.insert(l_.base.begin() + to, u);
    for (int k = from; k <= to; ++k) l_.base_pos[l_.base[k]] = k;
    for (auto& [a, g] : l_.orig_gap) {
      if (g > from && g <= to) --g;  // these ran after u; they still do not depend on it
    }
  }

  bool sink(const Instr* u, int depth) {
    if (depth > 3 || is_source(u) || !l_.base_pos.count(u)) return false;
    int target = first_reader(u);
    if (target < 0) return false;
    const int from = l_.base_pos.at(u);
    if (target == from + 1 && target < static_cast<int>(l_.base.size()) && sink(l_.base[target], depth + 1)) {
      target = first_reader(u);
    }
    if (target <= from + 1) return false;
    for (const Instr* o : u->operands()) {
      for (int b : model_.leaves(o)) {
        auto w = donated_writer_.find(b);
        if (w != donated_writer_.end() && l_.base_pos.count(w->second) && l_.base_pos.at(w->second) < target) {
          return false;
        }
      }
      if (is_source(o)) continue;
      bool read_later = false;
      for (const Instr* r : o->users()) {
        if (r == u) continue;
        int at = l_.base_pos.count(r) ? l_.base_pos.at(r) : l_.orig_gap.count(r) ? l_.orig_gap.at(r) : -1;
        if (at >= target) read_later = true;
      }
      // (a view's leaves are its operand's: sinking it extends nothing)
      if (!read_later && bytes(model_.leaves(u)) < bytes(model_.leaves(o))) return false;
    }
    move(u, target);
    return true;
  }

  Layout& l_;
  const BufferModel& model_;
  const std::unordered_map<int, const Instr*>& donated_writer_;
};

}  // namespace

int64_t default_overlap_limit(const ir::Computation& computation) {
  int64_t largest = 0, largest_weight = 0, largest_layer_weight = 0;
  for (const auto& instr : computation.instructions()) {
    if (!is_async_start(*instr)) continue;
    const int64_t bytes = window_bytes(*instr, nullptr);
    largest = std::max(largest, bytes);
    if (instr->opcode() != Opcode::kAllGatherStart) continue;
    // A weight's gather: its operand comes from a parameter through single-operand steps (a
    // cast, a reshape), or a concatenation of such (a combined gather). The partitioner's
    // gathers carry no name of their own: the weight they gather does
    // ("bf16_copy.layers.3.mlp.wi_0").
    bool of_weight = true, in_layer = false;
    std::vector<const Instr*> work = {instr->operand(0)};
    while (!work.empty() && of_weight) {
      const Instr* x = work.back();
      work.pop_back();
      in_layer = in_layer || layer_of(x->meta().name) >= 0;
      if (x->opcode() == Opcode::kParameter) continue;
      if (x->opcode() == Opcode::kConcatenate) {
        work.insert(work.end(), x->operands().begin(), x->operands().end());
      } else if (x->num_operands() == 1) {
        work.push_back(x->operand(0));
      } else {
        of_weight = false;  // an activation (the embedding lookup's rows on some meshes)
      }
    }
    if (!of_weight) continue;
    // Its window as the placement charges it: a parameter operand lives anyway.
    const bool from_argument = instr->operand(0)->opcode() == Opcode::kParameter;
    const int64_t charged = from_argument ? instr->shape().byte_size() : bytes;
    largest_weight = std::max(largest_weight, charged);
    if (in_layer) largest_layer_weight = std::max(largest_layer_weight, charged);
  }
  if (largest_layer_weight > 0) return largest_layer_weight;
  return largest_weight > 0 ? largest_weight : 2 * largest;
}

LatencyHidingStats hide_latency(Schedule& schedule, const BufferModel& model, const LatencyHidingOptions& options) {
  LatencyHidingStats stats;
  // The pairs, and everything else ("base") in its scheduled order.
  std::unordered_set<const Instr*> async;
  for (const Instr* i : schedule) {
    if (is_async_done(*i)) {
      async.insert(i);
      async.insert(i->operand(0));
      ++stats.pairs;
    }
  }
  if (stats.pairs == 0) return stats;
  const ir::Computation& comp = *schedule.front()->parent();
  stats.limit_bytes = options.limit_bytes >= 0 ? options.limit_bytes : default_overlap_limit(comp);
  // The other channel by default also fits its own largest window (a token exchange's
  // worst-case receive buffer, alive anyway as its result), one at a time.
  stats.other_limit_bytes = stats.limit_bytes;
  if (options.limit_bytes < 0) {
    for (const Instr* i : schedule) {
      if (is_async_start(*i) && i->opcode() != Opcode::kAllGatherStart) {
        stats.other_limit_bytes = std::max(stats.other_limit_bytes, window_bytes(*i, &model));
      }
    }
  }

  // Parameters and constants first: they cost nothing to "run", and a collective of a
  // weight may then start before anything else (a post-order schedule lists a parameter
  // right before its first reader).
  Schedule sources;
  Layout layout;
  for (const Instr* i : schedule) {
    if (is_source(i)) {
      sources.push_back(i);
    } else if (async.count(i)) {
      layout.orig_gap[i] = static_cast<int>(layout.base.size());  // it ran before base[orig_gap]
      layout.pending.push_back(i);
    } else {
      layout.base_pos[i] = static_cast<int>(layout.base.size());
      layout.base.push_back(i);
    }
  }
  // Donated outputs: a done must not pass the writer that takes its operand's argument storage.
  std::unordered_map<int, const Instr*> donated_writer;  // argument buffer -> writer
  for (const auto& [r, p] : donated_buffers(model, options.schedule.donated)) donated_writer[p] = model.buffer(r).def;
  if (options.sink_readers) stats.sunk_readers = ReaderSinker(layout, model, donated_writer).run();
  const Schedule& base = layout.base;
  const std::vector<const Instr*>& pending = layout.pending;
  const std::unordered_map<const Instr*, int>& base_pos = layout.base_pos;
  const std::unordered_map<const Instr*, int>& orig_gap = layout.orig_gap;
  std::unordered_map<const Instr*, int> gap;
  const int n = static_cast<int>(base.size());

  // Two channels, each under the limit: weight gathers ahead of the compute that reads them,
  // and everything else (gradient reduce-scatters behind the backward pass, all-reduces,
  // token exchanges), so a layer's re-gather and the previous layer's reduce-scatters overlap
  // the same backward compute without one crowding out the other.
  std::vector<int64_t> gather_charge(n, 0), other_charge(n, 0);
  std::unordered_map<const Instr*, int> moved;  // carried operands -> the gap they run in
  // Token exchanges first: a ragged all-to-all sits on the critical path of its layer (the
  // experts wait for it) and has a few instructions of window at most, while a weight
  // gather's window spans a layer or two; placed after the gathers, the exchange found the
  // limit filled by them (the reference config: 10 of 19 exchanges that could overlap
  // did not). A ragged pair whose start reads another pair's done keeps its turn.
  std::vector<const Instr*> order;
  for (const Instr* i : pending) {
    if (i->opcode() != Opcode::kRaggedAllToAllDone) continue;
    const auto& operands = i->operand(0)->operands();
    if (std::none_of(operands.begin(), operands.end(), [&](const Instr* o) { return async.count(o) > 0; })) {
      order.push_back(i);
    }
  }
  const std::unordered_set<const Instr*> first(order.begin(), order.end());
  for (const Instr* i : pending) {
    if (is_async_done(*i) && !first.count(i)) order.push_back(i);
  }
  for (const Instr* done : order) {
    const Instr* start = done->operand(0);
    // Latest gap for the done: before its first reader.
    int latest = n;
    for (const Instr* u : done->users()) latest = std::min(latest, base_pos.count(u) ? base_pos.at(u) : orig_gap.at(u));
    for (int b : model.leaves(done->operand(1))) {
      auto w = donated_writer.find(b);
      if (w == donated_writer.end()) continue;
      latest = std::min(latest, base_pos.count(w->second) ? base_pos.at(w->second) : orig_gap.at(done));
    }
    latest = std::max(latest, orig_gap.at(done));
    // Earliest gap for the start: after its operand. An operand computed from arguments only
    // for this collective (a weight's bf16 convert) moves with the start: a memory scheduler
    // computes it right before the collective, which would leave nothing to overlap. Other
    // compute (a gradient) stays where the memory scheduler put it.
    const Instr* x = start->operand(0);
    const bool carried = base_pos.count(x) && !is_source(x) &&
                         std::all_of(x->operands().begin(), x->operands().end(), is_source) &&
                         std::all_of(x->users().begin(), x->users().end(),
                                     [&](const Instr* u) { return u == start || u == done; });
    int earliest = 0;  // after the sources
    if (!carried && !is_source(x)) earliest = base_pos.count(x) ? base_pos.at(x) + 1 : gap.at(x);
    // A ragged start's sizes: computed beside the rows (the router's counts), never carried.
    for (const Instr* o : start->operands()) {
      if (o == x || is_source(o)) continue;
      earliest = std::max(earliest, base_pos.count(o) ? base_pos.at(o) + 1 : gap.at(o));
    }
    const int64_t bytes = window_bytes(*start, &model);
    const bool gather = start->opcode() == Opcode::kAllGatherStart;
    std::vector<int64_t>& charge = gather ? gather_charge : other_charge;
    const int64_t limit = gather ? stats.limit_bytes : stats.other_limit_bytes;
    auto widest = [&](int d) {
      int s = d;
      while (s > earliest && charge[s - 1] + bytes <= limit) --s;
      return s;
    };
    int d = latest, s = widest(d);
    // A done moved late without a window would keep its operand alive uncharged.
    if (s > orig_gap.at(done)) s = widest(d = orig_gap.at(done));
    // The carried operand runs right before the start (if the start did not move above it,
    // it stays where it was).
    if (carried && s <= base_pos.at(x)) moved[x] = s;
    for (int k = s; k < d; ++k) charge[k] += bytes;
    gap[start] = s;
    gap[done] = d;
    // Instructions between start and done (a carried operand's old place is empty now).
    const int between = d - s - (moved.count(x) && base_pos.at(x) < d ? 1 : 0);
    if (between > 0) ++stats.overlapped;
    KILN_VLOG(2) << "latency_hiding: %" << start->id() << " "
                 << (between > 0 ? fmt::format("overlaps {} instructions ({} bytes in flight)", between, bytes)
                     : d == earliest ? std::string("not overlapped: its first reader follows its operand")
                                     : fmt::format("not overlapped: {} bytes do not fit under the limit ({} of {} "
                                                   "in flight right before its done)",
                                                   bytes, d > 0 ? charge[d - 1] : 0, limit));
  }
  for (int k = 0; k < n; ++k) {
    stats.peak_in_flight_bytes = std::max(stats.peak_in_flight_bytes, gather_charge[k] + other_charge[k]);
  }

  // Rebuild: the async instructions of gap k (in their scheduled order, which respects their
  // dependences) run right before base[k].
  std::vector<std::vector<const Instr*>> at(n + 1);
  for (const Instr* i : pending) {
    if (is_async_start(*i) && moved.count(i->operand(0))) at[gap.at(i)].push_back(i->operand(0));
    at[gap.at(i)].push_back(i);
  }
  schedule = std::move(sources);
  for (int k = 0; k <= n; ++k) {
    schedule.insert(schedule.end(), at[k].begin(), at[k].end());
    if (k < n && !moved.count(base[k])) schedule.push_back(base[k]);
  }
  return stats;
}

}  // namespace kiln::sched
