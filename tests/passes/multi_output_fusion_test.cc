// multi_output_fusion: IR text in, IR text out (pass_testing.h checks the printed result,
// verification, the text round trip, equal interpreter outputs and the fixed point).
#include "kiln/passes/multi_output_fusion.h"

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

// The AdamW shape: the new moments m and n are outputs and operands of the parameter update
// q, whose norm a reduction takes. One input fusion remains: the norm first (the consumer's
// output), then q, m and n, each computed once.
TEST(MultiOutputFusion, MergesProducersThatOthersAlsoRead) {
  MultiOutputFusionPass pass;
  check_pass(pass, R"(module @adamw

computation @fused.mu {
  %mu.b1 = f32[] parameter(), index=0
  %mu.mu = f32[4,8] parameter(), index=1
  %mu.g = f32[4,8] parameter(), index=2
  %mu.b1b = f32[4,8] broadcast(%mu.b1), dims={}
  %mu.a = f32[4,8] mul(%mu.mu, %mu.b1b)
  ROOT %mu.m = f32[4,8] add(%mu.a, %mu.g)
}

computation @fused.nu {
  %nu.nu = f32[4,8] parameter(), index=0
  %nu.g = f32[4,8] parameter(), index=1
  %nu.gg = f32[4,8] mul(%nu.g, %nu.g)
  ROOT %nu.n = f32[4,8] add(%nu.nu, %nu.gg)
}

computation @fused.p {
  %up.p = f32[4,8] parameter(), index=0
  %up.m = f32[4,8] parameter(), index=1
  %up.n = f32[4,8] parameter(), index=2
  %up.s = f32[4,8] sqrt(%up.n)
  %up.d = f32[4,8] div(%up.m, %up.s)
  ROOT %up.q = f32[4,8] sub(%up.p, %up.d)
}

computation @fused.norm {
  %norm.q = f32[4,8] parameter(), index=0
  %norm.qq = f32[4,8] mul(%norm.q, %norm.q)
  ROOT %norm.r = f32[] reduce_sum(%norm.qq), dims={0,1}
}

ENTRY computation @main {
  %p = f32[4,8] parameter(), index=0
  %mu = f32[4,8] parameter(), index=1
  %nu = f32[4,8] parameter(), index=2
  %g = f32[4,8] parameter(), index=3
  %b1 = f32[] parameter(), index=4
  %m = f32[4,8] fusion(%b1, %mu, %g), kind=loop, calls={@fused.mu}
  %n = f32[4,8] fusion(%nu, %g), kind=loop, calls={@fused.nu}
  %q = f32[4,8] fusion(%p, %m, %n), kind=loop, calls={@fused.p}
  %norm = f32[] fusion(%q), kind=input, calls={@fused.norm}
  ROOT %t = (f32[4,8], f32[4,8], f32[4,8], f32[]) tuple(%q, %m, %n, %norm)
}
)", R"(module @adamw

computation @fused.30 {
  %parameter.31 = f32[4,8] parameter(), index=0
  %parameter.32 = f32[4,8] parameter(), index=1
  %mul.33 = f32[4,8] mul(%parameter.32, %parameter.32)
  %add.34 = f32[4,8] add(%parameter.31, %mul.33)
  %parameter.35 = f32[] parameter(), index=2
  %parameter.36 = f32[4,8] parameter(), index=3
  %broadcast.37 = f32[4,8] broadcast(%parameter.35), dims={}
  %mul.38 = f32[4,8] mul(%parameter.36, %broadcast.37)
  %add.39 = f32[4,8] add(%mul.38, %parameter.32)
  %parameter.40 = f32[4,8] parameter(), index=4
  %sqrt.41 = f32[4,8] sqrt(%add.34)
  %div.42 = f32[4,8] div(%add.39, %sqrt.41)
  %sub.43 = f32[4,8] sub(%parameter.40, %div.42)
  %mul.44 = f32[4,8] mul(%sub.43, %sub.43)
  %reduce_sum.45 = f32[] reduce_sum(%mul.44), dims={0,1}
  ROOT %tuple.46 = (f32[], f32[4,8], f32[4,8], f32[4,8]) tuple(%reduce_sum.45, %sub.43, %add.39, %add.34)
}

ENTRY computation @main {
  %p = f32[4,8] parameter(), index=0
  %mu = f32[4,8] parameter(), index=1
  %nu = f32[4,8] parameter(), index=2
  %g = f32[4,8] parameter(), index=3
  %b1 = f32[] parameter(), index=4
  %fusion.47 = (f32[], f32[4,8], f32[4,8], f32[4,8]) fusion(%nu, %g, %b1, %mu, %p), kind=input, calls={@fused.30}
  %get_tuple_element.12 = f32[4,8] get_tuple_element(%fusion.47), index=1
  %get_tuple_element.29 = f32[4,8] get_tuple_element(%fusion.47), index=2
  %get_tuple_element.48 = f32[4,8] get_tuple_element(%fusion.47), index=3
  %get_tuple_element.11 = f32[] get_tuple_element(%fusion.47), index=0
  ROOT %t = (f32[4,8], f32[4,8], f32[4,8], f32[]) tuple(%get_tuple_element.12, %get_tuple_element.29, %get_tuple_element.48, %get_tuple_element.11)
}
)", true);
}

