// Native kernels of the SPMD collectives (ops/collective_ops.cc) on buffers: the data goes
// straight from the operand to the runtime's collective (ops/collectives.h, which the runtime implements) and back,
// in its own dtype, without the reference evaluation's detour through doubles. The group
// comes from the thread's device context at run time (the same executable serves every
// virtual device). Chunks along a dimension other than the outermost go to the runtime's
// blocked forms ([outer] blocks per part): virtual devices copy them straight into place,
// MPI packs them into staging.
//   all_gather     x [.., n, ..]   -> [.., n*g, ..]
//   reduce_scatter x [.., n*g, ..] -> [.., n, ..]
//   all_reduce     x               -> x
//   shard_slice    x [.., n*g, ..] -> [.., n, ..]  (a local copy)
//
// Each collective is issued (the runtime call, which posts this device's part) and then
// finished (the wait). The synchronous kernel does both; the async pair
// (ops/async_collective_ops.cc) splits them: the start issues into its own result buffer and
// keeps the runtime's Pending in a slot of this thread, keyed by the start
// instruction; the done finishes it and returns the start's buffer as its value (a view).
// A run's start and done execute on the same device thread (one executable per device, one
// run at a time), so a thread-local table is the per-executable, per-run state.
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/collectives/collective_progress.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/base/check.h"
#include "kiln/ops/collectives.h"
#include "kiln/ops/device_context.h"

namespace kiln::backend::cpu {
namespace {

using ir::DType;
using ir::Instr;

struct Layout {
  int64_t outer = 1, n = 1, inner_bytes = 1;  // around the split dimension, n = its size
};

Layout layout_of(const ir::Shape& shape, int64_t dim) {
  Layout l;
  l.inner_bytes = ir::dtype_size(shape.dtype());
  for (int64_t i = 0; i < shape.rank(); ++i) {
    if (i < dim) l.outer *= shape.dim(static_cast<int>(i));
    else if (i == dim) l.n = shape.dim(static_cast<int>(i));
    else l.inner_bytes *= shape.dim(static_cast<int>(i));
  }
  return l;
}

ops::ReduceDType reduce_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ops::ReduceDType::kF32;
    case DType::kBF16: return ops::ReduceDType::kBF16;
    case DType::kS32: return ops::ReduceDType::kS32;
    default: return ops::ReduceDType::kF64;
  }
}

bool summable(const Instr& instr) {
  DType t = instr.shape().dtype();
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kS32 || t == DType::kF64;
}

// A collective between its issue and its finish: the runtime's handle, or null when there
// is nothing to wait for (a one-device group, copied at once).
using InFlight = std::unique_ptr<ops::Pending>;

// all_gather: x [outer, n, inner] parts land as y [outer, rank * n, inner].
InFlight issue_all_gather(const Instr& instr, const Buffer& x, void* y) {
  ops::CollectiveGroup g = ops::collective_group(instr);
  const int64_t size = static_cast<int64_t>(g.members.size());
  if (size == 1) {
    std::memcpy(y, x.data(), x.byte_size());
    return nullptr;
  }
  const Layout l = layout_of(x.shape(), instr.attrs().get_int("dim"));
  return ops::current_device().collectives->all_gather_blocked(g.members, x.data(), x.byte_size(), y,
                                                                static_cast<size_t>(l.outer));
}

// reduce_scatter: x [outer, rank * n, inner] -> y [outer, n, inner], the sum of column my_rank.
InFlight issue_reduce_scatter(const Instr& instr, const Buffer& x, Buffer& y) {
  ops::CollectiveGroup g = ops::collective_group(instr);
  const int64_t size = static_cast<int64_t>(g.members.size());
  if (size == 1) {
    std::memcpy(y.data(), x.data(), x.byte_size());
    return nullptr;
  }
  const Layout l = layout_of(x.shape(), instr.attrs().get_int("dim"));
  return ops::current_device().collectives->reduce_scatter_blocked(
      g.members, x.data(), y.data(), y.num_elements(), reduce_dtype(x.shape().dtype()),
      static_cast<size_t>(l.outer));
}

