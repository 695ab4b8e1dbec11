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

size_t position(const Schedule& s, const char* id) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i]->id() == id) return i;
  }
  ADD_FAILURE() << "not scheduled: " << id;
  return 0;
}

// A layer's forward value %h is recomputed for the backward pass (%hr, RematPass's clone).
// %hr is ready as soon as %x and %w exist and allocates less than the wide forward values,
// so a greedy scheduler would run it in the forward pass and keep it alive across it; it
// must instead run right before its backward use %d.
constexpr const char* kRecompute = R"(module @recompute

ENTRY computation @main {
  %x = f32[256] parameter(), index=0
  %w = f32[256] parameter(), index=1
  %c = f32[4,256] parameter(), index=2
  %h = f32[256] mul(%x, %w), name="layers.0.h"
  %hb = f32[4,256] broadcast(%h), dims={1}, name="layers.0.wide"
  %b = f32[4,256] add(%hb, %c), name="layers.0.wide"
  %e = f32[4,256] exp(%b), name="layers.0.e"
  %s = f32[] reduce_sum(%e), dims={0,1}, name="loss"
  %g = f32[256] broadcast(%s), dims={}, name="loss.grad"
  %hr = f32[256] mul(%x, %w), name="layers.0.h.remat"
  %d = f32[256] mul(%g, %hr), name="layers.0.h.grad"
  ROOT %t = (f32[], f32[256]) tuple(%s, %d)
}
)";

TEST(MemoryScheduler, RunsRecomputationRightBeforeItsBackwardUse) {
  auto m = parse(kRecompute);
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule listed = list_schedule(c, model);
  expect_topological(c, listed);
  EXPECT_EQ(position(listed, "hr") + 1, position(listed, "d"));
  EXPECT_GT(position(listed, "hr"), position(listed, "s"));
  // Live at the peak: two wide values (%hb and %b, then %b and %e: exp is not in place
  // here), never %hr beside them.
  const int64_t wide = 4 * 256 * 4;
  EXPECT_EQ(peak_live_bytes(model, listed), 2 * wide);
  // Without the marker the same clone is an ordinary value and runs early.
  auto plain = parse(kRecompute);
  for (const auto& i : plain->entry()->instructions()) {
    if (i->id() == "hr") i->mutable_meta().name = "layers.0.h.copy";
  }
  BufferModel plain_model(*plain->entry());
  Schedule eager = list_schedule(*plain->entry(), plain_model);
  EXPECT_LT(position(eager, "hr"), position(eager, "b"));
  EXPECT_GT(peak_live_bytes(plain_model, eager), peak_live_bytes(model, listed));
}

// A multi-output fusion that writes the forward's residual sum %r and, in the same kernel, a
// statistic the remat pass recomputed from it (named after its first output, the
// recomputed one). The forward's next layer %n reads %r: the fusion is not recomputation,
// or the forward would wait behind every other ready instruction (here the wide %far,
// which nothing needs until the end).
constexpr const char* kMixedFusion = R"(module @mixed

computation @fused {
  %p0 = f32[256] parameter(), index=0
  %p1 = f32[256] parameter(), index=1
  %add = f32[256] add(%p0, %p1), name="layers.1.output"
  %sq = f32[256] mul(%add, %add), name="layers.2.remat"
  %stat = f32[] reduce_sum(%sq), dims={0}, name="layers.2.remat"
  ROOT %t = (f32[], f32[256]) tuple(%stat, %add)
}

computation @all_remat {
  %q0 = f32[256] parameter(), index=0
  ROOT %m = f32[256] mul(%q0, %q0), name="layers.0.h.remat"
}

ENTRY computation @main {
  %x = f32[256] parameter(), index=0
  %y = f32[256] parameter(), index=1
  %f = (f32[], f32[256]) fusion(%x, %y), kind=input, calls={@fused}, name="layers.2.remat"
  %r = f32[256] get_tuple_element(%f), index=1, name="layers.1.output"
  %n = f32[256] exp(%r), name="layers.2"
  %fa = f32[64,256] parameter(), index=2
  %fb = f32[64,256] parameter(), index=3
  %far = f32[64,256] add(%fa, %fb), name="far"
  %o = f32[] reduce_sum(%n), dims={0}, name="loss"
  %z = f32[256] fusion(%x), kind=loop, calls={@all_remat}, name="layers.0.h.remat"
  %s = f32[] get_tuple_element(%f), index=0, name="layers.2.remat"
  %fs = f32[] reduce_sum(%far), dims={0,1}
  %zs = f32[] reduce_sum(%z), dims={0}
  ROOT %out = (f32[], f32[], f32[], f32[]) tuple(%o, %s, %fs, %zs)
}
)";

TEST(MemoryScheduler, AFusionIsRecomputationOnlyWhenAllItsMembersAre) {
  auto m = parse(kMixedFusion);
  const ir::Computation& c = *m->entry();
  auto instr = [&](const std::string& id) {
    for (const auto& i : c.instructions()) {
      if (i->id() == id) return i.get();
    }
    return static_cast<ir::Instr*>(nullptr);
  };
  EXPECT_FALSE(is_recomputation(*instr("f")));  // holds the forward's %add
  EXPECT_TRUE(is_recomputation(*instr("z")));   // every member recomputes
  EXPECT_TRUE(is_recomputation(*instr("s")));   // a plain instruction: its name
  BufferModel model(c);
  Schedule listed = list_schedule(c, model);
  expect_topological(c, listed);
  // The forward goes on (%f, %n, %o) before the wide value nothing waits for.
  EXPECT_LT(position(listed, "o"), position(listed, "far"));
}

