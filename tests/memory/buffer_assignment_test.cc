// Buffer assignment: IR text in, placements out. The invariant every case checks: two
// buffers whose arena storage overlaps never have overlapping lifetimes, except an
// in-place pair (the writer takes over its operand's storage at the operand's last read).
#include <gtest/gtest.h>

#include "kiln/ir/parser.h"
#include "kiln/memory/buffer_assignment.h"

namespace kiln::memory {
namespace {

using sched::BufferModel;

struct Planned {
  std::unique_ptr<ir::Module> module;
  std::unique_ptr<BufferModel> model;
  BufferAssignment assignment;

  const ir::Instr* instr(const std::string& id) const {
    for (const auto& i : module->entry()->instructions()) {
      if (i->id() == id) return i.get();
    }
    ADD_FAILURE() << "no %" << id;
    return nullptr;
  }
  const Slot& slot(const std::string& id) const { return assignment.slots.at(model->leaves(instr(id)).at(0)); }
  int buffer(const std::string& id) const { return model->leaves(instr(id)).at(0); }
};

Planned plan(const char* text, AssignmentOptions options = {}, bool program_order = true) {
  Planned p;
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  p.module = std::move(*m);
  const ir::Computation& c = *p.module->entry();
  p.model = std::make_unique<BufferModel>(c);
  sched::Schedule s = program_order ? sched::program_order(c) : sched::choose_schedule(c, *p.model).schedule;
  auto a = assign_buffers(c, *p.model, std::move(s), options);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  p.assignment = std::move(*a);
  return p;
}

void expect_no_conflicts(const Planned& p) {
  const auto& slots = p.assignment.slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].placement != Placement::kArena) continue;
    const int64_t bi = p.model->buffer(static_cast<int>(i)).bytes;
    EXPECT_LE(slots[i].offset + bi, p.assignment.arena_bytes);
    EXPECT_EQ(slots[i].offset % 64, 0);
    for (size_t j = i + 1; j < slots.size(); ++j) {
      if (slots[j].placement != Placement::kArena) continue;
      const int64_t bj = p.model->buffer(static_cast<int>(j)).bytes;
      bool space = slots[i].offset < slots[j].offset + bj && slots[j].offset < slots[i].offset + bi;
      bool time = slots[i].start <= slots[j].end && slots[j].start <= slots[i].end;
      if (!space || !time) continue;
      bool in_place = (slots[j].in_place_of == static_cast<int>(i) && slots[j].start == slots[i].end) ||
                      (slots[i].in_place_of == static_cast<int>(j) && slots[i].start == slots[j].end);
      EXPECT_TRUE(in_place) << "buffers " << i << " and " << j << " overlap in storage and lifetime\n"
                            << p.assignment.to_string(*p.model);
    }
  }
}

// exp then a chain of loop fusions, each the last reader of its operand.
constexpr const char* kChain = R"(module @chain

computation @f.scale {
  %s_p = f32[256] parameter(), index=0
  %s_s = f32[] parameter(), index=1
  %s_b = f32[256] broadcast(%s_s), dims={}
  ROOT %s_m = f32[256] mul(%s_p, %s_b)
}

computation @f.tanh {
  %t_p = f32[256] parameter(), index=0
  ROOT %t_t = f32[256] tanh(%t_p)
}

ENTRY computation @main {
  %x = f32[256] parameter(), index=0
  %s = f32[] parameter(), index=1
  %a = f32[256] exp(%x)
  %b = f32[256] fusion(%a, %s), kind=loop, calls={@f.scale}
  %c = f32[256] fusion(%b), kind=loop, calls={@f.tanh}
  ROOT %r = f32[] reduce_sum(%c), dims={0}
}
)";

TEST(BufferAssignment, LoopFusionWritesOverTheOperandItReadsLast) {
  Planned p = plan(kChain);
  expect_no_conflicts(p);
  EXPECT_EQ(p.slot("b").in_place_of, p.buffer("a"));
  EXPECT_EQ(p.slot("c").in_place_of, p.buffer("b"));
  EXPECT_EQ(p.slot("a").offset, p.slot("b").offset);
  EXPECT_EQ(p.slot("b").offset, p.slot("c").offset);
  EXPECT_EQ(p.assignment.in_place_reuses, 2);
  EXPECT_EQ(p.assignment.arena_bytes, 256 * 4);  // the whole chain in one buffer
  EXPECT_EQ(p.slot("r").placement, Placement::kOutput);
  EXPECT_EQ(p.slot("x").placement, Placement::kArgument);
  EXPECT_EQ(p.assignment.output_bytes, 4);
}

