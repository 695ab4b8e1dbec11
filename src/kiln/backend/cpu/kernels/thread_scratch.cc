#include "kiln/backend/cpu/kernels/thread_scratch.h"

#include <array>
#include <cstdlib>
#include <memory>

#include "kiln/backend/buffer.h"

namespace kiln::backend::cpu {
namespace {

struct FreeBlock {
  void operator()(std::byte* p) const { std::free(p); }
};

struct Kept {
  std::unique_ptr<std::byte, FreeBlock> block;
  size_t bytes = 0;
};

}  // namespace

void* thread_scratch_bytes(ScratchSlot slot, size_t bytes) {
  thread_local std::array<Kept, static_cast<size_t>(ScratchSlot::kCount)> kept;
  Kept& k = kept[static_cast<size_t>(slot)];
  if (!k.block || k.bytes < bytes) {
    k.block.reset();  // the old block first: never both at once
    k.block.reset(allocate_aligned(static_cast<int64_t>(bytes)));
    k.bytes = bytes;
  }
  return k.block.get();
}

}  // namespace kiln::backend::cpu
