// The memory-aware list scheduler (memory_scheduler.h) with instructions run on demand and
// its two constraints: lazy recomputation and donated outputs after their argument's other
// readers.
#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "kiln/base/check.h"
#include "kiln/passes/recompute_names.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::sched {

using ir::Instr;

namespace {

// Computed buffers are the ones a schedule can free; arguments and constants live throughout.
bool freeable(const LogicalBuffer& b) { return b.source == BufferSource::kComputed && !b.output; }

void sort_unique(std::vector<int>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

Schedule list_schedule(const ir::Computation& computation, const BufferModel& model, const ScheduleOptions& options) {
  const auto& instrs = computation.instructions();
  const int n = static_cast<int>(instrs.size());
  std::unordered_map<const Instr*, int> index;
  for (int i = 0; i < n; ++i) index[instrs[i].get()] = i;
  std::vector<bool> lazy(n);
  std::vector<std::vector<int>> operands(n), users(n), used(n);
  std::vector<std::vector<int>> readers_of(model.buffers().size());
  for (int i = 0; i < n; ++i) {
    const Instr* instr = instrs[i].get();
    lazy[i] = is_recomputation(*instr) && !recomputes_loss_tile(*instr);
    for (const Instr* o : instr->operands()) operands[i].push_back(index.at(o));
    sort_unique(operands[i]);
    for (int o : operands[i]) {
      KILN_CHECK_LT(o, i) << "list scheduler: the computation is not in topological order at " << instr->to_string();
      users[o].push_back(i);
    }
    used[i] = model.used(instr);
    for (int b : used[i]) readers_of[b].push_back(i);
  }

  // On demand: an instruction that makes one argument or constant ready for use (through
  // other such instructions): an FSDP weight's cast and all-gather, a zero accumulator. It is ready from the first step, and a greedy choice among allocations
  // would run the cheapest first (all of a model's expert-weight gathers, 0.5 GiB each,
  // before an embedding's 2.8 GiB one: gpt-oss-20b held 36 GiB of gathered weights at once).
  // So it is never ready on its own: it runs right before the first instruction picked that
  // reads it (post order's placement), whose score pays for it; latency hiding then moves
  // a collective's start earlier, within its limit. Outputs and donated writes are not on
  // demand (their place is the donation's).
  std::vector<int64_t> defined_bytes(n, 0);
  std::vector<bool> defines_output(n, false);
  for (int i = 0; i < n; ++i) {
    for (int b : model.defined(instrs[i].get())) {
      const LogicalBuffer& buf = model.buffer(b);
      if (buf.source == BufferSource::kComputed) defined_bytes[i] += buf.bytes;
      defines_output[i] = defines_output[i] || buf.output;
    }
  }
  std::vector<bool> on_demand(n, false);
  for (int i = 0; i < n; ++i) {
    const ir::Opcode op = instrs[i]->opcode();
    // (A scalar is not worth delaying, and may be a counter the donations order.)
    const bool array = instrs[i]->shape().is_tuple() || instrs[i]->shape().num_elements() > 1;
    if (lazy[i] || defines_output[i] || !array || op == ir::Opcode::kParameter || op == ir::Opcode::kConstant) continue;
    int arrays = 0;                // operands of more than one element
    int64_t operand_bytes = 0;     // theirs
    bool from_sources = true, reads_on_demand = false;
    for (const Instr* o : instrs[i]->operands()) {
      const int k = index.at(o);
      const bool source = o->opcode() == ir::Opcode::kParameter || o->opcode() == ir::Opcode::kConstant;
      from_sources = from_sources && (source || on_demand[k]);
      reads_on_demand = reads_on_demand || on_demand[k];
      const bool is_array = o->shape().is_tuple() || o->shape().num_elements() > 1;
      arrays += is_array ? 1 : 0;
      operand_bytes += is_array ? o->shape().byte_size() : 0;
    }
    // One array made ready for use (a weight cast, gathered, transposed; a constant
    // broadcast) or expanded (a row statistic broadcast back over its rows: ready early,
    // it would cost as much as it is large and wait behind other allocations while the
    // value its reader frees stays alive), or a view of one (a collective's done, a
    // reshape). Not an instruction combining arrays: the forward pass is made of arguments
    // alone too (weights and the batch), and is the list scheduler's to order.
    const bool expands = arrays == 1 && defined_bytes[i] >= 2 * operand_bytes;
    // (Never over recomputation: its reader would not know to wait for the clone.)
    if (std::any_of(operands[i].begin(), operands[i].end(), [&](int o) { return lazy[o]; })) continue;
    on_demand[i] = defined_bytes[i] > 0 ? arrays <= 1 && (from_sources || expands) : from_sources && reads_on_demand;
  }

  // Prerequisites: the non-lazy instructions that must have run before i may be picked: its
  // non-lazy operands and, through its lazy and on-demand operands, what those read.
  std::vector<std::vector<int>> prereq(n);
  for (int i = 0; i < n; ++i) {
    for (int o : operands[i]) {
      if (lazy[o] || on_demand[o]) {
        prereq[i].insert(prereq[i].end(), prereq[o].begin(), prereq[o].end());
      } else {
        prereq[i].push_back(o);
      }
    }
    sort_unique(prereq[i]);
  }

  // Donated outputs wait for the other readers of their argument (a lazy reader stands for
  // the first non-lazy instructions that consume it), unless one of those readers depends
  // on the output itself: then the donation cannot be in place in any order.
  std::vector<int64_t> donated_bytes(n, 0);  // per instruction: output bytes written into arguments
  std::vector<std::vector<int>> extra_users(n);  // edges added by these constraints
  for (const auto& [r, p] : donated_buffers(model, options.donated)) {
    const int d = index.at(model.buffer(r).def);
    donated_bytes[d] += model.buffer(r).bytes;
    if (lazy[d] || on_demand[d]) continue;
    std::vector<int> readers, work;
    std::vector<bool> seen(n, false);
    for (int i : readers_of[p]) {
      if (i != d && !seen[i]) work.push_back(i), seen[i] = true;
    }
    while (!work.empty()) {
      int i = work.back();
      work.pop_back();
      if (!lazy[i] && !on_demand[i]) {
        readers.push_back(i);
        continue;
      }
      for (int u : users[i]) {
        if (!seen[u]) work.push_back(u), seen[u] = true;
      }
    }
    if (readers.empty()) continue;
    // Instructions that depend on d, through the graph and the constraints added so far.
    std::vector<bool> after(n, false);
    work = {d};
    after[d] = true;
    bool cycle = false;
    while (!work.empty() && !cycle) {
      int i = work.back();
      work.pop_back();
      for (const auto* next : {&users[i], &extra_users[i]}) {
        for (int u : *next) {
          if (!after[u]) after[u] = true, work.push_back(u);
        }
      }
      cycle = std::any_of(readers.begin(), readers.end(), [&](int x) { return after[x]; });
    }
    if (cycle) continue;
    for (int x : readers) extra_users[x].push_back(d);
    prereq[d].insert(prereq[d].end(), readers.begin(), readers.end());
    sort_unique(prereq[d]);
  }

  std::vector<int> waiting(n, 0);
  std::vector<std::vector<int>> dependents(n);
  for (int i = 0; i < n; ++i) {
    if (lazy[i] || on_demand[i]) continue;
    waiting[i] = static_cast<int>(prereq[i].size());
    for (int q : prereq[i]) dependents[q].push_back(i);
  }
  std::vector<int> readers_left(model.buffers().size(), 0);
  for (int i = 0; i < n; ++i) {
    for (int b : used[i]) ++readers_left[b];
  }
  std::vector<int64_t> allocates(n, 0);
  for (int i = 0; i < n; ++i) allocates[i] = defined_bytes[i] - donated_bytes[i];  // donated: written into the argument's storage

  std::vector<bool> done(n, false);
  // Recomputation runs in program order, where RematPass's topological sort put each clone:
  // right before its first backward use, so the last layer's clones come first. A candidate
  // that reads a clone not run yet first runs every clone up to that one (`lazy_order` from
  // `next_lazy` on); so a backward use that is ready early (the router's load-balancing
  // gradient needs only the loss) cannot pull an earlier layer's recomputation in before
  // the later layers' own.
  std::vector<int> lazy_order, newest_lazy(n, -1);  // per instruction: its last lazy operand
  for (int i = 0; i < n; ++i) {
    if (lazy[i]) lazy_order.push_back(i);
    for (int o : operands[i]) {
      if (lazy[o]) newest_lazy[i] = std::max(newest_lazy[i], o);
    }
  }
  // The chunk of a layer's expert dispatch each instruction belongs to, as a number
  // ("layers.3.mlp.chunks.2"; -1 for none). Chunks are independent: a chunk's backward needs its own clones and the
  // layer's shared ones, so a group takes the earlier clones of other chunks only when it
  // reads them. Otherwise the first chunk's gradient would pull every chunk's recomputation
  // in (their clones come first in program order) and all chunks' buffers would be live at
  // once, the peak chunking exists to avoid.
  std::vector<int> chunk_id(n, -1);
  int chunks = 0;
  {
    std::unordered_map<std::string_view, int> ids;
    for (int i = 0; i < n; ++i) {
      std::string_view c = passes::chunk_unit(instrs[i]->meta().name);
      if (c.empty()) continue;
      auto [it, inserted] = ids.try_emplace(c, chunks);
      if (inserted) ++chunks;
      chunk_id[i] = it->second;
    }
  }
  std::vector<int> needed_chunks;
  std::vector<int> chunk_walk;
  std::vector<bool> chunk_seen(n, false);
  auto collect_needed_chunks = [&](int i) {
    needed_chunks.clear();
    chunk_walk.assign(1, i);
    std::vector<int> visited;
    while (!chunk_walk.empty()) {
      const int x = chunk_walk.back();
      chunk_walk.pop_back();
      for (int o : operands[x]) {
        if (!lazy[o] || done[o] || chunk_seen[o]) continue;
        chunk_seen[o] = true;
        visited.push_back(o);
        if (chunk_id[o] >= 0 &&
            std::find(needed_chunks.begin(), needed_chunks.end(), chunk_id[o]) == needed_chunks.end()) {
          needed_chunks.push_back(chunk_id[o]);
        }
        chunk_walk.push_back(o);
      }
    }
    for (int v : visited) chunk_seen[v] = false;
  };
  size_t next_lazy = 0;
  std::vector<int> group;
  std::vector<bool> in_group(n, false);
  // Whether a group member may read o: run, in the group, or on demand with its own inputs
  // so (an expanding broadcast's statistic).
  std::function<bool(int)> available = [&](int o) {
    if (done[o] || in_group[o]) return true;
    if (!on_demand[o]) return false;
    return std::all_of(operands[o].begin(), operands[o].end(), available);
  };
  // A clone whose inputs are not all there yet waits for a later group (i's own recomputation
  // always can run: its inputs are i's prerequisites).
  auto group_of = [&](int i) -> const std::vector<int>& {
    group.clear();
    collect_needed_chunks(i);
    for (size_t k = next_lazy; k < lazy_order.size() && lazy_order[k] <= newest_lazy[i]; ++k) {
      const int l = lazy_order[k];
      if (done[l]) continue;
      if (chunk_id[l] >= 0 &&
          std::find(needed_chunks.begin(), needed_chunks.end(), chunk_id[l]) == needed_chunks.end()) {
        continue;  // another chunk's
      }
      bool runnable = std::all_of(operands[l].begin(), operands[l].end(), [&](int o) { return available(o); });
      if (!runnable) continue;
      group.push_back(l);
      in_group[l] = true;
    }
    for (int g : group) in_group[g] = false;
    group.push_back(i);
    return group;
  };
  // `members` with, before each, its on-demand operands not run yet (and theirs), once.
  std::vector<bool> in_expansion(n, false);
  auto with_on_demand = [&](const std::vector<int>& members) {
    std::vector<int> out;
    std::vector<std::pair<int, size_t>> stack;  // (instruction, next operand)
    for (int m : members) {
      for (int o : operands[m]) {
        if (!on_demand[o] || done[o] || in_expansion[o]) continue;
        stack.push_back({o, 0});
        in_expansion[o] = true;
        while (!stack.empty()) {
          auto& [x, next] = stack.back();
          if (next < operands[x].size()) {
            const int y = operands[x][next++];
            if (on_demand[y] && !done[y] && !in_expansion[y]) stack.push_back({y, 0}), in_expansion[y] = true;
            continue;
          }
          out.push_back(x);
          stack.pop_back();
        }
      }
      out.push_back(m);
    }
    for (int x : out) in_expansion[x] = false;
    return out;
  };
  // Bytes running the group frees (existing buffers it reads for the last time) minus bytes
  // it leaves allocated (what it defines, unless nothing after the group reads it).
  std::unordered_map<int, int> reads;
  auto score = [&](const std::vector<int>& group) {
    int64_t s = 0;
    if (group.size() == 1) {  // the common case, without the map
      const int i = group[0];
      for (int b : used[i]) {
        if (readers_left[b] == 1 && freeable(model.buffer(b))) s += model.buffer(b).bytes;
      }
      s -= allocates[i];
      for (int b : model.defined(instrs[i].get())) {
        if (readers_left[b] == 0 && freeable(model.buffer(b))) s += model.buffer(b).bytes;
      }
      return s;
    }
    reads.clear();
    for (int g : group) {
      for (int b : used[g]) ++reads[b];
    }
    auto last_reads = [&](int b) {
      auto it = reads.find(b);
      return freeable(model.buffer(b)) && readers_left[b] == (it == reads.end() ? 0 : it->second);
    };
    for (const auto& [b, k] : reads) {
      // Buffers the group itself defines are counted below.
      if (done[index.at(model.buffer(b).def)] && last_reads(b)) s += model.buffer(b).bytes;
    }
    for (int g : group) {
      s -= allocates[g];
      for (int b : model.defined(instrs[g].get())) {
        if (last_reads(b)) s += model.buffer(b).bytes;
      }
    }
    return s;
  };

  // Candidates that would run recomputation first come after every other ready candidate:
  // recomputation runs as late as possible, when the backward pass cannot go on without it.
  // Among them the most recently ready goes first (the one the gradient just reached).
  //
  // The others wait in `ranked`, best first (highest score, then program order). A ready
  // candidate's score changes only when a buffer it reads drops to one reader left (then it
  // is the candidate itself), so running an instruction re-ranks just the readers of the
  // buffers it read, and picking stays O(log n) instead of a scan of every candidate.
  std::vector<int64_t> ready_since(n, 0);
  int64_t clock = 0;
  std::vector<int> pending_lazy(n, 0);  // lazy operands not run yet
  for (int i = 0; i < n; ++i) {
    for (int o : operands[i]) pending_lazy[i] += lazy[o] ? 1 : 0;
  }
  // (stage, -score, index): a lower stage first (ir::Metadata::stage, 0 for most programs),
  // then the best score, then program order.
  std::set<std::tuple<int32_t, int64_t, int>> ranked;
  std::vector<int64_t> ranked_score(n, 0);
  std::vector<char> in_ranked(n, 0);
  // Chunks of a layer's expert dispatch run one at a time: once a chunk's instruction has
  // run, the best candidate of that chunk goes before a better-scored one of another chunk
  // (candidates of no chunk are not held back). Scored alone, a chunk's first steps (small
  // slices and sorts) beat the large steps of the chunk under way, so every chunk would be
  // started before any finished: gpt-oss-120b's forward held all 16 chunks' grouped-matmul
  // outputs of a layer (8.6 GiB) where one chunk's are 0.5 GiB.
  std::vector<std::set<std::tuple<int32_t, int64_t, int>>> chunk_ranked(chunks);
  int open_chunk = -1;
  auto unrank = [&](int i) {
    ranked.erase({instrs[i]->meta().stage, -ranked_score[i], i});
    if (chunk_id[i] >= 0) chunk_ranked[chunk_id[i]].erase({instrs[i]->meta().stage, -ranked_score[i], i});
    in_ranked[i] = 0;
  };
  std::vector<int> waiting_for_recomputation;  // ready, but needing recomputation first
  auto rank = [&](int i) {
    ranked_score[i] = score(with_on_demand({i}));
    ranked.insert({instrs[i]->meta().stage, -ranked_score[i], i});
    if (chunk_id[i] >= 0) chunk_ranked[chunk_id[i]].insert({instrs[i]->meta().stage, -ranked_score[i], i});
    in_ranked[i] = 1;
  };
  auto make_ready = [&](int i) {
    if (pending_lazy[i] > 0) {
      waiting_for_recomputation.push_back(i);
    } else {
      rank(i);
    }
  };
  for (int i = 0; i < n; ++i) {
    if (!lazy[i] && !on_demand[i] && waiting[i] == 0) make_ready(i);
  }
  Schedule order;
  order.reserve(instrs.size());
  auto run = [&](int i) {
    order.push_back(instrs[i].get());
    done[i] = true;
    for (int b : used[i]) {
      if (--readers_left[b] != 1) continue;
      for (int r : readers_of[b]) {  // the one reader left: its score changed
        if (done[r] || !in_ranked[r]) continue;
        unrank(r);
        rank(r);
      }
    }
    if (on_demand[i]) {  // its ranked readers no longer pay for it
      for (int u : users[i]) {
        if (done[u] || !in_ranked[u]) continue;
        unrank(u);
        rank(u);
      }
      return;
    }
    if (!lazy[i]) return;
    for (int u : users[i]) {
      if (--pending_lazy[u] > 0 || done[u]) continue;
      auto it = std::find(waiting_for_recomputation.begin(), waiting_for_recomputation.end(), u);
      if (it == waiting_for_recomputation.end()) continue;  // not ready yet
      waiting_for_recomputation.erase(it);
      rank(u);
    }
  };
  // The lowest stage among the candidates that wait for recomputation: a stage runs to its
  // end (recomputation included) before a later stage's ranked candidates.
  auto lowest_waiting_stage = [&]() {
    int32_t lowest = std::numeric_limits<int32_t>::max();
    for (int c : waiting_for_recomputation) lowest = std::min(lowest, instrs[c]->meta().stage);
    return lowest;
  };
  while (!ranked.empty() || !waiting_for_recomputation.empty()) {
    int i = -1;
    if (!ranked.empty() && (waiting_for_recomputation.empty() ||
                            std::get<0>(*ranked.begin()) <= lowest_waiting_stage())) {
      i = std::get<2>(*ranked.begin());
      if (chunk_id[i] >= 0 && open_chunk >= 0 && chunk_id[i] != open_chunk && !chunk_ranked[open_chunk].empty() &&
          std::get<0>(*chunk_ranked[open_chunk].begin()) <= std::get<0>(*ranked.begin())) {
        i = std::get<2>(*chunk_ranked[open_chunk].begin());  // finish the chunk under way first
      }
      unrank(i);
    } else {
      // The most recently ready one, then by score and program order. (Groups are scored
      // only here: a group can span many layers' clones.)
      const int32_t stage = lowest_waiting_stage();
      int64_t newest = -1, best_score = 0;
      for (int c : waiting_for_recomputation) {
        if (instrs[c]->meta().stage == stage) newest = std::max(newest, ready_since[c]);
      }
      for (int c : waiting_for_recomputation) {
        if (ready_since[c] != newest || instrs[c]->meta().stage != stage) continue;
        int64_t s = score(with_on_demand(group_of(c)));
        if (i < 0 || s > best_score || (s == best_score && c < i)) i = c, best_score = s;
      }
      waiting_for_recomputation.erase(std::find(waiting_for_recomputation.begin(), waiting_for_recomputation.end(), i));
    }
    if (chunk_id[i] >= 0) open_chunk = chunk_id[i];
    std::vector<int> to_run = with_on_demand(pending_lazy[i] > 0 ? group_of(i) : std::vector<int>{i});
    for (int g : to_run) run(g);
    while (next_lazy < lazy_order.size() && done[lazy_order[next_lazy]]) ++next_lazy;
    ++clock;
    for (int u : dependents[i]) {
      if (--waiting[u] == 0) {
        ready_since[u] = clock;
        make_ready(u);
      }
    }
  }
  // Recomputation nothing reads (dead code) goes last, in program order.
  for (int i = 0; i < n; ++i) {
    if (done[i]) continue;
    for (int o : operands[i]) KILN_CHECK(done[o]) << "list scheduler: the computation has a cycle";
    run(i);
  }
  KILN_CHECK_EQ(order.size(), instrs.size()) << "list scheduler: the computation has a cycle";
  return order;
}

}  // namespace kiln::sched
