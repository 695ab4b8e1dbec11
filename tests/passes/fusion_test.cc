// fusion: IR text in, IR text out (pass_testing.h checks the printed result, verification,
// the text round trip, equal interpreter outputs and the fixed point). These cases pin down
// mapped reads: transposes, broadcasts, slices and pads of any rank inside loop fusions.
#include "kiln/passes/fusion.h"

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

// A transpose read only by the group and a bias-like broadcast join the loop fusion as loads
// at other indices: neither [2,3] copy is written.
TEST(Fusion, FusesTransposesAndBroadcastsAsMappedReads) {
  FusionPass pass;
  check_pass(pass, R"(module @mapped

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %b = f32[2] parameter(), index=1
  %c = f32[2,3] parameter(), index=2
  %t = f32[2,3] transpose(%x), perm={1,0}
  %bb = f32[2,3] broadcast(%b), dims={0}
  %m = f32[2,3] mul(%t, %bb)
  ROOT %e = f32[2,3] add(%m, %c)
}
)", R"(module @mapped

computation @fused.0 {
  %parameter.1 = f32[3,2] parameter(), index=0
  %transpose.2 = f32[2,3] transpose(%parameter.1), perm={1,0}
  %parameter.3 = f32[2] parameter(), index=1
  %broadcast.4 = f32[2,3] broadcast(%parameter.3), dims={0}
  %mul.5 = f32[2,3] mul(%transpose.2, %broadcast.4)
  %parameter.6 = f32[2,3] parameter(), index=2
  ROOT %add.7 = f32[2,3] add(%mul.5, %parameter.6)
}

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %b = f32[2] parameter(), index=1
  %c = f32[2,3] parameter(), index=2
  ROOT %fusion.8 = f32[2,3] fusion(%x, %b, %c), kind=loop, calls={@fused.0}
}
)", true);
}

// An integer iota over the loop dims joins as the loop index along its dim, copied like a
// scalar broadcast (it stays while another op reads it); one over other dims does not.
TEST(Fusion, AnIotaOverTheLoopDimsIsTheLoopIndex) {
  FusionPass pass;
  check_pass(pass, R"(module @iota

ENTRY computation @main {
  %i = s32[2,3] parameter(), index=0
  %io = s32[2,3] iota(), dim=1
  %hit = pred[2,3] compare(%io, %i), direction=eq
  %x = f32[2,3] parameter(), index=1
  %zero = f32[] constant(0)
  %z = f32[2,3] broadcast(%zero), dims={}
  %s = f32[2,3] select(%hit, %x, %z)
  %small = s32[3] iota(), dim=0
  ROOT %out = (f32[2,3], s32[2,3], s32[3]) tuple(%s, %io, %small)
}
)", R"(module @iota

computation @fused.0 {
  %iota.1 = s32[2,3] iota(), dim=1
  %parameter.2 = s32[2,3] parameter(), index=0
  %compare.3 = pred[2,3] compare(%iota.1, %parameter.2), direction=eq
  %parameter.4 = f32[] parameter(), index=1
  %broadcast.5 = f32[2,3] broadcast(%parameter.4), dims={}
  %parameter.6 = f32[2,3] parameter(), index=2
  ROOT %select.7 = f32[2,3] select(%compare.3, %parameter.6, %broadcast.5)
}

ENTRY computation @main {
  %i = s32[2,3] parameter(), index=0
  %io = s32[2,3] iota(), dim=1
  %x = f32[2,3] parameter(), index=1
  %zero = f32[] constant(0)
  %small = s32[3] iota(), dim=0
  %fusion.8 = f32[2,3] fusion(%i, %zero, %x), kind=loop, calls={@fused.0}
  ROOT %out = (f32[2,3], s32[2,3], s32[3]) tuple(%fusion.8, %io, %small)
}
)", true);
}

