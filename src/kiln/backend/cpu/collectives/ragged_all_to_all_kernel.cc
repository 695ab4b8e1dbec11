// Native kernels of ragged_all_to_all (ops/ragged_all_to_all_op.cc) and of its async pair
// (ops/async_collective_ops.cc) on buffers of any dtype: rows move as bytes, straight from
// the operand into the runtime's ragged all-to-all and into the result, which is zeroed
// first (the slots' unused rows and the rows no block covers). The exchange plan is the
// reference evaluation's (ops/ragged_all_to_all.h).
//   dispatch  x [E, rows, F..], sizes s32[E, G] -> [E, G*slot, F..]
//   return    x [E, G*slot, F..], sizes s32[E, G] -> [E, rows, F..]
// Without mesh_axes (a global program) the groups are consecutive entries and the rows are
// copied locally; with mesh_axes, entry l of every member of the device's group exchanges
// with entry l of the others (the return first learns its block sizes from the receivers).
//
// Each exchange is issued (posted to the runtime) and then finished (waited for). The
// synchronous kernel does both; ragged_all_to_all_start issues into its result buffer and
// keeps the handles in a table of this device thread keyed by the start, and
// ragged_all_to_all_done finishes them and returns the start's buffer (a view), as the other
// async collectives do (collective_kernels.cc).
//
// What the start can post without blocking. A dispatch needs nothing from its peers (the
// runtime learns the receive sizes from the senders): every entry's exchange is posted and
// the start returns. A return sends back what each member sent it. The dispatch that
// brought those rows learned the counts when it finished: a return whose operand is
// computed from such a dispatch (same sizes operand, group and cut; found in the IR when
// the kernel is made, so every device decides alike and the dispatch has always finished
// earlier in the same run) reads them from this thread's table and posts its rows at once.
// Any other return posts every entry's count exchange (one int64 per pair), waits for them
// (all members must have reached the start) and then posts the rows. The rows cannot be
// posted later from a progress call: collectives must be posted in the same order on every
// member, and the moment a count exchange completes differs between devices.
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/collectives/collective_progress.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/base/check.h"
#include "kiln/base/logging.h"
#include "kiln/ops/collectives.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/ragged_all_to_all.h"

