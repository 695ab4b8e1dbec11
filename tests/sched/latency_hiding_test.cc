// The latency-hiding scheduler (sched/latency_hiding.h): IR text of a small partitioned
// program in, the order its instructions run in out.
#include "kiln/sched/latency_hiding.h"

#include <regex>

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "kiln/ir/parser.h"
#include "kiln/sched/logical_buffers.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::sched {
namespace {

// Three layers on fsdp=2: each gathers its weight shard [4,8] -> [8,8] (256 bytes) right
// before its matmul, as the partitioner and the memory scheduler leave it, and the backward
// of the last two reduce-scatters a weight gradient [8,8] -> [4,8] right after making it.
constexpr const char* kLayers = R"(module @layers

ENTRY computation @main {
  %x = f32[2,8] parameter(), index=0
  %w0 = f32[4,8] parameter(), index=1, name="layers.0.w"
  %w1 = f32[4,8] parameter(), index=2, name="layers.1.w"
  %w2 = f32[4,8] parameter(), index=3, name="layers.2.w"
  %g0.start = f32[8,8] all_gather_start(%w0), dim=0, group_size=2, mesh_axes=fsdp, name="layers.0.w"
  %g0 = f32[8,8] all_gather_done(%g0.start, %w0), name="layers.0.w"
  %h0 = f32[2,8] dot_general(%x, %g0), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g1.start = f32[8,8] all_gather_start(%w1), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.w"
  %g1 = f32[8,8] all_gather_done(%g1.start, %w1), name="layers.1.w"
  %h1 = f32[2,8] dot_general(%h0, %g1), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g2.start = f32[8,8] all_gather_start(%w2), dim=0, group_size=2, mesh_axes=fsdp, name="layers.2.w"
  %g2 = f32[8,8] all_gather_done(%g2.start, %w2), name="layers.2.w"
  %h2 = f32[2,8] dot_general(%h1, %g2), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %d2 = f32[8,8] dot_general(%h1, %h2), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %r2.start = f32[4,8] reduce_scatter_start(%d2), dim=0, group_size=2, mesh_axes=fsdp, name="layers.2.w.grad"
  %r2 = f32[4,8] reduce_scatter_done(%r2.start, %d2), name="layers.2.w.grad"
  %d1 = f32[8,8] dot_general(%h0, %h1), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %r1.start = f32[4,8] reduce_scatter_start(%d1), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.w.grad"
  %r1 = f32[4,8] reduce_scatter_done(%r1.start, %d1), name="layers.1.w.grad"
  ROOT %out = (f32[2,8], f32[4,8], f32[4,8]) tuple(%h2, %r2, %r1)
}
)";

std::unique_ptr<ir::Module> parse(const char* text) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(*m);
}

std::string order(const Schedule& s) {
  std::vector<std::string> ids;
  for (const ir::Instr* i : s) {
    if (i->opcode() != ir::Opcode::kParameter) ids.push_back(i->id());
  }
  return fmt::format("{}", fmt::join(ids, " "));
}