// RoPE's rotation of halves: both slices are copied into both groups that read them (each
// reads its window of %x at an offset), so neither half is written. The strided slice is
// also read by the concatenate, which is not fused: it is written anyway, and the negation's
// group reads it whole.
TEST(Fusion, SlicesAreCopiedIntoEveryGroupThatReadsThem) {
  FusionPass pass;
  check_pass(pass, R"(module @halves

ENTRY computation @main {
  %x = f32[2,4] parameter(), index=0
  %cos = f32[2,2] parameter(), index=1
  %sin = f32[2,2] parameter(), index=2
  %a = f32[2,2] slice(%x), limit={2,2}, start={0,0}
  %b = f32[2,2] slice(%x), limit={2,4}, start={0,2}
  %ac = f32[2,2] mul(%a, %cos)
  %bs = f32[2,2] mul(%b, %sin)
  %r1 = f32[2,2] sub(%ac, %bs)
  %bc = f32[2,2] mul(%b, %cos)
  %as = f32[2,2] mul(%a, %sin)
  %r2 = f32[2,2] add(%bc, %as)
  %odd = f32[2,2] slice(%x), limit={2,4}, start={0,1}, strides={1,2}
  %n = f32[2,2] neg(%odd)
  %cat = f32[2,4] concatenate(%odd, %n), dim=1
  ROOT %out = (f32[2,2], f32[2,2], f32[2,4]) tuple(%r1, %r2, %cat)
}
)", R"(module @halves

computation @fused.0 {
  %parameter.1 = f32[2,2] parameter(), index=0
  ROOT %neg.2 = f32[2,2] neg(%parameter.1)
}

computation @fused.4 {
  %parameter.5 = f32[2,4] parameter(), index=0
  %slice.6 = f32[2,2] slice(%parameter.5), limit={2,2}, start={0,0}
  %slice.7 = f32[2,2] slice(%parameter.5), limit={2,4}, start={0,2}
  %parameter.8 = f32[2,2] parameter(), index=1
  %mul.9 = f32[2,2] mul(%slice.7, %parameter.8)
  %parameter.10 = f32[2,2] parameter(), index=2
  %mul.11 = f32[2,2] mul(%slice.6, %parameter.10)
  ROOT %add.12 = f32[2,2] add(%mul.9, %mul.11)
}

computation @fused.14 {
  %parameter.15 = f32[2,4] parameter(), index=0
  %slice.16 = f32[2,2] slice(%parameter.15), limit={2,2}, start={0,0}
  %slice.17 = f32[2,2] slice(%parameter.15), limit={2,4}, start={0,2}
  %parameter.18 = f32[2,2] parameter(), index=1
  %mul.19 = f32[2,2] mul(%slice.16, %parameter.18)
  %parameter.20 = f32[2,2] parameter(), index=2
  %mul.21 = f32[2,2] mul(%slice.17, %parameter.20)
  ROOT %sub.22 = f32[2,2] sub(%mul.19, %mul.21)
}

ENTRY computation @main {
  %x = f32[2,4] parameter(), index=0
  %cos = f32[2,2] parameter(), index=1
  %sin = f32[2,2] parameter(), index=2
  %odd = f32[2,2] slice(%x), limit={2,4}, start={0,1}, strides={1,2}
  %fusion.3 = f32[2,2] fusion(%odd), kind=loop, calls={@fused.0}
  %cat = f32[2,4] concatenate(%odd, %fusion.3), dim=1
  %fusion.23 = f32[2,2] fusion(%x, %cos, %sin), kind=loop, calls={@fused.14}
  %fusion.13 = f32[2,2] fusion(%x, %cos, %sin), kind=loop, calls={@fused.4}
  ROOT %out = (f32[2,2], f32[2,2], f32[2,4]) tuple(%fusion.23, %fusion.13, %cat)
}
)", true);
}