TEST(BufferAssignment, InPlaceRefusedWhileTheOperandIsStillRead) {
  // %a is read again by %d after %b: %b must not overwrite it.
  Planned p = plan(R"(module @still_read

computation @f.tanh {
  %t_p = f32[256] parameter(), index=0
  ROOT %t_t = f32[256] tanh(%t_p)
}

ENTRY computation @main {
  %x = f32[256] parameter(), index=0
  %a = f32[256] exp(%x)
  %b = f32[256] fusion(%a), kind=loop, calls={@f.tanh}
  %d = f32[256] add(%a, %b)
  ROOT %r = f32[] reduce_sum(%d), dims={0}
}
)");
  expect_no_conflicts(p);
  EXPECT_EQ(p.slot("b").in_place_of, -1);
  EXPECT_NE(p.slot("a").offset, p.slot("b").offset);
  EXPECT_EQ(p.assignment.in_place_reuses, 0);
  // %d is not a fusion: it never writes in place, but it may reuse %a's or %b's storage
  // only after both die, which is never before it is written.
  EXPECT_NE(p.slot("d").offset, p.slot("a").offset);
  EXPECT_NE(p.slot("d").offset, p.slot("b").offset);
}

TEST(BufferAssignment, InPlaceRefusedForReductionsAndOtherLayouts) {
  auto m = ir::parse_module(R"(module @kinds

computation @f.sum {
  %r_p = f32[4,8] parameter(), index=0
  %r_e = f32[4,8] exp(%r_p)
  ROOT %r_r = f32[4] reduce_sum(%r_e), dims={1}
}

computation @f.scale {
  %s_p = f32[4,8] parameter(), index=0
  %s_s = f32[] parameter(), index=1
  %s_b = f32[4,8] broadcast(%s_s), dims={}
  ROOT %s_m = f32[4,8] mul(%s_p, %s_b)
}

ENTRY computation @main {
  %x = f32[4,8] parameter(), index=0
  %s = f32[] parameter(), index=1
  %r = f32[4] fusion(%x), kind=input, calls={@f.sum}
  %m = f32[4,8] fusion(%x, %s), kind=loop, calls={@f.scale}
  ROOT %out = (f32[4], f32[4,8]) tuple(%r, %m)
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ir::Computation& c = *(*m)->entry();
  const ir::Instr* r = c.instructions()[2].get();
  const ir::Instr* mul = c.instructions()[3].get();
  EXPECT_FALSE(can_write_in_place(*r, 0));   // a reduction reads many elements per output
  EXPECT_TRUE(can_write_in_place(*mul, 0));  // element i read, then element i written
  EXPECT_FALSE(can_write_in_place(*mul, 1)); // the scalar is broadcast: different size
}

TEST(BufferAssignment, NonOverlappingLifetimesShareStorage) {
  // %a dies at %ra, so %b (written after) can take its place; %c overlaps %b.
  Planned p = plan(R"(module @reuse

ENTRY computation @main {
  %x = f32[1024] parameter(), index=0
  %a = f32[1024] exp(%x)
  %ra = f32[] reduce_sum(%a), dims={0}
  %b = f32[1024] tanh(%x)
  %c = f32[1024] neg(%b)
  %d = f32[1024] add(%b, %c)
  %rd = f32[] reduce_sum(%d), dims={0}
  ROOT %out = (f32[], f32[]) tuple(%ra, %rd)
}
)");
  expect_no_conflicts(p);
  EXPECT_EQ(p.slot("a").offset, p.slot("b").offset);
  EXPECT_EQ(p.assignment.arena_bytes, 3 * 1024 * 4);  // %b, %c and %d live at once
  EXPECT_EQ(p.assignment.max_live_arena_bytes, 3 * 1024 * 4);
}

// A training-step shape: the new parameter and moment replace the old ones.
constexpr const char* kUpdate = R"(module @update

computation @f.moment {
  %m_m = f32[64,64] parameter(), index=0
  %m_g = f32[64,64] parameter(), index=1
  %m_k = f32[] constant(0.9)
  %m_kb = f32[64,64] broadcast(%m_k), dims={}
  %m_a = f32[64,64] mul(%m_m, %m_kb)
  ROOT %m_n = f32[64,64] add(%m_a, %m_g)
}

computation @f.step {
  %s_w = f32[64,64] parameter(), index=0
  %s_m = f32[64,64] parameter(), index=1
  %s_k = f32[] constant(0.01)
  %s_kb = f32[64,64] broadcast(%s_k), dims={}
  %s_d = f32[64,64] mul(%s_m, %s_kb)
  ROOT %s_n = f32[64,64] sub(%s_w, %s_d)
}

ENTRY computation @main {
  %w = f32[64,64] parameter(), index=0
  %m = f32[64,64] parameter(), index=1
  %x = f32[64,64] parameter(), index=2
  %g = f32[64,64] mul(%w, %x)
  %m2 = f32[64,64] fusion(%m, %g), kind=loop, calls={@f.moment}
  %w2 = f32[64,64] fusion(%w, %m2), kind=loop, calls={@f.step}
  %loss = f32[] reduce_sum(%g), dims={0,1}
  ROOT %out = (f32[64,64], f32[64,64], f32[]) tuple(%w2, %m2, %loss)
}
)";

TEST(BufferAssignment, DonatedStateIsUpdatedInItsArgument) {
  AssignmentOptions options;
  options.donated = {{0, 0}, {1, 1}};
  Planned p = plan(kUpdate, options);
  expect_no_conflicts(p);
  EXPECT_EQ(p.slot("w2").placement, Placement::kDonated);
  EXPECT_EQ(p.slot("w2").argument, 0);
  EXPECT_EQ(p.slot("w2").in_place_of, p.buffer("w"));
  EXPECT_EQ(p.slot("m2").placement, Placement::kDonated);
  EXPECT_EQ(p.slot("m2").argument, 1);
  EXPECT_EQ(p.assignment.donated_in_place, 2);
  EXPECT_EQ(p.assignment.output_bytes, 4);  // only the loss has storage of its own
  // Without donation both state outputs need storage of their own.
  Planned kept = plan(kUpdate);
  EXPECT_EQ(kept.slot("w2").placement, Placement::kOutput);
  EXPECT_EQ(kept.assignment.output_bytes, 2 * 64 * 64 * 4 + 4);
}

TEST(BufferAssignment, DonationRefusedWhileTheArgumentIsStillRead) {
  // %w is read by %late after %w2 is written: writing %w2 into %w would change %late.
  AssignmentOptions options;
  options.donated = {{0, 0}};
  Planned p = plan(R"(module @late_read

computation @f.step {
  %s_w = f32[16] parameter(), index=0
  %s_g = f32[16] parameter(), index=1
  ROOT %s_n = f32[16] sub(%s_w, %s_g)
}

ENTRY computation @main {
  %w = f32[16] parameter(), index=0
  %g = f32[16] parameter(), index=1
  %w2 = f32[16] fusion(%w, %g), kind=loop, calls={@f.step}
  %late = f32[] reduce_sum(%w), dims={0}
  ROOT %out = (f32[16], f32[]) tuple(%w2, %late)
}
)",
                   options);
  EXPECT_EQ(p.slot("w2").placement, Placement::kOutput);
  EXPECT_EQ(p.assignment.donated_in_place, 0);
  EXPECT_EQ(p.assignment.donated_requested, 1);
}

