// The pipeline's memory stages (memory/memory_stages.h): IR text of a small partitioned step
// in (two fsdp gathers, a reduce-scatter, a donated weight update), the final order and the
// placements out. What the stages add to their parts (tested alone in tests/sched and
// buffer_assignment_test.cc) is the order they run in and what they hand on: the assignment
// must place values for the order latency hiding left, and the donations must reach both the
// scheduler and the assignment.
#include "kiln/memory/memory_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>

#include "kiln/ir/parser.h"

namespace kiln::memory {
namespace {

constexpr const char* kStep = R"(module @stages

computation @f.step {
  %s_w = f32[4,8] parameter(), index=0
  %s_g = f32[4,8] parameter(), index=1
  ROOT %s_n = f32[4,8] sub(%s_w, %s_g)
}

ENTRY computation @main {
  %x = f32[2,8] parameter(), index=0
  %w0 = f32[4,8] parameter(), index=1
  %w1 = f32[4,8] parameter(), index=2
  %g0.start = f32[8,8] all_gather_start(%w0), dim=0, group_size=2, mesh_axes=fsdp
  %g0 = f32[8,8] all_gather_done(%g0.start, %w0)
  %h0 = f32[2,8] dot_general(%x, %g0), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g1.start = f32[8,8] all_gather_start(%w1), dim=0, group_size=2, mesh_axes=fsdp
  %g1 = f32[8,8] all_gather_done(%g1.start, %w1)
  %h1 = f32[2,8] dot_general(%h0, %g1), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %d1 = f32[8,8] dot_general(%h0, %h1), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %r1.start = f32[4,8] reduce_scatter_start(%d1), dim=0, group_size=2, mesh_axes=fsdp
  %r1 = f32[4,8] reduce_scatter_done(%r1.start, %d1)
  %w1n = f32[4,8] fusion(%w1, %r1), kind=loop, calls={@f.step}
  ROOT %out = (f32[2,8], f32[4,8]) tuple(%h1, %w1n)
}
)";

struct Staged {
  std::unique_ptr<ir::Module> module;
  MemoryStages stages;

  int position(const std::string& id) const {
    const auto& s = stages.assignment.schedule;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i]->id() == id) return static_cast<int>(i);
    }
    ADD_FAILURE() << "no %" << id << " in the schedule";
    return -1;
  }
  const Slot& slot(const std::string& id) const {
    for (const auto& i : module->entry()->instructions()) {
      if (i->id() == id) return stages.assignment.slots.at(stages.model->leaves(i.get()).at(0));
    }
    ADD_FAILURE() << "no %" << id;
    static const Slot none;
    return none;
  }
};

Staged run(MemoryStageOptions options) {
  Staged s;
  auto m = ir::parse_module(kStep);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  s.module = std::move(*m);
  auto stages = run_memory_stages(*s.module->entry(), options);
  EXPECT_TRUE(stages.ok()) << stages.status().to_string();
  s.stages = std::move(*stages);
  // The final order: every instruction once, each after its operands.
  const auto& order = s.stages.assignment.schedule;
  std::unordered_map<const ir::Instr*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) EXPECT_TRUE(pos.emplace(order[i], i).second);
  EXPECT_EQ(order.size(), s.module->entry()->instructions().size());
  for (const ir::Instr* i : order) {
    for (const ir::Instr* o : i->operands()) EXPECT_LT(pos.at(o), pos.at(i)) << i->id() << " after " << o->id();
  }
  // Arena values that share storage never live at the same time (in-place takeovers aside).
  const auto& slots = s.stages.assignment.slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    for (size_t j = i + 1; j < slots.size(); ++j) {
      if (slots[i].placement != Placement::kArena || slots[j].placement != Placement::kArena) continue;
      const int64_t bi = s.stages.model->buffer(static_cast<int>(i)).bytes;
      const int64_t bj = s.stages.model->buffer(static_cast<int>(j)).bytes;
      const bool space = slots[i].offset < slots[j].offset + bj && slots[j].offset < slots[i].offset + bi;
      const bool time = slots[i].start <= slots[j].end && slots[j].start <= slots[i].end;
      const bool in_place = slots[j].in_place_of == static_cast<int>(i) || slots[i].in_place_of == static_cast<int>(j);
      EXPECT_FALSE(space && time && !in_place) << "buffers " << i << " and " << j;
    }
  }
  return s;
}