// Gradient clipping of a replicated parameter's slice of a combined all-reduce: the sum of
// squares is an input fusion, which takes no mapped read, so the slice is written anyway;
// the scaling's group then reads it whole too (and multi-output fusion may merge it into a
// reader of the slice).
TEST(Fusion, ASliceThatAnInputFusionReadsStaysAKernel) {
  FusionPass pass;
  check_pass(pass, R"(module @clip

ENTRY computation @main {
  %all = f32[12] parameter(), index=0
  %scale = f32[] parameter(), index=1
  %g = f32[4] slice(%all), limit={8}, start={4}
  %sq = f32[4] mul(%g, %g)
  %norm = f32[] reduce_sum(%sq), dims={0}
  %s = f32[4] broadcast(%scale), dims={}
  %clipped = f32[4] mul(%g, %s)
  ROOT %out = (f32[], f32[4]) tuple(%norm, %clipped)
}
)", R"(module @clip

computation @fused.0 {
  %parameter.1 = f32[] parameter(), index=0
  %broadcast.2 = f32[4] broadcast(%parameter.1), dims={}
  %parameter.3 = f32[4] parameter(), index=1
  ROOT %mul.4 = f32[4] mul(%parameter.3, %broadcast.2)
}

computation @fused.6 {
  %parameter.7 = f32[4] parameter(), index=0
  %mul.8 = f32[4] mul(%parameter.7, %parameter.7)
  ROOT %reduce_sum.9 = f32[] reduce_sum(%mul.8), dims={0}
}

ENTRY computation @main {
  %all = f32[12] parameter(), index=0
  %scale = f32[] parameter(), index=1
  %g = f32[4] slice(%all), limit={8}, start={4}
  %fusion.10 = f32[] fusion(%g), kind=input, calls={@fused.6}
  %fusion.5 = f32[4] fusion(%scale, %g), kind=loop, calls={@fused.0}
  ROOT %out = (f32[], f32[4]) tuple(%fusion.10, %fusion.5)
}
)", true);
}

// RoPE's backward: the gradients of the two halves are padded back to the full width and
// added. Both pads join the sum's group as windows of their operands (outside a window the
// value is the pad's), so neither full-width array is written. A pad with interior padding
// stays a kernel.
TEST(Fusion, PadsAreReadAsWindowsOfTheirOperands) {
  FusionPass pass;
  check_pass(pass, R"(module @pads

ENTRY computation @main {
  %ga = f32[2,2] parameter(), index=0
  %gb = f32[2,2] parameter(), index=1
  %zero = f32[] constant(0)
  %pa = f32[2,4] pad(%ga, %zero), high={0,0}, low={0,2}
  %pb = f32[2,4] pad(%gb, %zero), high={0,2}, low={0,0}
  %sum = f32[2,4] add(%pa, %pb)
  %gaps = f32[2,3] pad(%ga, %zero), high={0,0}, interior={0,1}, low={0,0}
  %e = f32[2,3] exp(%gaps)
  ROOT %out = (f32[2,4], f32[2,3]) tuple(%sum, %e)
}
)", R"(module @pads

computation @fused.0 {
  %parameter.1 = f32[2,3] parameter(), index=0
  ROOT %exp.2 = f32[2,3] exp(%parameter.1)
}

computation @fused.4 {
  %parameter.5 = f32[2,2] parameter(), index=0
  %parameter.6 = f32[] parameter(), index=1
  %pad.7 = f32[2,4] pad(%parameter.5, %parameter.6), high={0,0}, low={0,2}
  %parameter.8 = f32[2,2] parameter(), index=2
  %pad.9 = f32[2,4] pad(%parameter.8, %parameter.6), high={0,2}, low={0,0}
  ROOT %add.10 = f32[2,4] add(%pad.7, %pad.9)
}

ENTRY computation @main {
  %ga = f32[2,2] parameter(), index=0
  %gb = f32[2,2] parameter(), index=1
  %zero = f32[] constant(0)
  %gaps = f32[2,3] pad(%ga, %zero), high={0,0}, interior={0,1}, low={0,0}
  %fusion.11 = f32[2,4] fusion(%ga, %zero, %gb), kind=loop, calls={@fused.4}
  %fusion.3 = f32[2,3] fusion(%gaps), kind=loop, calls={@fused.0}
  ROOT %out = (f32[2,4], f32[2,3]) tuple(%fusion.11, %fusion.3)
}
)", true);
}

