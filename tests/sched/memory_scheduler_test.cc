// The memory-aware list scheduler: IR text in, schedule and peak bytes out.
#include <gtest/gtest.h>

#include <unordered_map>

#include "kiln/ir/parser.h"
#include "kiln/sched/logical_buffers.h"
#include "kiln/sched/memory_scheduler.h"

namespace kiln::sched {
namespace {

// Two wide values each reduced to a scalar: program order computes both before reducing
// either (2 x 64 KiB live); the list scheduler reduces each as soon as it exists.
constexpr const char* kTwoBranches = R"(module @branches

ENTRY computation @main {
  %x = f32[128,128] parameter(), index=0
  %a = f32[128,128] exp(%x)
  %b = f32[128,128] tanh(%x)
  %ra = f32[] reduce_sum(%a), dims={0,1}
  %rb = f32[] reduce_sum(%b), dims={0,1}
  ROOT %out = (f32[], f32[]) tuple(%ra, %rb)
}
)";

std::unique_ptr<ir::Module> parse(const char* text) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(*m);
}

void expect_topological(const ir::Computation& c, const Schedule& s) {
  ASSERT_EQ(s.size(), c.instructions().size());
  std::unordered_map<const ir::Instr*, size_t> pos;
  for (size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(pos.emplace(s[i], i).second) << "scheduled twice: " << s[i]->id();
  for (const ir::Instr* i : s) {
    for (const ir::Instr* o : i->operands()) EXPECT_LT(pos.at(o), pos.at(i)) << i->id() << " before " << o->id();
  }
}

TEST(MemoryScheduler, ReducesEachBranchBeforeStartingTheNext) {
  auto m = parse(kTwoBranches);
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule listed = list_schedule(c, model);
  expect_topological(c, listed);
  const int64_t wide = 128 * 128 * 4;
  EXPECT_EQ(peak_live_bytes(model, program_order(c)), 2 * wide + 4);
  EXPECT_EQ(peak_live_bytes(model, listed), wide + 4 + 4);
  ScheduleChoice choice = choose_schedule(c, model);
  EXPECT_NE(choice.name, "program_order");
  EXPECT_EQ(choice.peak_bytes, wide + 8);
  // Depth-first from the root also reduces each branch before the next.
  EXPECT_EQ(peak_live_bytes(model, post_order_schedule(c)), wide + 8);
  // Deterministic: the same schedule every time.
  EXPECT_EQ(list_schedule(c, model), listed);
}

TEST(MemoryScheduler, KeepsProgramOrderWhenItIsAlreadyBest) {
  // A chain has one order only; ties keep program order.
  auto m = parse(R"(module @chain

ENTRY computation @main {
  %x = f32[64] parameter(), index=0
  %a = f32[64] exp(%x)
  %b = f32[64] tanh(%a)
  ROOT %c = f32[64] neg(%b)
}
)");
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  EXPECT_EQ(list_schedule(c, model), program_order(c));
  ScheduleChoice choice = choose_schedule(c, model);
  EXPECT_EQ(choice.schedule, program_order(c));
  EXPECT_EQ(choice.peak_bytes, 2 * 64 * 4);  // an operand and its result; the output lives on
  EXPECT_EQ(choice.program_order_peak, choice.list_peak);
}

TEST(LogicalBuffers, ViewsAndTuplesNameTheirOperandsBuffers) {
  auto m = parse(R"(module @views

ENTRY computation @main {
  %x = f32[4,6] parameter(), index=0
  %a = f32[4,6] exp(%x)
  %r = f32[24] reshape(%a)
  %t = (f32[24], f32[4,6]) tuple(%r, %x)
  %g = f32[24] get_tuple_element(%t), index=0
  ROOT %n = f32[24] neg(%g)
}
)");
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  auto find = [&](const char* id) {
    for (const auto& i : c.instructions()) {
      if (i->id() == id) return i.get();
    }
    return static_cast<ir::Instr*>(nullptr);
  };
  EXPECT_TRUE(model.defined(find("r")).empty());
  EXPECT_EQ(model.leaves(find("g")), model.leaves(find("a")));
  EXPECT_EQ(model.leaves(find("t")).size(), 2u);
  EXPECT_EQ(model.buffer(model.leaves(find("x"))[0]).source, BufferSource::kArgument);
  EXPECT_TRUE(model.buffer(model.leaves(find("n"))[0]).output);
  EXPECT_FALSE(model.buffer(model.leaves(find("a"))[0]).output);
}

}  // namespace
}  // namespace kiln::sched