namespace kiln::backend::cpu {
namespace {

using ir::Instr;

// Exchanges posted and not yet waited for: one per entry, with the receive sizes the runtime
// writes until its wait.
struct RaggedInFlight {
  std::vector<std::unique_ptr<ops::Pending>> pending;
  std::vector<std::vector<size_t>> recv_bytes;
  size_t row_bytes = 0;
};

// Rows each member sent this device, per entry, by the dispatch (the sync op or the start)
// that received them in this thread's latest run.
using Counts = std::vector<std::vector<int64_t>>;
std::unordered_map<const Instr*, Counts>& learned_counts() {
  thread_local std::unordered_map<const Instr*, Counts> table;
  return table;
}

bool same_exchange(const Instr& a, const Instr& b) {
  for (const char* key : {"group_size", "rows", "slot"}) {
    if (a.attrs().get_int(key) != b.attrs().get_int(key)) return false;
  }
  return a.attrs().has("mesh_axes") && b.attrs().has("mesh_axes") &&
         a.attrs().get_string("mesh_axes") == b.attrs().get_string("mesh_axes") &&
         a.operand(0)->shape().dim(0) == b.operand(0)->shape().dim(0);
}

// The dispatch a return's rows were computed from, with the same sizes operand and cut: its
// received counts are the return's send counts. Searched breadth-first among the operand's
// producers (a few instructions up: the experts' products, the reordering), bounded so a
// return without one costs little; null when there is none.
const Instr* counts_source(const Instr& ret) {
  if (ret.attrs().get_int("reverse") == 0 || !ret.attrs().has("mesh_axes")) return nullptr;
  constexpr size_t kMaxVisited = 4096;
  std::vector<const Instr*> queue = {ret.operand(0)};
  std::unordered_map<const Instr*, bool> seen = {{ret.operand(0), true}};
  for (size_t i = 0; i < queue.size() && i < kMaxVisited; ++i) {
    const Instr* at = queue[i];
    const Instr* dispatch = at->opcode() == ir::Opcode::kRaggedAllToAll       ? at
                            : at->opcode() == ir::Opcode::kRaggedAllToAllDone ? at->operand(0)
                                                                              : nullptr;
    if (dispatch != nullptr && dispatch->attrs().get_int("reverse") == 0 && dispatch->operand(1) == ret.operand(1) &&
        same_exchange(*dispatch, ret)) {
      KILN_VLOG(2) << "ragged return %" << ret.id() << " sends back the counts %" << dispatch->id() << " received";
      return dispatch;
    }
    for (const Instr* o : at->operands()) {
      if (seen.emplace(o, true).second) queue.push_back(o);
    }
  }
  return nullptr;
}

// Zeroes y and posts the exchange of every entry (or copies locally without peers). A
// return with a `source` dispatch sends back the counts that dispatch received.
RaggedInFlight issue_ragged(const Instr& instr, const Buffer& x, const int32_t* sizes, Buffer& y,
                            const Instr* source) {
  RaggedInFlight f;
  const bool reverse = instr.attrs().get_int("reverse") != 0;
  const int64_t rows = instr.attrs().get_int("rows"), slot = instr.attrs().get_int("slot");
  const int64_t entries = x.shape().dim(0);
  size_t row_bytes = ir::dtype_size(x.shape().dtype());
  for (int d = 2; d < x.shape().rank(); ++d) row_bytes *= x.shape().dim(d);
  std::memset(y.data(), 0, y.byte_size());
  const auto* from = static_cast<const std::byte*>(x.data());
  auto* to = static_cast<std::byte*>(y.data());
  const bool global = !instr.attrs().has("mesh_axes");
  ops::CollectiveGroup group;
  if (!global) group = ops::collective_group(instr);
  const int64_t g = global ? instr.attrs().get_int("group_size") : static_cast<int64_t>(group.members.size());
  const int64_t in_rows = reverse ? g * slot : rows, out_rows = reverse ? rows : g * slot;
  if (global || g == 1) {
    for (int64_t p = 0; p < entries; ++p) {
      const int64_t q = p / g, s = p % g;
      ops::RaggedPlan plan = ops::ragged_plan(sizes + p * g, g, rows, slot);
      for (int64_t d = 0; d < g; ++d) {
        const size_t a = (p * rows + plan.offset[d]) * row_bytes;         // in the [.., rows, ..] side
        const size_t b = ((q * g + d) * g * slot + s * slot) * row_bytes;  // in the slotted side
        const size_t n = plan.count[d] * row_bytes;
        if (reverse) std::memcpy(to + a, from + b, n);
        else std::memcpy(to + b, from + a, n);
      }
    }
    return f;
  }
  ops::Collectives& c = *ops::current_device().collectives;
  std::vector<ops::RaggedPlan> plans;
  for (int64_t l = 0; l < entries; ++l) plans.push_back(ops::ragged_plan(sizes + l * g, g, rows, slot));
  // The return: the rows each member sent me go back to it; learn how many first, for every
  // entry at once (one meeting of the group instead of one per entry).
  std::vector<std::vector<int64_t>> mine(entries), theirs(entries, std::vector<int64_t>(g));
  auto known = source != nullptr ? learned_counts().find(source) : learned_counts().end();
  if (reverse && known != learned_counts().end()) {
    KILN_CHECK(static_cast<int64_t>(known->second.size()) == entries) << instr.to_string();
    theirs = known->second;
  } else if (reverse) {
    std::vector<std::unique_ptr<ops::Pending>> counts;
    for (int64_t l = 0; l < entries; ++l) {
      mine[l] = plans[l].count;
      counts.push_back(c.all_to_all(group.members, mine[l].data(), theirs[l].data(), sizeof(int64_t)));
    }
    for (auto& p : counts) ops::wait_for(std::move(p), instr);
  }
  f.row_bytes = row_bytes;
  f.recv_bytes.assign(entries, std::vector<size_t>(g));  // sized once: the runtime keeps pointers
  for (int64_t l = 0; l < entries; ++l) {
    std::vector<size_t> send_off(g), send_bytes(g), recv_off(g);
    for (int64_t j = 0; j < g; ++j) {
      if (!reverse) {
        send_off[j] = plans[l].offset[j] * row_bytes;
        send_bytes[j] = plans[l].count[j] * row_bytes;
        recv_off[j] = j * slot * row_bytes;
      } else {
        send_off[j] = j * slot * row_bytes;
        send_bytes[j] = theirs[l][j] * row_bytes;
        recv_off[j] = plans[l].offset[j] * row_bytes;
      }
    }
    f.pending.push_back(c.ragged_all_to_all(group.members, from + l * in_rows * row_bytes, send_off, send_bytes,
                                            to + l * out_rows * row_bytes, recv_off, &f.recv_bytes[l]));
  }
  return f;
}

// Waits; a dispatch keeps the counts it received for the returns that send them back.
void finish_ragged(const Instr& instr, RaggedInFlight& f) {
  for (auto& p : f.pending) ops::wait_for(std::move(p), instr);
  f.pending.clear();
  if (instr.attrs().get_int("reverse") != 0 || f.recv_bytes.empty() || f.row_bytes == 0) return;
  Counts& counts = learned_counts()[&instr];
  counts.assign(f.recv_bytes.size(), {});
  for (size_t l = 0; l < f.recv_bytes.size(); ++l) {
    for (size_t bytes : f.recv_bytes[l]) counts[l].push_back(static_cast<int64_t>(bytes / f.row_bytes));
  }
}

Kernel ragged_all_to_all_kernel(const Instr& instr) {
  const Instr* source = counts_source(instr);
  return [&instr, source](std::span<const Value* const> in, Value& out) {
    RaggedInFlight f = issue_ragged(instr, (*in[0])[0], (*in[1])[0].as<int32_t>(), out[0], source);
    finish_ragged(instr, f);
  };
}

// The exchanges this device thread has started and not finished, by start instruction.
std::unordered_map<const Instr*, RaggedInFlight>& ragged_in_flight() {
  thread_local std::unordered_map<const Instr*, RaggedInFlight> table;
  return table;
}

Kernel ragged_start_kernel(const Instr& instr) {
  const Instr* source = counts_source(instr);
  return [&instr, source](std::span<const Value* const> in, Value& out) {
    RaggedInFlight f = issue_ragged(instr, (*in[0])[0], (*in[1])[0].as<int32_t>(), out[0], source);
    if (!f.pending.empty()) ragged_in_flight()[&instr] = std::move(f);  // else: copied locally
  };
}

// Finishes the start's exchanges; the value is the start's buffer.
Kernel ragged_done_kernel(const Instr& instr) {
  const Instr* start = instr.operand(0);
  return [start](std::span<const Value* const> in, Value& out) {
    out[0] = (*in[0])[0];
    auto& table = ragged_in_flight();
    auto it = table.find(start);
    if (it == table.end()) return;
    finish_ragged(*start, it->second);
    table.erase(it);
  };
}

}  // namespace

bool ragged_collectives_in_flight() { return !ragged_in_flight().empty(); }

std::vector<NativeKernelEntry> ragged_all_to_all_kernels() {
  auto any = [](const Instr&) { return true; };
  return {{ir::Opcode::kRaggedAllToAll, any, ragged_all_to_all_kernel},
          {ir::Opcode::kRaggedAllToAllStart, any, ragged_start_kernel},
          {ir::Opcode::kRaggedAllToAllDone, any, ragged_done_kernel}};
}

}  // namespace kiln::backend::cpu
