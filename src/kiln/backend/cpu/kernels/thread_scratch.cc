#include "kiln/backend/cpu/kernels/thread_scratch.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <new>

namespace kiln::backend::cpu {
namespace {

struct FreeBlock {
  void operator()(void* p) const { std::free(p); }
};

struct Kept {
  std::unique_ptr<void, FreeBlock> block;
  size_t bytes = 0;
};

}  // namespace

void* thread_scratch_bytes(ScratchSlot slot, size_t bytes) {
  thread_local std::array<Kept, static_cast<size_t>(ScratchSlot::kCount)> kept;
  Kept& k = kept[static_cast<size_t>(slot)];
  if (k.bytes < bytes || !k.block) {
    constexpr size_t kAlign = 64;
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    k.block.reset();  // the old block first: never both at once
    k.bytes = 0;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) throw std::bad_alloc();
    k.block.reset(p);
    k.bytes = rounded;
  }
  return k.block.get();
}

}  // namespace kiln::backend::cpu