InFlight issue_all_reduce(const Instr& instr, const Buffer& x, Buffer& y) {
  ops::CollectiveGroup g = ops::collective_group(instr);
  if (g.members.size() == 1) {
    std::memcpy(y.data(), x.data(), x.byte_size());
    return nullptr;
  }
  return ops::current_device().collectives->all_reduce(g.members, x.data(), y.data(), x.num_elements(),
                                                        reduce_dtype(x.shape().dtype()));
}

void finish_wait(const Instr& instr, InFlight& f) {
  if (f) ops::wait_for(std::move(f), instr);
}

Kernel all_gather_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    InFlight f = issue_all_gather(instr, (*in[0])[0], out[0].data());
    finish_wait(instr, f);
  };
}

Kernel reduce_scatter_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    InFlight f = issue_reduce_scatter(instr, (*in[0])[0], out[0]);
    finish_wait(instr, f);
  };
}

Kernel all_reduce_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    InFlight f = issue_all_reduce(instr, (*in[0])[0], out[0]);
    finish_wait(instr, f);
  };
}

// The collectives this device thread has started and not finished, by start instruction.
std::unordered_map<const Instr*, InFlight>& in_flight() {
  thread_local std::unordered_map<const Instr*, InFlight> table;
  return table;
}

Kernel start_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    InFlight f;
    switch (instr.opcode()) {
      case ir::Opcode::kAllGatherStart: f = issue_all_gather(instr, x, out[0].data()); break;
      case ir::Opcode::kReduceScatterStart: f = issue_reduce_scatter(instr, x, out[0]); break;
      default: f = issue_all_reduce(instr, x, out[0]); break;
    }
    if (f) in_flight()[&instr] = std::move(f);  // else: a one-device group, already copied
  };
}

// Finishes the start's collective; the value is the start's buffer. A start that ran the
// reference evaluation (a dtype the native kernels do not sum) left nothing in flight.
Kernel done_kernel(const Instr& instr) {
  const Instr* start = instr.operand(0);
  return [start](std::span<const Value* const> in, Value& out) {
    out[0] = (*in[0])[0];  // the start's buffer, which the wait may still fill (MPI unpacks)
    auto& table = in_flight();
    auto it = table.find(start);
    if (it == table.end()) return;
    finish_wait(*start, it->second);
    table.erase(it);
  };
}

Kernel shard_slice_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    Buffer& y = out[0];
    ops::CollectiveGroup g = ops::collective_group(instr);
    const int64_t size = instr.attrs().get_int("group_size");
    const Layout l = layout_of(x.shape(), instr.attrs().get_int("dim"));
    const int64_t chunk = l.n / size * l.inner_bytes;
    const auto* from = static_cast<const std::byte*>(x.data());
    auto* to = static_cast<std::byte*>(y.data());
    for (int64_t o = 0; o < l.outer; ++o) std::memcpy(to + o * chunk, from + o * l.n * l.inner_bytes + g.rank * chunk, chunk);
  };
}

}  // namespace

void progress_collectives() {
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_COLLECTIVE_PROGRESS");
    return env == nullptr || std::string(env) != "0";
  }();
  if (enabled && (!in_flight().empty() || ragged_collectives_in_flight())) ops::current_device().collectives->progress();
}

std::vector<NativeKernelEntry> collective_kernels() {
  auto any = [](const Instr&) { return true; };
  return {
      {ir::Opcode::kAllGather, any, all_gather_kernel},
      {ir::Opcode::kReduceScatter, summable, reduce_scatter_kernel},
      {ir::Opcode::kAllReduce, summable, all_reduce_kernel},
      {ir::Opcode::kShardSlice, any, shard_slice_kernel},
      {ir::Opcode::kAllGatherStart, any, start_kernel},
      {ir::Opcode::kReduceScatterStart, summable, start_kernel},
      {ir::Opcode::kAllReduceStart, summable, start_kernel},
      {ir::Opcode::kAllGatherDone, any, done_kernel},
      {ir::Opcode::kReduceScatterDone, any, done_kernel},
      {ir::Opcode::kAllReduceDone, any, done_kernel},
  };
}

}  // namespace kiln::backend::cpu
