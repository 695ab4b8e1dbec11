// Native kernel of ragged_all_to_all (ops/ragged_all_to_all_op.cc) on buffers of any dtype:
// rows move as bytes, straight from the operand into the runtime's ragged all-to-all and
// into the result, which is zeroed first (the slots' unused rows and the rows no block
// covers). The exchange plan is the reference evaluation's (ops/ragged_all_to_all.h).
//   dispatch  x [E, rows, F..], sizes s32[E, G] -> [E, G*slot, F..]
//   return    x [E, G*slot, F..], sizes s32[E, G] -> [E, rows, F..]
// Without mesh_axes (a global program) the groups are consecutive entries and the rows are
// copied locally; with mesh_axes, entry l of every member of the device's group exchanges
// with entry l of the others (the return first learns its block sizes from the receivers).
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/kernel.h"
#include "kiln/base/check.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/ragged_all_to_all.h"
#include "kiln/runtime/collectives.h"

namespace kiln::backend::cpu {
namespace {

using ir::Instr;

Kernel ragged_all_to_all_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    const int32_t* sizes = (*in[1])[0].as<int32_t>();
    Buffer& y = out[0];
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
          const size_t a = (p * rows + plan.offset[d]) * row_bytes;              // in the [.., rows, ..] side
          const size_t b = ((q * g + d) * g * slot + s * slot) * row_bytes;       // in the slotted side
          const size_t n = plan.count[d] * row_bytes;
          if (reverse) std::memcpy(to + a, from + b, n);
          else std::memcpy(to + b, from + a, n);
        }
      }
      return;
    }
    runtime::Collectives& c = *ops::current_device().collectives;
    for (int64_t l = 0; l < entries; ++l) {
      ops::RaggedPlan plan = ops::ragged_plan(sizes + l * g, g, rows, slot);
      std::vector<size_t> send_off(g), send_bytes(g), recv_off(g), recv_bytes(g);
      if (!reverse) {
        for (int64_t j = 0; j < g; ++j) {
          send_off[j] = plan.offset[j] * row_bytes;
          send_bytes[j] = plan.count[j] * row_bytes;
          recv_off[j] = j * slot * row_bytes;
        }
      } else {
        // The rows each member sent me go back to it: learn how many first.
        std::vector<int64_t> mine(plan.count), theirs(g);
        ops::wait_for(c.all_to_all(group.members, mine.data(), theirs.data(), sizeof(int64_t)), instr);
        for (int64_t j = 0; j < g; ++j) {
          send_off[j] = j * slot * row_bytes;
          send_bytes[j] = theirs[j] * row_bytes;
          recv_off[j] = plan.offset[j] * row_bytes;
        }
      }
      ops::wait_for(c.ragged_all_to_all(group.members, from + l * in_rows * row_bytes, send_off, send_bytes,
                                        to + l * out_rows * row_bytes, recv_off, &recv_bytes),
                    instr);
    }
  };
}

}  // namespace

std::vector<NativeKernelEntry> ragged_all_to_all_kernels() {
  return {{ir::Opcode::kRaggedAllToAll, [](const Instr&) { return true; }, ragged_all_to_all_kernel}};
}

}  // namespace kiln::backend::cpu
