// The collective interface an SPMD device program calls: all-gather, reduce-scatter,
// all-reduce, (ragged) all-to-all and barrier over a group of global device ids. The op
// registry owns it (the collective ops' reference evaluation and the backends' kernels call
// it through the thread's DeviceContext, ops/device_context.h); the runtime implements it
// twice: runtime::LocalWorld (virtual devices as threads of one process, shared memory) and
// runtime::MpiWorld (one MPI rank per process, several virtual devices each). The same
// per-device program runs on both, and both give bitwise-identical results.
//
// Contract (SPMD): every member of a group calls the same collective, with the same group and
// sizes, in the same order relative to its other collectives on groups that share members.
// Buffers passed to a start call must stay valid (and `in` unchanged) until its wait().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::ops {

// A collective's participants: global device ids in rank order (the position in the vector
// is the rank whose chunk is which). Every member calls the same collective with the same group.
using Group = std::vector<int64_t>;

// Element types that can be summed. bf16 is stored as uint16_t and accumulated in f32; s32
// wraps around on overflow (two's complement), like XLA.
enum class ReduceDType { kF32, kF64, kBF16, kS32 };
size_t reduce_dtype_size(ReduceDType dtype);
const char* reduce_dtype_name(ReduceDType dtype);  // "f32", "f64", "bf16", "s32"

// "[0,1,2,3]" for messages.
std::string group_to_string(const Group& group);

// An in-flight collective (async start/done pairs).
class Pending {
 public:
  virtual ~Pending() = default;
  // Completes this device's part. Error (not a hang) on timeout, on a dead peer, or when a
  // member called a different collective; waiting twice is ok (the second returns at once).
  virtual Status wait() = 0;
};

// One object per device; thread-compatible, not shared: only that device's thread calls it.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int64_t device() const = 0;  // global device id
  virtual int64_t num_devices() const = 0;

  // out = concat over group ranks of every member's `in` (bytes each, same size on all).
  virtual std::unique_ptr<Pending> all_gather(const Group& group, const void* in, size_t bytes,
                                              void* out) = 0;
  // in holds group.size() equal chunks of `count` elements; out (count elements) = sum over
  // members of their chunk number my_rank. Sums in rank order so every device's result is
  // bitwise identical whatever the timing; bf16 accumulates in f32, rounds once.
  virtual std::unique_ptr<Pending> reduce_scatter(const Group& group, const void* in, void* out,
                                                  size_t count, ReduceDType dtype) = 0;
  // The same two along an inner dimension, without a packed copy: `in` and `out` are `outer`
  // equal blocks. all_gather_blocked: in = [outer][b] (b = bytes / outer), out =
  // [outer][rank][b]. reduce_scatter_blocked: in = [outer][rank][c] (c = count / outer
  // elements), out = [outer][c] = the sum over members of their block column my_rank. outer
  // must divide bytes (count). The default packs into staging and calls the contiguous form
  // (ops/collectives.cc); a world that can copy strided parts directly overrides them.
  virtual std::unique_ptr<Pending> all_gather_blocked(const Group& group, const void* in,
                                                      size_t bytes, void* out, size_t outer);
  virtual std::unique_ptr<Pending> reduce_scatter_blocked(const Group& group, const void* in,
                                                          void* out, size_t count,
                                                          ReduceDType dtype, size_t outer);
  // out (count elements) = sum over members of `in`, in rank order; in == out is allowed.
  virtual std::unique_ptr<Pending> all_reduce(const Group& group, const void* in, void* out,
                                              size_t count, ReduceDType dtype) = 0;
  // in holds group.size() equal chunks of `chunk_bytes`; chunk j goes to rank j; out chunk i
  // came from rank i.
  virtual std::unique_ptr<Pending> all_to_all(const Group& group, const void* in, void* out,
                                              size_t chunk_bytes) = 0;
  // Ragged: send_bytes[j] bytes at in + send_offsets[j] go to rank j; recv_offsets[i] says
  // where rank i's data lands in out (sizes are learned from the senders and written to
  // (*recv_bytes)[i]; out has room for the worst case). The vectors are copied at the call;
  // *recv_bytes must stay valid until wait().
  virtual std::unique_ptr<Pending> ragged_all_to_all(const Group& group, const void* in,
                                                     const std::vector<size_t>& send_offsets,
                                                     const std::vector<size_t>& send_bytes,
                                                     void* out,
                                                     const std::vector<size_t>& recv_offsets,
                                                     std::vector<size_t>* recv_bytes) = 0;
  // Returns when every member has called barrier(group) (or an error at the deadline).
  virtual Status barrier(const Group& group) = 0;

  // Seconds this device has spent blocked in wait() and barrier() so far: the exposed
  // collective time, what overlap with compute did not hide (per-step metrics read it).
  virtual double wait_seconds() const = 0;
  // Advances this device's started collectives without blocking: copies whose peers have
  // arrived, reads of this device's buffers that peers wait for, MPI_Test. There is no
  // progress thread; a caller running long compute between a start and its wait (the
  // backend, between kernels) calls this so its peers are not kept waiting for it. Errors
  // surface at wait().
  virtual void progress() {}
};

}  // namespace kiln::ops