TEST(MemoryStages, TheAssignmentPlacesValuesForTheOrderLatencyHidingLeft) {
  MemoryStageOptions options;
  options.overlap_limit_bytes = 1 << 20;
  const Staged s = run(options);
  EXPECT_EQ(s.stages.hiding.pairs, 3);
  EXPECT_GE(s.stages.hiding.overlapped, 1);
  // Layer 1's gather needs only its weight, so latency hiding starts it before layer 0's
  // matmul, which then runs while it is in flight.
  EXPECT_LT(s.position("g1.start"), s.position("h0"));
  EXPECT_LT(s.position("h0"), s.position("g1"));
  // The gathered weight is written at its start and lives through its done: the assignment
  // saw the hidden order, not the scheduler's.
  EXPECT_EQ(s.slot("g1.start").start, s.position("g1.start"));
  EXPECT_GE(s.slot("g1.start").end, s.position("g1"));
}

TEST(MemoryStages, AZeroOverlapLimitKeepsEveryCollectiveSynchronous) {
  MemoryStageOptions options;
  options.overlap_limit_bytes = 0;
  const Staged s = run(options);
  EXPECT_EQ(s.stages.hiding.pairs, 3);
  EXPECT_EQ(s.stages.hiding.overlapped, 0);
  for (const char* pair : {"g0", "g1", "r1"}) {
    EXPECT_EQ(s.position(std::string(pair) + ".start") + 1, s.position(pair)) << pair;
  }
}

// The device's memory known and the default limit: a device with room lets the overlap use
// 1/8 of it, and the plan still fits; a device whose fractions are no larger than one weight
// keeps the default, one weight ahead, as does one whose memory is unknown.
TEST(MemoryStages, TheOverlapLimitIsAFractionOfTheDevicesMemoryWhereThePlanStillFits) {
  MemoryStageOptions roomy;
  roomy.device_memory_bytes = 1 << 20;
  const Staged big = run(roomy);
  EXPECT_EQ(big.stages.overlap_limit_fraction, 8);
  EXPECT_EQ(big.stages.hiding.limit_bytes, (1 << 20) / 8);
  const BufferAssignment& a = big.stages.assignment;
  EXPECT_LE(a.argument_bytes + a.constant_bytes + a.arena_bytes + a.output_bytes, int64_t{1} << 20);

  const Staged unknown = run({});
  EXPECT_EQ(unknown.stages.overlap_limit_fraction, 0);
  EXPECT_EQ(unknown.stages.hiding.limit_bytes, sched::default_overlap_limit(*unknown.module->entry()));

  // Room for the plan, but 1/8 .. 1/32 of it are no more than one weight: the default.
  MemoryStageOptions tight;
  tight.device_memory_bytes = a.argument_bytes + a.constant_bytes + a.arena_bytes + a.output_bytes;
  const Staged small = run(tight);
  EXPECT_EQ(small.stages.overlap_limit_fraction, 0);
  EXPECT_EQ(small.stages.hiding.limit_bytes, sched::default_overlap_limit(*small.module->entry()));
}

TEST(MemoryStages, TheChosenScheduleIsTheLowestPeakOfTheCandidates) {
  const Staged s = run({});
  const sched::ScheduleChoice& c = s.stages.choice;
  EXPECT_TRUE(c.name == "list" || c.name == "program_order" || c.name == "post_order") << c.name;
  EXPECT_EQ(c.peak_bytes, std::min({c.list_peak, c.program_order_peak, c.post_order_peak}));
  EXPECT_TRUE(c.schedule.empty()) << "the final order is the assignment's";
  EXPECT_LE(s.stages.assignment.max_live_arena_bytes, s.stages.assignment.arena_bytes);
}

TEST(MemoryStages, DonationsReachTheScheduleAndTheAssignment) {
  MemoryStageOptions options;
  options.donated = {{1, 2}};  // the updated w1 (output 1) into w1's storage (argument 2)
  const Staged donated = run(options);
  EXPECT_EQ(donated.slot("w1n").placement, Placement::kDonated);
  EXPECT_EQ(donated.slot("w1n").argument, 2);
  EXPECT_EQ(donated.stages.assignment.donated_in_place, 1);
  // Written after every other read of w1 (its gather), so it can take w1's storage.
  EXPECT_GT(donated.position("w1n"), donated.position("g1"));
  const Staged kept = run({});
  EXPECT_EQ(kept.slot("w1n").placement, Placement::kOutput);
  EXPECT_EQ(kept.stages.assignment.output_bytes - donated.stages.assignment.output_bytes, 4 * 8 * 4);
}

}  // namespace
}  // namespace kiln::memory