// The transpose is also a matmul operand, so its copy is written anyway: it stays outside
// (a strided read would save nothing). The broadcast is copied into the group and stays for
// the matmul.
TEST(Fusion, LeavesATransposeThatOthersReadOutside) {
  FusionPass pass;
  check_pass(pass, R"(module @shared

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %b = f32[3] parameter(), index=1
  %t = f32[2,3] transpose(%x), perm={1,0}
  %bb = f32[2,3] broadcast(%b), dims={1}
  %m = f32[2,3] mul(%t, %bb)
  %d = f32[2,2] dot_general(%t, %bb), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}
  ROOT %r = (f32[2,3], f32[2,2]) tuple(%m, %d)
}
)", R"(module @shared

computation @fused.0 {
  %parameter.1 = f32[3] parameter(), index=0
  %broadcast.2 = f32[2,3] broadcast(%parameter.1), dims={1}
  %parameter.3 = f32[2,3] parameter(), index=1
  ROOT %mul.4 = f32[2,3] mul(%parameter.3, %broadcast.2)
}

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %b = f32[3] parameter(), index=1
  %t = f32[2,3] transpose(%x), perm={1,0}
  %bb = f32[2,3] broadcast(%b), dims={1}
  %d = f32[2,2] dot_general(%t, %bb), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}
  %fusion.5 = f32[2,3] fusion(%b, %t), kind=loop, calls={@fused.0}
  ROOT %r = (f32[2,3], f32[2,2]) tuple(%fusion.5, %d)
}
)", true);
}

// An input fusion reads its operands at the loop index only: the transpose is not fused into
// the reduction's group; an elementwise value that a transpose reads is not fused into the
// transpose's group (it would be needed at two indices).
TEST(Fusion, KeepsMappedReadsOutOfReductionsAndOffComputedValues) {
  FusionPass pass;
  check_pass(pass, R"(module @refused

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %y = f32[2,3] parameter(), index=1
  %t = f32[2,3] transpose(%x), perm={1,0}
  %m = f32[2,3] mul(%t, %y)
  %s = f32[2] reduce_sum(%m), dims={1}
  %e = f32[2,3] exp(%y)
  %et = f32[3,2] transpose(%e), perm={1,0}
  %a = f32[3,2] add(%et, %x)
  ROOT %r = (f32[2], f32[3,2]) tuple(%s, %a)
}
)", R"(module @refused

computation @fused.0 {
  %parameter.1 = f32[2,3] parameter(), index=0
  %transpose.2 = f32[3,2] transpose(%parameter.1), perm={1,0}
  %parameter.3 = f32[3,2] parameter(), index=1
  ROOT %add.4 = f32[3,2] add(%transpose.2, %parameter.3)
}

computation @fused.6 {
  %parameter.7 = f32[2,3] parameter(), index=0
  ROOT %exp.8 = f32[2,3] exp(%parameter.7)
}

computation @fused.10 {
  %parameter.11 = f32[2,3] parameter(), index=0
  %parameter.12 = f32[2,3] parameter(), index=1
  %mul.13 = f32[2,3] mul(%parameter.11, %parameter.12)
  ROOT %reduce_sum.14 = f32[2] reduce_sum(%mul.13), dims={1}
}

ENTRY computation @main {
  %x = f32[3,2] parameter(), index=0
  %y = f32[2,3] parameter(), index=1
  %t = f32[2,3] transpose(%x), perm={1,0}
  %fusion.15 = f32[2] fusion(%t, %y), kind=input, calls={@fused.10}
  %fusion.9 = f32[2,3] fusion(%y), kind=loop, calls={@fused.6}
  %fusion.5 = f32[3,2] fusion(%fusion.9, %x), kind=loop, calls={@fused.0}
  ROOT %r = (f32[2], f32[3,2]) tuple(%fusion.15, %fusion.5)
}
)", true);
}