// The bf16 weight copy: the update %q feeds both the copy %c (a loop fusion: it absorbs %q
// first, becoming the multi-output loop fusion (c, q)) and the norm; the norm then absorbs that
// whole multi-output fusion. One input fusion remains: the norm, the copy and q, each computed
// once, as in the float32 step.
TEST(MultiOutputFusion, MergesAMultiOutputProducerIntoAReduction) {
  MultiOutputFusionPass pass;
  check_pass(pass, R"(module @adamw_copy

computation @fused.p {
  %up.p = f32[4,8] parameter(), index=0
  %up.m = f32[4,8] parameter(), index=1
  %up.n = f32[4,8] parameter(), index=2
  %up.s = f32[4,8] sqrt(%up.n)
  %up.d = f32[4,8] div(%up.m, %up.s)
  ROOT %up.q = f32[4,8] sub(%up.p, %up.d)
}

computation @fused.norm {
  %norm.q = f32[4,8] parameter(), index=0
  %norm.qq = f32[4,8] mul(%norm.q, %norm.q)
  ROOT %norm.r = f32[] reduce_sum(%norm.qq), dims={0,1}
}

computation @fused.copy {
  %copy.q = f32[4,8] parameter(), index=0
  ROOT %copy.c = bf16[4,8] convert(%copy.q)
}

ENTRY computation @main {
  %p = f32[4,8] parameter(), index=0
  %m = f32[4,8] parameter(), index=1
  %n = f32[4,8] parameter(), index=2
  %q = f32[4,8] fusion(%p, %m, %n), kind=loop, calls={@fused.p}
  %norm = f32[] fusion(%q), kind=input, calls={@fused.norm}
  %c = bf16[4,8] fusion(%q), kind=loop, calls={@fused.copy}
  ROOT %t = (f32[4,8], bf16[4,8], f32[]) tuple(%q, %c, %norm)
}
)", R"(module @adamw_copy

computation @fused.12 {
  %parameter.13 = f32[4,8] parameter(), index=0
  %parameter.14 = f32[4,8] parameter(), index=1
  %parameter.15 = f32[4,8] parameter(), index=2
  %sqrt.16 = f32[4,8] sqrt(%parameter.15)
  %div.17 = f32[4,8] div(%parameter.14, %sqrt.16)
  %sub.18 = f32[4,8] sub(%parameter.13, %div.17)
  %convert.19 = bf16[4,8] convert(%sub.18)
  %mul.20 = f32[4,8] mul(%sub.18, %sub.18)
  %reduce_sum.21 = f32[] reduce_sum(%mul.20), dims={0,1}
  ROOT %tuple.22 = (f32[], bf16[4,8], f32[4,8]) tuple(%reduce_sum.21, %convert.19, %sub.18)
}

ENTRY computation @main {
  %p = f32[4,8] parameter(), index=0
  %m = f32[4,8] parameter(), index=1
  %n = f32[4,8] parameter(), index=2
  %fusion.23 = (f32[], bf16[4,8], f32[4,8]) fusion(%p, %m, %n), kind=input, calls={@fused.12}
  %get_tuple_element.26 = f32[4,8] get_tuple_element(%fusion.23), index=2
  %get_tuple_element.25 = bf16[4,8] get_tuple_element(%fusion.23), index=1
  %get_tuple_element.24 = f32[] get_tuple_element(%fusion.23), index=0
  ROOT %t = (f32[4,8], bf16[4,8], f32[]) tuple(%get_tuple_element.26, %get_tuple_element.25, %get_tuple_element.24)
}
)", true);
}

// %u reads %a and feeds %c: merging %a into %c would make the fusion depend on itself.
TEST(MultiOutputFusion, RefusesWhenAnotherReaderLeadsToTheConsumer) {
  const char* text = R"(module @cycle

computation @fused.a {
  %a.x = f32[4] parameter(), index=0
  ROOT %a.e = f32[4] exp(%a.x)
}

computation @fused.c {
  %c.a = f32[4] parameter(), index=0
  %c.u = f32[4] parameter(), index=1
  ROOT %c.s = f32[4] add(%c.a, %c.u)
}

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %w = f32[4,4] parameter(), index=1
  %a = f32[4] fusion(%x), kind=loop, calls={@fused.a}
  %u = f32[4] dot_general(%w, %a), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  ROOT %c = f32[4] fusion(%a, %u), kind=loop, calls={@fused.c}
}
)";
  MultiOutputFusionPass pass;
  check_pass(pass, text, text, false);
}

