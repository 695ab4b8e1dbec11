// Scratch memory a kernel keeps on its thread from one call to the next.
//
// Why: the kiln process maps every block of 1 MiB or more on its own (apps/malloc_settings.cc),
// so a kernel that allocates its scratch per call maps fresh pages every call and faults each
// 4 KiB of them in again; on fsdp the device threads of one process do this at the same time,
// and their faults serialize on the process's memory map. Kept per thread, the scratch is
// mapped once. The device threads live as long as the step runner (runtime::DeviceThreads),
// so it is kept across steps.
//
// What is kept: per slot, the largest block asked for on this thread, never shrunk. The memory
// plan counts the largest one kernel's scratch_bytes on top of the whole arena
// (planned_peak_bytes); the slots together can keep more than that one kernel's, by the
// blocks of the slots it does not use (the forward attention's packed v beside the gradient's
// packs and sums, the bf16 GEMM's sums). Measured, the peak stayed within the 10% headroom
// (docs/sharding.md, the memory runs). The contents are not initialised: the caller writes
// what it reads.
#pragma once

#include <cstddef>
#include <type_traits>

namespace kiln::backend::cpu {

// One slot per block a kernel holds at the same time; kernels that never run inside one
// another may share slots.
enum class ScratchSlot : int { kPack0, kPack1, kPack2, kPack3, kAccumulate0, kAccumulate1, kMatmulSums, kCount };

// 64-byte aligned storage for at least `bytes` bytes in this thread's `slot`, valid until the
// next call for the same slot on this thread.
void* thread_scratch_bytes(ScratchSlot slot, size_t bytes);

template <typename T>
T* thread_scratch(ScratchSlot slot, size_t count) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
  return static_cast<T*>(thread_scratch_bytes(slot, count * sizeof(T)));
}

}  // namespace kiln::backend::cpu