// Gradient accumulation: micro-batch m's instructions carry scheduling stage m + 1 and the
// optimizer none. The sum of the micro-batches' gradients is a chain of adds, one per stage;
// fused whole it would run after the last micro-batch and keep every micro-batch's gradient
// alive until then. Each add stays in its own stage's kernel; the last one may join the
// unstaged update.
TEST(Fusion, KeepsEachSchedulingStageInItsOwnKernel) {
  FusionPass pass;
  check_pass(pass, R"(module @accumulate

ENTRY computation @main {
  %g0 = f32[4] parameter(), index=0
  %g1 = f32[4] parameter(), index=1
  %g2 = f32[4] parameter(), index=2
  %w = f32[4] parameter(), index=3
  %s1 = f32[4] add(%g0, %g1), stage=2
  %s2 = f32[4] add(%s1, %g2), stage=3
  %n = f32[4] neg(%s2)
  ROOT %u = f32[4] add(%w, %n)
}
)", R"(module @accumulate

computation @fused.0 {
  %parameter.1 = f32[4] parameter(), index=0
  %parameter.2 = f32[4] parameter(), index=1
  %add.3 = f32[4] add(%parameter.1, %parameter.2), stage=3
  %neg.4 = f32[4] neg(%add.3)
  %parameter.5 = f32[4] parameter(), index=2
  ROOT %add.6 = f32[4] add(%parameter.5, %neg.4)
}

computation @fused.8 {
  %parameter.9 = f32[4] parameter(), index=0
  %parameter.10 = f32[4] parameter(), index=1
  ROOT %add.11 = f32[4] add(%parameter.9, %parameter.10), stage=2
}

ENTRY computation @main {
  %g0 = f32[4] parameter(), index=0
  %g1 = f32[4] parameter(), index=1
  %g2 = f32[4] parameter(), index=2
  %w = f32[4] parameter(), index=3
  %fusion.12 = f32[4] fusion(%g0, %g1), kind=loop, calls={@fused.8}, stage=2
  ROOT %fusion.7 = f32[4] fusion(%fusion.12, %g2, %w), kind=loop, calls={@fused.0}
}
)", true);
}

}  // namespace
}  // namespace kiln::passes

namespace kiln::passes {
namespace {

// Five products summed in a chain (a weight's partial gradients, one per loss tile): fused
// whole, one kernel would read all five, each alive until it runs. No fusion reads more than
// three products; the sums are the same.
TEST(Fusion, AChainOfAddsOverManyProductsReadsAtMostThreePerKernel) {
  const char* text = R"(module @chain

ENTRY computation @main {
  %a = f32[4,4] parameter(), index=0
  %b = f32[4,4] parameter(), index=1
  %p0 = f32[4,4] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %p1 = f32[4,4] dot_general(%b, %a), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %p2 = f32[4,4] dot_general(%a, %a), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %p3 = f32[4,4] dot_general(%b, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %p4 = f32[4,4] dot_general(%a, %b), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %s1 = f32[4,4] add(%p0, %p1)
  %s2 = f32[4,4] add(%s1, %p2)
  %s3 = f32[4,4] add(%s2, %p3)
  ROOT %s4 = f32[4,4] add(%s3, %p4)
}
)";
  std::unique_ptr<ir::Module> module = testing::parse_or_die(text);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> original = module->clone();
  FusionPass pass;
  ASSERT_TRUE(pass.run(*module).ok());
  int fusions = 0;
  for (const auto& i : module->entry()->instructions()) {
    if (i->opcode() != ir::Opcode::kFusion) continue;
    ++fusions;
    int products = 0;
    for (const ir::Instr* o : i->operands()) products += o->opcode() == ir::Opcode::kDotGeneral ? 1 : 0;
    EXPECT_LE(products, 3) << i->to_string();
  }
  EXPECT_EQ(fusions, 2);  // (p2 + (p0 + p1)) then (p4 + (p3 + that))
  testing::expect_same_outputs(*original, *module);
}

}  // namespace
}  // namespace kiln::passes
