#include "kiln/passes/combiner_groups.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "kiln/ops/registry.h"
#include "kiln/passes/recompute_names.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

// KiB from the environment variable `var`, or `fallback` when it is unset or empty.
Result<int64_t> kib_from_env(const char* var, int64_t fallback) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') return fallback;
  std::string_view s(env);
  int64_t kib = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), kib);
  if (ec != std::errc() || end != s.data() + s.size() || kib < 0 || kib > (int64_t{1} << 40)) {
    return invalid_argument("{}='{}': expected a non-negative whole number of KiB", var, s);
  }
  return kib * 1024;
}

// Candidates combine only when their steps differ by at most this: a norm scale read before
// the q, k and v products, the bias added after them and the products' weights, or a
// weight's and a bias's gradients (one a product, the other a sum beside it).
constexpr int64_t kMaxStepSpan = 1;

// Products and attention: more arithmetic than bytes moved.
bool compute_bound(const Instr& i) {
  ops::Cost c = ops::cost_of(i);
  return c.flops > c.bytes_read + c.bytes_written;
}

// Recomputation for the backward pass (RematPass's "*.remat", RegatherPass's "*.regather"),
// which the memory scheduler runs lazily, right before its first reader: at the depth of the
// forward values it recomputes, but at a different time.
bool recomputation(const Instr& i) { return is_recomputation_name(i.meta().name); }

// The candidate's full value: what arrives for a gather, what is summed for a scatter.
int64_t full_bytes(const Instr& i) {
  return i.opcode() == Opcode::kAllGather ? i.shape().byte_size() : i.operand(0)->shape().byte_size();
}

}  // namespace

Result<CombineLimits> combine_limits_from_env() {
  CombineLimits limits;
  KILN_ASSIGN_OR_RETURN(limits.candidate_bytes, kib_from_env("KILN_COMBINE_THRESHOLD_KB", limits.candidate_bytes));
  KILN_ASSIGN_OR_RETURN(limits.combined_bytes, kib_from_env("KILN_COMBINE_LIMIT_KB", limits.combined_bytes));
  return limits;
}

std::vector<std::vector<Instr*>> combinable_groups(const ir::Computation& comp, Opcode kind,
                                                   const CombineLimits& limits) {
  std::vector<std::vector<Instr*>> bins;
  if (limits.candidate_bytes <= 0) return bins;
  // Most programs (one device, or a kind the mesh never needs) have fewer than two
  // candidates: skip the depth analysis then.
  int64_t small = 0;
  for (const auto& i : comp.instructions()) {
    small += i->opcode() == kind && !i->shape().is_tuple() && full_bytes(*i) <= limits.candidate_bytes;
  }
  if (small < 2) return bins;
  std::vector<Instr*> order = comp.post_order();
  // Per value: collectives of `kind` on the longest path reaching it (itself included), and
  // compute-bound instructions on the longest path reaching it.
  std::unordered_map<const Instr*, int64_t> level, depth;
  level.reserve(order.size());
  depth.reserve(order.size());
  for (const Instr* i : order) {
    int64_t l = 0, d = 0;
    for (const Instr* o : i->operands()) {
      l = std::max(l, level[o]);
      d = std::max(d, depth[o]);
    }
    level[i] = l + (i->opcode() == kind ? 1 : 0);
    depth[i] = d + (compute_bound(*i) ? 1 : 0);
  }
  // When a value is first needed: the step its earliest reader starts at (the deepest of that
  // reader's operands). When a value is ready: its own depth.
  auto starts_at = [&](const Instr* reader) {
    int64_t d = 0;
    for (const Instr* o : reader->operands()) d = std::max(d, depth.at(o));
    return d;
  };
  auto step_of = [&](const Instr* c) {
    if (kind != Opcode::kAllGather) return depth.at(c->operand(0));
    int64_t s = std::numeric_limits<int64_t>::max();
    for (const Instr* u : c->users()) s = std::min(s, starts_at(u));
    return s;
  };

  // (recomputation, level, dtype, group) -> (step, program position, candidate); classes in
  // order of first member.
  using Key = std::tuple<bool, int64_t, std::string, std::string>;
  struct Candidate {
    int64_t step, position;
    Instr* instr;
  };
  std::map<Key, std::vector<Candidate>> classes;
  std::vector<std::pair<int64_t, std::vector<Instr*>>> placed;  // (first member's position, bin)
  std::vector<Key> first_seen;
  for (size_t p = 0; p < order.size(); ++p) {
    Instr* i = order[p];
    if (i->opcode() != kind || i->shape().is_tuple() || i->users().empty() || i == comp.root()) continue;
    if (full_bytes(*i) > limits.candidate_bytes) continue;
    Key key{recomputation(*i), level.at(i), std::string(ir::dtype_name(i->shape().dtype())),
            fmt::format("{}/{}", i->attrs().get_string("mesh_axes"), i->attrs().get_int("group_size"))};
    auto [it, inserted] = classes.try_emplace(key);
    if (inserted) first_seen.push_back(key);
    it->second.push_back({step_of(i), static_cast<int64_t>(p), i});
  }
  for (const Key& key : first_seen) {
    std::vector<Candidate>& cands = classes.at(key);
    std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.step < b.step; });
    std::vector<Candidate> bin;
    int64_t bytes = 0;
    auto close = [&] {
      if (bin.size() >= 2) {
        std::sort(bin.begin(), bin.end(), [](const Candidate& a, const Candidate& b) { return a.position < b.position; });
        std::vector<Instr*> members;
        for (const Candidate& c : bin) members.push_back(c.instr);
        placed.emplace_back(bin.front().position, std::move(members));
      }
      bin.clear();
      bytes = 0;
    };
    for (const Candidate& c : cands) {
      const int64_t b = full_bytes(*c.instr);
      if (!bin.empty() && (c.step - bin.front().step > kMaxStepSpan || bytes + b > limits.combined_bytes)) close();
      bin.push_back(c);
      bytes += b;
    }
    close();
  }
  // Bins in program order of their first member.
  std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [position, members] : placed) bins.push_back(std::move(members));
  return bins;
}

AroundDim around_dim(const std::vector<int64_t>& dims, int64_t dim) {
  AroundDim a;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < dim) a.outer *= dims[i];
    else if (i == dim) a.n = dims[i];
    else a.inner *= dims[i];
  }
  return a;
}

std::string combined_name(const std::vector<Instr*>& members) { return members.front()->meta().name; }

}  // namespace kiln::passes