// The consumer %c reads element 0 of the multi-output fusion %ab; element 1 feeds %u, which
// feeds %c: merging %ab into %c would make the fusion depend on itself through the sibling.
TEST(MultiOutputFusion, RefusesWhenASiblingElementsReaderLeadsToTheConsumer) {
  const char* text = R"(module @sibling_cycle

computation @fused.ab {
  %ab.x = f32[4] parameter(), index=0
  %ab.e = f32[4] exp(%ab.x)
  %ab.n = f32[4] neg(%ab.x)
  ROOT %ab.t = (f32[4], f32[4]) tuple(%ab.e, %ab.n)
}

computation @fused.c {
  %c.a = f32[4] parameter(), index=0
  %c.u = f32[4] parameter(), index=1
  ROOT %c.s = f32[4] add(%c.a, %c.u)
}

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %w = f32[4,4] parameter(), index=1
  %ab = (f32[4], f32[4]) fusion(%x), kind=loop, calls={@fused.ab}
  %a = f32[4] get_tuple_element(%ab), index=0
  %b = f32[4] get_tuple_element(%ab), index=1
  %u = f32[4] dot_general(%w, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  ROOT %c = f32[4] fusion(%a, %u), kind=loop, calls={@fused.c}
}
)";
  MultiOutputFusionPass pass;
  check_pass(pass, text, text, false);
}

// A scalar producer read by a loop over [4,8] runs in a loop of its own.
TEST(MultiOutputFusion, RefusesOtherDims) {
  const char* text = R"(module @dims

computation @fused.s {
  %s.x = f32[] parameter(), index=0
  ROOT %s.e = f32[] exp(%s.x)
}

computation @fused.c {
  %c.v = f32[4,8] parameter(), index=0
  %c.s = f32[] parameter(), index=1
  %c.b = f32[4,8] broadcast(%c.s), dims={}
  ROOT %c.m = f32[4,8] mul(%c.v, %c.b)
}

ENTRY computation @main {
  %x = f32[] parameter(), index=0
  %v = f32[4,8] parameter(), index=1
  %s = f32[] fusion(%x), kind=loop, calls={@fused.s}
  %c = f32[4,8] fusion(%v, %s), kind=loop, calls={@fused.c}
  ROOT %t = (f32[4,8], f32[]) tuple(%c, %s)
}
)";
  MultiOutputFusionPass pass;
  check_pass(pass, text, text, false);
}

// The consumer recomputes a layer's value for the backward pass (RematPass's "*.remat") from
// the forward's %p, which the forward also reads: merged, the recomputation would run in
// the forward kernel and its result would live until the backward pass.
TEST(MultiOutputFusion, RefusesToMergeAForwardProducerIntoRecomputation) {
  const char* text = R"(module @remat

computation @fused.p {
  %p.x = f32[4,8] parameter(), index=0
  ROOT %p.e = bf16[4,8] convert(%p.x), name="embed"
}

computation @fused.c {
  %c.v = bf16[4,8] parameter(), index=0
  %c.f = f32[4,8] convert(%c.v), name="layers.0.remat"
  ROOT %c.m = f32[4,8] mul(%c.f, %c.f), name="layers.0.remat"
}

ENTRY computation @main {
  %x = f32[4,8] parameter(), index=0
  %p = bf16[4,8] fusion(%x), kind=loop, calls={@fused.p}, name="embed"
  %c = f32[4,8] fusion(%p), kind=loop, calls={@fused.c}, name="layers.0.remat"
  %n = bf16[4,8] neg(%p), name="layers.0"
  ROOT %t = (f32[4,8], bf16[4,8]) tuple(%c, %n)
}
)";
  MultiOutputFusionPass pass;
  check_pass(pass, text, text, false);
}

// The consumer reads the producer through a transpose (a load at another index): merged, the
// transpose would read a value computed inside the loop, which only a parameter can be.
TEST(MultiOutputFusion, RefusesAProducerTheConsumerReadsThroughATranspose) {
  const char* text = R"(module @mapped

computation @fused.a {
  %a.x = f32[4,4] parameter(), index=0
  ROOT %a.e = f32[4,4] exp(%a.x)
}

computation @fused.c {
  %c.a = f32[4,4] parameter(), index=0
  %c.t = f32[4,4] transpose(%c.a), perm={1,0}
  ROOT %c.s = f32[4,4] add(%c.t, %c.a)
}

ENTRY computation @main {
  %x = f32[4,4] parameter(), index=0
  %a = f32[4,4] fusion(%x), kind=loop, calls={@fused.a}
  %c = f32[4,4] fusion(%a), kind=loop, calls={@fused.c}
  ROOT %t = (f32[4,4], f32[4,4]) tuple(%c, %a)
}
)";
  MultiOutputFusionPass pass;
  check_pass(pass, text, text, false);
}

}  // namespace
}  // namespace kiln::passes