// The step counter: %next = step + 1 is donated to the step argument, which the learning
// rate %lr still reads; AdamW's bias correction %bc reads %next. Run early (it is ready at
// once and allocates almost nothing), %next could not take the argument's storage; with the
// donation the scheduler runs it after %lr, and the donated output no longer counts as live
// bytes.
constexpr const char* kStepCounter = R"(module @counter

ENTRY computation @main {
  %step = s32[] parameter(), index=0
  %x = f32[64] parameter(), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%step, %one), name="step"
  %bc = f32[] convert(%next), name="adamw"
  %lr = f32[] convert(%step), name="lr"
  %f = f32[] mul(%lr, %bc)
  %b = f32[64] broadcast(%f), dims={}
  %y = f32[64] mul(%x, %b)
  ROOT %t = (s32[], f32[64]) tuple(%next, %y)
}
)";

TEST(MemoryScheduler, RunsADonatedOutputAfterTheOtherReadersOfItsArgument) {
  auto m = parse(kStepCounter);
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  ScheduleOptions donating;
  donating.donated = {{0, 0}};
  ASSERT_EQ(donated_buffers(model, donating.donated).size(), 1u);
  // Not told about the donation: program order breaks the tie, %next first.
  EXPECT_LT(position(list_schedule(c, model), "next"), position(list_schedule(c, model), "lr"));
  Schedule listed = list_schedule(c, model, donating);
  expect_topological(c, listed);
  EXPECT_GT(position(listed, "next"), position(listed, "lr"));
  // %b and %y (and scalars before %b); %next lives in the argument.
  EXPECT_EQ(peak_live_bytes(model, listed, donating), 2 * 64 * 4);
  EXPECT_EQ(peak_live_bytes(model, listed), 2 * 64 * 4 + 4);
  // In program order %lr reads the argument after %next is written: counted.
  EXPECT_EQ(peak_live_bytes(model, program_order(c), donating), 2 * 64 * 4 + 4);
  // Program order with %next (and %bc, which reads it) moved after the argument's last other
  // reader peaks as low.
  Schedule delayed = program_order(c);
  delay_donated_outputs(delayed, model, donating);
  expect_topological(c, delayed);
  EXPECT_EQ(position(delayed, "next"), position(delayed, "lr") + 1);
  EXPECT_EQ(position(delayed, "bc"), position(delayed, "next") + 1);
  EXPECT_EQ(peak_live_bytes(model, delayed, donating), 2 * 64 * 4);
  EXPECT_EQ(choose_schedule(c, model, donating).schedule, listed);
}

// Instructions made from arguments alone (weight gathers, a zero accumulator) run on demand,
// right before their first reader: ready from the start, a greedy choice would run the
// small gathers %g0..%g2 first, all before the large %emb the first layer waits for, and
// hold them all at once.
constexpr const char* kOnDemand = R"(module @on_demand

ENTRY computation @main {
  %t = f32[64,16] parameter(), index=0
  %w0 = f32[4,16] parameter(), index=1
  %w1 = f32[4,16] parameter(), index=2
  %w2 = f32[4,16] parameter(), index=3
  %ids = f32[16] parameter(), index=4
  %emb.start = f32[128,16] all_gather_start(%t), dim=0, group_size=2, mesh_axes=fsdp
  %emb = f32[128,16] all_gather_done(%emb.start, %t)
  %es = f32[16] reduce_sum(%emb), dims={0}
  %x = f32[16] add(%es, %ids)
  %g0.start = f32[8,16] all_gather_start(%w0), dim=0, group_size=2, mesh_axes=fsdp
  %g0 = f32[8,16] all_gather_done(%g0.start, %w0)
  %xb = f32[8,16] broadcast(%x), dims={1}
  %h0 = f32[8,16] add(%g0, %xb)
  %g1.start = f32[8,16] all_gather_start(%w1), dim=0, group_size=2, mesh_axes=fsdp
  %g1 = f32[8,16] all_gather_done(%g1.start, %w1)
  %h1 = f32[8,16] add(%g1, %h0)
  %g2.start = f32[8,16] all_gather_start(%w2), dim=0, group_size=2, mesh_axes=fsdp
  %g2 = f32[8,16] all_gather_done(%g2.start, %w2)
  ROOT %h2 = f32[8,16] add(%g2, %h1)
}
)";

TEST(MemoryScheduler, RunsInstructionsMadeFromArgumentsRightBeforeTheirFirstReader) {
  auto m = parse(kOnDemand);
  const ir::Computation& c = *m->entry();
  BufferModel model(c);
  Schedule listed = list_schedule(c, model);
  expect_topological(c, listed);
  for (const char* g : {"g0", "g1", "g2"}) {
    const std::string start = std::string(g) + ".start";
    EXPECT_GT(position(listed, start.c_str()), position(listed, "x")) << g;
  }
  EXPECT_EQ(position(listed, "g1.start") + 2, position(listed, "h1"));
  EXPECT_EQ(position(listed, "g2.start") + 2, position(listed, "h2"));
  // At the peak: the gathered table and its sum (made from the table alone, so on demand
  // too); later one gathered weight, a layer's input and output at a time.
  EXPECT_EQ(peak_live_bytes(model, listed), 128 * 16 * 4 + 16 * 4);
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
