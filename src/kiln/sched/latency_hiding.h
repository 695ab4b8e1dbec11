// Latency hiding for asynchronous collectives (ops/async_collective_ops.cc), run on a
// finished schedule (the memory scheduler's choice), as XLA's latency-hiding scheduler runs
// its start/done pairs apart: each done moves as late as its first reader allows and each
// start as early as its operand allows, so the compute between them runs while the data
// moves: the all-gather of layer i+1's weights starts while layer i computes, and a
// layer's gradient reduce-scatter completes while earlier layers' backward runs. A ragged
// all-to-all's start waits for all its operands (the rows and their counts); its window
// charges its worst-case receive buffer.
//
// Memory limit. Moving a start early makes its result buffer live sooner, and moving a done
// late keeps its operand (for a reduce-scatter, the whole unreduced gradient) alive longer.
// A pair whose window spans instructions charges (result + operand bytes) at each of them
// on one of two channels: all-gathers (weights fetched ahead of their layer) and the rest
// (gradient reduce-scatters completing behind the backward pass, all-reduces, token
// exchanges). Each channel's charges at any instruction stay within `limit_bytes`; pairs are
// placed in the order of their dones, each taking the longest window that fits (a pair that
// fits nowhere keeps the synchronous placement: start right before done). The default limit
// is the window of the largest weight of a layer (layers named "layers.N.", the model's
// names, found on the gathered weight): one weight is fetched while the weights before it
// compute, as FSDP prefetches one unit ahead, and a larger window (an embedding's gather)
// stays synchronous. A whole layer ahead held a layer's weights twice at once at the
// backward's peak: 6 GiB more for gpt-oss-120b on fsdp 64 (three 2 GiB expert weights).
// Without layer names, the largest weight's window; without weight gathers (activations
// gathered by the partitioner may be far larger than any weight), twice the largest window.
// The other channel's
// default also fits its own largest window, one at a time (a token exchange's worst-case
// receive buffer, which is alive anyway as its result).
//
// Everything else keeps its order, so the memory scheduler's decisions stand, except that a
// reduce-scatter's or all-reduce's sole reader that the memory scheduler ran right after the
// done (a gradient's transpose, its squared-norm fusion) is delayed to right before its own
// first reader when that keeps live bytes as they were, so the done can move later too; a
// done read by one slice per member (a combined collective, passes/combiner_groups.h) has
// all its slices delayed likewise, or none, keeping the combined buffer until the last one.
// Reshapes of parameters count as parameters (a combined all-gather's concatenation of
// weights moves up with its start).
// Dones never move past the writer of a donated output that takes their operand's storage.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/sched/logical_buffers.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::sched {

// The done opcodes of the async collectives, and a done's start (its operand 0).
bool is_async_done(const ir::Instr& instr);
bool is_async_start(const ir::Instr& instr);

struct LatencyHidingOptions {
  int64_t limit_bytes = -1;  // < 0: the default above; 0: keep every pair synchronous
  ScheduleOptions schedule;  // the donations
  // Delay the reader the memory scheduler ran right after a reduce-scatter's or all-reduce's
  // done (a gradient's transpose or squared-norm fusion) when live bytes stay as they were.
  bool sink_readers = true;
};

struct LatencyHidingStats {
  int pairs = 0;        // start/done pairs in the schedule
  int overlapped = 0;   // pairs with at least one instruction between start and done
  int64_t limit_bytes = 0;        // the gathers' channel
  int64_t other_limit_bytes = 0;  // the other channel's
  int64_t peak_in_flight_bytes = 0;  // the most charged at one instruction
  int sunk_readers = 0;  // readers of a done delayed so the done can move later
  std::string to_string() const;
};

// The default limit for `computation` (see above).
int64_t default_overlap_limit(const ir::Computation& computation);

// Reorders `schedule` in place.
LatencyHidingStats hide_latency(Schedule& schedule, const BufferModel& model, const LatencyHidingOptions& options = {});

}  // namespace kiln::sched
