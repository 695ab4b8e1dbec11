// Checks of every collective that run on any World: tests/runtime runs them on LocalWorld
// (threads) and, under mpirun, on MpiWorld. Each check runs on one device's thread, builds
// its inputs from (device id, seed) so every device can recompute what the others sent, and
// returns an error Status describing the first wrong element.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime::testing {

// The groups of a mesh of `num_devices` devices laid out as [outer, inner] (device id =
// outer_index * inner + inner_index): groups along the inner axis (e.g. fsdp) and along the
// outer axis (e.g. data). The group containing `device` in each.
Group inner_group(int64_t device, int64_t inner);
Group outer_group(int64_t device, int64_t num_devices, int64_t inner);

// Each check: every member of `group` calls it on its own device thread.
Status check_all_gather(Collectives& c, const Group& group, size_t bytes, uint64_t seed);
Status check_reduce_scatter(Collectives& c, const Group& group, size_t count, ReduceDType dtype,
                            uint64_t seed);
// The blocked forms along an inner dimension (`outer` blocks per part).
Status check_all_gather_blocked(Collectives& c, const Group& group, size_t bytes, size_t outer,
                                uint64_t seed);
Status check_reduce_scatter_blocked(Collectives& c, const Group& group, size_t count, size_t outer,
                                    ReduceDType dtype, uint64_t seed);
Status check_all_reduce(Collectives& c, const Group& group, size_t count, ReduceDType dtype,
                        uint64_t seed, bool in_place);
Status check_all_to_all(Collectives& c, const Group& group, size_t chunk_bytes, uint64_t seed);
Status check_ragged_all_to_all(Collectives& c, const Group& group, uint64_t seed);
// Starts an all_gather on `a` and an all_reduce on `b` (both containing this device), then
// waits for them in reverse order.
Status check_async_reverse_wait(Collectives& c, const Group& a, const Group& b, uint64_t seed);
// Every check above in turn, over the inner and outer groups of an [num/inner, inner] mesh
// and over all devices, for f32, bf16, s32 and f64.
Status check_everything(Collectives& c, int64_t inner);

// all_reduce of (device, seed)-derived data; the result's bits, for comparing devices or
// worlds (every device must get the same bits; so must LocalWorld and MpiWorld).
Result<std::vector<uint8_t>> all_reduce_bits(Collectives& c, const Group& group, size_t count,
                                             ReduceDType dtype, uint64_t seed);

}  // namespace kiln::runtime::testing
