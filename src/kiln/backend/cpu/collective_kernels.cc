// Native kernels of the SPMD collectives (ops/collective_ops.cc) on buffers: the data goes
// straight from the operand to the runtime's collective (runtime/collectives.h) and back,
// in its own dtype, without the reference evaluation's detour through doubles. The group
// comes from the thread's device context at run time (the same executable serves every
// virtual device). Chunks along a dimension other than the outermost are packed into a
// contiguous staging buffer first.
//   all_gather     x [.., n, ..]   -> [.., n*g, ..]
//   reduce_scatter x [.., n*g, ..] -> [.., n, ..]
//   all_reduce     x               -> x
//   shard_slice    x [.., n*g, ..] -> [.., n, ..]  (a local copy)
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/kernel.h"
#include "kiln/base/check.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/collectives.h"

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

runtime::ReduceDType reduce_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return runtime::ReduceDType::kF32;
    case DType::kBF16: return runtime::ReduceDType::kBF16;
    case DType::kS32: return runtime::ReduceDType::kS32;
    default: return runtime::ReduceDType::kF64;
  }
}

bool summable(const Instr& instr) {
  DType t = instr.shape().dtype();
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kS32 || t == DType::kF64;
}

// Copies chunk r (of g along the split dimension) of `from` for every r, rank-major: the
// layout collectives use ([rank][outer, n/g, inner]).
void pack(const std::byte* from, std::byte* to, const Layout& l, int64_t g) {
  const int64_t chunk = l.n / g * l.inner_bytes;
  for (int64_t r = 0; r < g; ++r) {
    for (int64_t o = 0; o < l.outer; ++o) {
      std::memcpy(to, from + (o * l.n * l.inner_bytes) + r * chunk, chunk);
      to += chunk;
    }
  }
}

Kernel all_gather_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    Buffer& y = out[0];
    ops::CollectiveGroup g = ops::collective_group(instr);
    const int64_t size = static_cast<int64_t>(g.members.size());
    const Layout l = layout_of(x.shape(), instr.attrs().get_int("dim"));
    if (size == 1) {
      std::memcpy(y.data(), x.data(), x.byte_size());
      return;
    }
    const ops::DeviceContext& ctx = ops::current_device();
    if (l.outer == 1) {  // rank-major is already the result's layout
      ops::wait_for(ctx.collectives->all_gather(g.members, x.data(), x.byte_size(), y.data()), instr);
      return;
    }
    std::vector<std::byte> staged(x.byte_size() * size);
    ops::wait_for(ctx.collectives->all_gather(g.members, x.data(), x.byte_size(), staged.data()), instr);
    // staged [rank][outer, n, inner] -> y [outer, rank * n, inner]
    const int64_t block = l.n * l.inner_bytes;
    auto* dst = static_cast<std::byte*>(y.data());
    for (int64_t r = 0; r < size; ++r) {
      for (int64_t o = 0; o < l.outer; ++o) {
        std::memcpy(dst + (o * size + r) * block, staged.data() + r * x.byte_size() + o * block, block);
      }
    }
  };
}

Kernel reduce_scatter_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    Buffer& y = out[0];
    ops::CollectiveGroup g = ops::collective_group(instr);
    const int64_t size = static_cast<int64_t>(g.members.size());
    if (size == 1) {
      std::memcpy(y.data(), x.data(), x.byte_size());
      return;
    }
    const Layout l = layout_of(x.shape(), instr.attrs().get_int("dim"));
    const void* source = x.data();
    std::vector<std::byte> staged;
    if (l.outer > 1) {
      staged.resize(x.byte_size());
      pack(static_cast<const std::byte*>(x.data()), staged.data(), l, size);
      source = staged.data();
    }
    ops::wait_for(ops::current_device().collectives->reduce_scatter(g.members, source, y.data(), y.num_elements(),
                                                                    reduce_dtype(x.shape().dtype())),
                instr);
  };
}

Kernel all_reduce_kernel(const Instr& instr) {
  return [&instr](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    Buffer& y = out[0];
    ops::CollectiveGroup g = ops::collective_group(instr);
    if (g.members.size() == 1) {
      std::memcpy(y.data(), x.data(), x.byte_size());
      return;
    }
    ops::wait_for(ops::current_device().collectives->all_reduce(g.members, x.data(), y.data(), x.num_elements(),
                                                                reduce_dtype(x.shape().dtype())),
                instr);
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

std::vector<NativeKernelEntry> collective_kernels() {
  auto any = [](const Instr&) { return true; };
  return {
      {ir::Opcode::kAllGather, any, all_gather_kernel},
      {ir::Opcode::kReduceScatter, summable, reduce_scatter_kernel},
      {ir::Opcode::kAllReduce, summable, all_reduce_kernel},
      {ir::Opcode::kShardSlice, any, shard_slice_kernel},
  };
}

}  // namespace kiln::backend::cpu