Schedule hidden(const ir::Module& m, int64_t limit, LatencyHidingStats* stats = nullptr) {
  const ir::Computation& c = *m.entry();
  BufferModel model(c);
  Schedule s = program_order(c);
  LatencyHidingOptions o;
  o.limit_bytes = limit;
  LatencyHidingStats st = hide_latency(s, model, o);
  if (stats != nullptr) *stats = st;
  // Every instruction once, after its operands.
  std::unordered_map<const ir::Instr*, size_t> pos;
  for (size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(pos.emplace(s[i], i).second);
  EXPECT_EQ(s.size(), c.instructions().size());
  for (const ir::Instr* i : s) {
    for (const ir::Instr* o : i->operands()) EXPECT_LT(pos.at(o), pos.at(i)) << i->id() << " before " << o->id();
  }
  return s;
}

// Each gather window holds 256 bytes (its operand is an argument, alive anyway), each
// reduce-scatter window 128 + 256 (its operand is computed and now lives to the done).
// Parameters run first, so a weight's gather may start before any compute; layer 0's has
// nothing before its matmul to overlap.
TEST(LatencyHiding, NextLayersGatherStartsBeforeThisLayersCompute) {
  auto m = parse(kLayers);
  LatencyHidingStats stats;
  // Room for one gathered layer: layer i+1's gather starts right before layer i's matmul,
  // its done right before its own; r2 (384 bytes) does not fit and stays synchronous.
  Schedule s = hidden(*m, 256, &stats);
  EXPECT_EQ(order(s), "g0.start g0 g1.start h0 g1 g2.start h1 g2 h2 d2 r2.start r2 d1 r1.start r1 out");
  EXPECT_EQ(stats.pairs, 5);
  EXPECT_EQ(stats.overlapped, 2);
  EXPECT_EQ(stats.peak_in_flight_bytes, 256);
}

TEST(LatencyHiding, DefaultLimitHoldsOneLayersGathersAndOverlapsTheGradientReduceScatter) {
  auto m = parse(kLayers);
  LatencyHidingStats stats;
  // The default: the largest window of a layer's weight (256, the layer found on the
  // gathered weight's name) for the gathers: one weight ahead of the compute (two would
  // need 512); the other channel fits its largest window too (r2's, 384), one at a time.
  Schedule s = hidden(*m, -1, &stats);
  EXPECT_EQ(stats.limit_bytes, 256);
  EXPECT_EQ(stats.other_limit_bytes, 384);
  // g1 starts before layer 0's matmul, g2 before layer 1's; r2 is done only after d1 (the
  // earlier layer's backward) ran; r1 has nothing after it.
  EXPECT_EQ(order(s), "g0.start g0 g1.start h0 g1 g2.start h1 g2 h2 d2 r2.start d1 r2 r1.start r1 out");
  EXPECT_EQ(stats.overlapped, 3);
  EXPECT_EQ(stats.peak_in_flight_bytes, 384);
  // The partitioner's gathers carry no name of their own: the gathered weight's counts.
  const std::string unnamed = std::regex_replace(
      kLayers, std::regex(R"((all_gather_start\(%w\d\), dim=0, group_size=2, mesh_axes=fsdp), name="[^"]*")"), "$1");
  ASSERT_NE(unnamed, kLayers);
  auto u = parse(unnamed.c_str());
  hidden(*u, -1, &stats);
  EXPECT_EQ(stats.limit_bytes, 256);
}

// A gather and a reduce-scatter in flight at once charge separate channels: each fits the
// limit alone, so both overlap the same compute.
TEST(LatencyHiding, GathersAndReduceScattersChargeSeparateChannels) {
  auto m = parse(R"(module @channels

ENTRY computation @main {
  %w = f32[4,8] parameter(), index=0
  %x = f32[8,8] parameter(), index=1
  %y = f32[8,8] exp(%x)
  %r.start = f32[4,8] reduce_scatter_start(%y), dim=0, group_size=2, mesh_axes=fsdp
  %g.start = f32[8,8] all_gather_start(%w), dim=0, group_size=2, mesh_axes=fsdp
  %h = f32[8,8] tanh(%x)
  %g = f32[8,8] all_gather_done(%g.start, %w)
  %r = f32[4,8] reduce_scatter_done(%r.start, %y)
  %u = f32[8,8] add(%h, %g)
  ROOT %out = (f32[8,8], f32[4,8]) tuple(%u, %r)
}
)");
  LatencyHidingStats stats;
  // The gather holds 256 bytes, the reduce-scatter 128 + 256: both fit a 384-byte limit on
  // their own channels, not together on one.
  Schedule s = hidden(*m, 384, &stats);
  EXPECT_EQ(stats.overlapped, 2);
  EXPECT_EQ(stats.peak_in_flight_bytes, 640);
}

TEST(LatencyHiding, LimitZeroKeepsEveryPairSynchronous) {
  auto m = parse(kLayers);
  LatencyHidingStats stats;
  Schedule s = hidden(*m, 0, &stats);
  EXPECT_EQ(order(s), "g0.start g0 h0 g1.start g1 h1 g2.start g2 h2 d2 r2.start r2 d1 r1.start r1 out");
  EXPECT_EQ(stats.overlapped, 0);
  EXPECT_EQ(stats.peak_in_flight_bytes, 0);
}

// A donated output (the updated weight, written into w's storage) must not be passed by
// the done that still reads w.
TEST(LatencyHiding, DoneStaysBeforeTheWriterOfItsDonatedOperand) {
  auto m = parse(R"(module @donate

ENTRY computation @main {
  %w = f32[4,8] parameter(), index=0
  %x = f32[2,8] parameter(), index=1
  %g.start = f32[8,8] all_gather_start(%w), dim=0, group_size=2, mesh_axes=fsdp
  %g = f32[8,8] all_gather_done(%g.start, %w)
  %u = f32[4,8] neg(%w)
  %e = f32[2,8] exp(%x)
  %h = f32[2,8] dot_general(%e, %g), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  ROOT %out = (f32[4,8], f32[2,8]) tuple(%u, %h)
}
)");
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule s = program_order(c);
  LatencyHidingOptions o;
  o.schedule.donated = {{0, 0}};
  hide_latency(s, model, o);
  EXPECT_EQ(order(s), "g.start g u e h out");
  // Without the donation the done waits until the matmul needs it.
  Schedule free = program_order(c);
  hide_latency(free, model);
  EXPECT_EQ(order(free), "g.start u e g h out");
}

// A weight converted to bf16 only for its gather, computed right before it (as a memory
// scheduler leaves it): the convert moves up with the start.
TEST(LatencyHiding, OperandMadeOnlyForTheCollectiveMovesWithItsStart) {
  auto m = parse(R"(module @convert

ENTRY computation @main {
  %x = f32[2,8] parameter(), index=0
  %w = f32[4,8] parameter(), index=1
  %e = f32[2,8] exp(%x)
  %wb = bf16[4,8] convert(%w)
  %g.start = bf16[8,8] all_gather_start(%wb), dim=0, group_size=2, mesh_axes=fsdp
  %g = bf16[8,8] all_gather_done(%g.start, %wb)
  %gf = f32[8,8] convert(%g)
  ROOT %h = f32[2,8] dot_general(%e, %gf), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
}
)");
  LatencyHidingStats stats;
  Schedule s = hidden(*m, -1, &stats);
  EXPECT_EQ(order(s), "wb g.start e g gf h");
  EXPECT_EQ(stats.overlapped, 1);
  // With no room the convert stays where the memory scheduler put it.
  EXPECT_EQ(order(hidden(*m, 0)), "e wb g.start g gf h");
}

// The memory scheduler ran the last layer's gradient transpose and its squared norm right
// after the reduce-scatter; both wait until the global norm needs them, so the reduce-scatter
// stays in flight while the earlier layer's gradient is computed.
constexpr const char* kGradients = R"(module @grads

ENTRY computation @main {
  %h = f32[2,8] parameter(), index=0
  %e = f32[2,8] parameter(), index=1
  %d2 = f32[8,8] dot_general(%h, %e), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %r2.start = f32[4,8] reduce_scatter_start(%d2), dim=0, group_size=2, mesh_axes=fsdp
  %r2 = f32[4,8] reduce_scatter_done(%r2.start, %d2)
  %t2 = f32[8,4] transpose(%r2), perm={1,0}
  %n2 = f32[] reduce_sum(%t2), dims={0,1}
  %x1 = f32[2,8] tanh(%e)
  %d1 = f32[8,8] dot_general(%h, %x1), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %n1 = f32[] reduce_sum(%d1), dims={0,1}
  %norm = f32[] add(%n1, %n2)
  %u2 = f32[8,4] mul(%t2, %t2)
  ROOT %out = (f32[], f32[8,4]) tuple(%norm, %u2)
}
)";

TEST(LatencyHiding, GradientReadersWaitSoTheReduceScatterOverlapsEarlierLayers) {
  auto m = parse(kGradients);
  LatencyHidingStats stats;
  Schedule s = hidden(*m, -1, &stats);
  EXPECT_EQ(order(s), "d2 r2.start x1 d1 n1 r2 t2 n2 norm u2 out");
  EXPECT_EQ(stats.sunk_readers, 1);
  EXPECT_EQ(stats.overlapped, 1);
  // Without delaying the readers there is nothing to overlap.
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule plain = program_order(c);
  LatencyHidingOptions o;
  o.sink_readers = false;
  EXPECT_EQ(hide_latency(plain, model, o).overlapped, 0);
  EXPECT_EQ(order(plain), "d2 r2.start r2 t2 n2 x1 d1 n1 norm u2 out");
}

// One MoE layer on expert=2: the rows are made, then their counts (the start needs both),
// then compute that needs no exchange (the shared part of the layer); the experts read the
// dispatched rows, and the return's reader is the root.
constexpr const char* kMoe = R"(module @moe

ENTRY computation @main {
  %x = f32[1,4,2] parameter(), index=0
  %c = f32[1,2] parameter(), index=1
  %y = f32[3,3] parameter(), index=2
  %rows = f32[1,4,2] tanh(%x)
  %sizes = s32[1,2] convert(%c)
  %a = f32[3,3] exp(%y)
  %d.start = f32[1,8,2] ragged_all_to_all_start(%rows, %sizes), group_size=2, rows=4, slot=4, reverse=0, mesh_axes=expert
  %d = f32[1,8,2] ragged_all_to_all_done(%d.start, %rows)
  %e = f32[1,8,2] tanh(%d)
  %b.start = f32[1,4,2] ragged_all_to_all_start(%e, %sizes), group_size=2, rows=4, slot=4, reverse=1, mesh_axes=expert
  %b = f32[1,4,2] ragged_all_to_all_done(%b.start, %e)
  %z = f32[3,3] exp(%a)
  ROOT %out = (f32[1,4,2], f32[3,3]) tuple(%b, %z)
}
)";

// The dispatch starts once its rows and their counts exist (not before the counts, its
// second operand) and is done right before the experts read it; the return starts after
// the experts and is done at the root, with the independent exp in both windows. Each
// window holds its worst-case receive buffer and its computed operand: 64 + 32 and 32 + 64
// bytes, within a limit of 96 (one at a time), and none fits under 95.
TEST(LatencyHiding, RaggedExchangeStartsAfterItsCountsAndOverlapsIndependentCompute) {
  auto m = parse(kMoe);
  LatencyHidingStats stats;
  Schedule s = hidden(*m, 96, &stats);
  EXPECT_EQ(order(s), "rows sizes d.start a d e b.start z b out");
  EXPECT_EQ(stats.pairs, 2);
  EXPECT_EQ(stats.overlapped, 2);
  EXPECT_EQ(stats.peak_in_flight_bytes, 96);
  s = hidden(*m, 95, &stats);
  EXPECT_EQ(order(s), "rows sizes a d.start d e b.start b z out");
  EXPECT_EQ(stats.overlapped, 0);
}

// A weight gather (256 bytes) whose done comes before the exchange's, each within the limit
// alone: they charge separate channels (weights fetched ahead; tokens exchanged), so the
// exchange takes its whole window (the independent exp, the gather and its reader) and the
// gather still starts from the parameters on. Exchanges are placed before the other pairs
// of their channel (reduce-scatters), which would otherwise fill it first.
TEST(LatencyHiding, RaggedExchangeAndWeightGatherOverlapOnTheirOwnChannels) {
  auto m = parse(R"(module @moe

ENTRY computation @main {
  %x = f32[1,4,2] parameter(), index=0
  %c = f32[1,2] parameter(), index=1
  %y = f32[3,3] parameter(), index=2
  %w = f32[4,8] parameter(), index=3, name="layers.1.w"
  %rows = f32[1,4,2] tanh(%x)
  %sizes = s32[1,2] convert(%c)
  %a = f32[3,3] exp(%y)
  %g.start = f32[8,8] all_gather_start(%w), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.w"
  %g = f32[8,8] all_gather_done(%g.start, %w), name="layers.1.w"
  %a2 = f32[8,8] exp(%g)
  %d.start = f32[1,8,2] ragged_all_to_all_start(%rows, %sizes), group_size=2, rows=4, slot=4, reverse=0, mesh_axes=expert
  %d = f32[1,8,2] ragged_all_to_all_done(%d.start, %rows)
  %e = f32[1,8,2] tanh(%d)
  ROOT %out = (f32[1,8,2], f32[8,8], f32[3,3]) tuple(%e, %a2, %a)
}
)");
  LatencyHidingStats stats;
  Schedule s = hidden(*m, 256, &stats);
  EXPECT_EQ(order(s), "g.start rows sizes d.start a g a2 d e out");
  EXPECT_EQ(stats.overlapped, 2);
  EXPECT_EQ(stats.peak_in_flight_bytes, 256 + 96);
}

TEST(LatencyHiding, NoPairsLeavesTheScheduleAlone) {
  auto m = parse(R"(module @none

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %a = f32[4] exp(%x)
  ROOT %b = f32[4] tanh(%a)
}
)");
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule s = program_order(c);
  EXPECT_EQ(hide_latency(s, model).pairs, 0);
  EXPECT_EQ(order(s), "a b");
}

}  // namespace
}  // namespace kiln::sched