TEST(BufferAssignment, ActivationsAreForwardValuesTheBackwardPassReads) {
  // %h (forward) is read by the gradient; %t is forward-only; %one.grad comes first in the
  // schedule the list scheduler would pick, but the boundary is in program order.
  Planned p = plan(R"(module @fwd_bwd

ENTRY computation @main {
  %x = f32[256] parameter(), index=0
  %h = f32[256] tanh(%x), name="layer.h"
  %t = f32[256] exp(%h), name="layer.t"
  %loss = f32[] reduce_sum(%t), dims={0}, name="loss"
  %one = f32[] constant(1), name="loss.grad"
  %ob = f32[256] broadcast(%one), dims={}, name="t.grad"
  %g = f32[256] mul(%ob, %h), name="h.grad"
  ROOT %out = (f32[], f32[256]) tuple(%loss, %g)
}
)",
                   {}, /*program_order=*/false);
  expect_no_conflicts(p);
  EXPECT_EQ(p.assignment.saved_activation_bytes, 256 * 4);
}

TEST(BufferAssignment, BadDonationIsAnError) {
  auto m = ir::parse_module(kUpdate);
  ASSERT_TRUE(m.ok());
  const ir::Computation& c = *(*m)->entry();
  BufferModel model(c);
  AssignmentOptions options;
  options.donated = {{7, 0}};
  auto a = assign_buffers(c, model, sched::program_order(c), options);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().to_string().find("donated output 7 out of range"), std::string::npos) << a.status().to_string();
}

TEST(BufferAssignment, TextNamesEveryBufferAndItsPlacement) {
  AssignmentOptions options;
  options.donated = {{0, 0}, {1, 1}};
  Planned p = plan(kUpdate, options);
  std::string text = p.assignment.to_string(*p.model);
  EXPECT_NE(text.find("%w2[0] f32[64,64] donated arg0"), std::string::npos) << text;
  EXPECT_NE(text.find("%g[0] f32[64,64] arena @0"), std::string::npos) << text;
  EXPECT_NE(text.find("donated outputs written in place 2 of 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::memory
