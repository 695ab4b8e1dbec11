#include "kiln/passes/simplify.h"

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

TEST(Simplify, ArithmeticIdentities) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %zero = f32[] constant(0)
  %z = f32[2,3] broadcast(%zero), dims={}
  %one = f32[2,3] constant({1, 1, 1, 1, 1, 1})
  %a = f32[2,3] add(%x, %z)
  %b = f32[2,3] add(%z, %a)
  %c = f32[2,3] sub(%b, %z)
  %d = f32[2,3] mul(%c, %one)
  %e = f32[2,3] mul(%one, %d)
  %f = f32[2,3] div(%e, %one)
  %n1 = f32[2,3] neg(%f)
  %n2 = f32[2,3] neg(%n1)
  %cv = f32[2,3] convert(%n2)
  %cp = f32[2,3] copy(%cv)
  ROOT %r = f32[2,3] exp(%cp), name="out"
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  ROOT %r = f32[2,3] exp(%x), name="out"
}
)",
             true);
}

TEST(Simplify, IntegerTimesZeroIsZero) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = s32[4] parameter(), index=0
  %zero = s32[] constant(0)
  %z = s32[4] broadcast(%zero), dims={}
  %m = s32[4] mul(%x, %z)
  ROOT %r = s32[4] sub(%m, %x)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = s32[4] parameter(), index=0
  %zero = s32[] constant(0)
  %z = s32[4] broadcast(%zero), dims={}
  ROOT %r = s32[4] sub(%z, %x)
}
)",
             true);
}

TEST(Simplify, FloatTimesZeroIsKept) {
  // NaN*0 and inf*0 are NaN, and -1*0 is -0: not an identity for floats.
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %zero = f32[] constant(0)
  %z = f32[4] broadcast(%zero), dims={}
  ROOT %m = f32[4] mul(%x, %z)
}
)";
  SimplifyPass simplify;
  check_pass(simplify, text, text, false);
}

TEST(Simplify, TransposeOfTransposeBecomesOne) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %t1 = f32[4,2,3] transpose(%x), perm={2,0,1}
  %t2 = f32[3,4,2] transpose(%t1), perm={2,0,1}
  ROOT %e = f32[3,4,2] exp(%t2)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %transpose.0 = f32[3,4,2] transpose(%x), perm={1,2,0}
  ROOT %e = f32[3,4,2] exp(%transpose.0)
}
)",
             true);
}

TEST(Simplify, TransposesThatCancelAndIdentityTransposeVanish) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %t1 = f32[4,2,3] transpose(%x), perm={2,0,1}
  %t2 = f32[2,3,4] transpose(%t1), perm={1,2,0}
  %t3 = f32[2,3,4] transpose(%t2), perm={0,1,2}
  ROOT %e = f32[2,3,4] exp(%t3)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  ROOT %e = f32[2,3,4] exp(%x)
}
)",
             true);
}

// The loss gradient's one-hot (the adjoint of picking each row's label): scatter_add of one
// update per row into zeros is a select against an iota along the axis, every operand
// broadcast over it (their size-1 dims expand). The interpreter check covers indices out of
// range, which add nothing either way.
TEST(Simplify, AOneHotScatterIntoZerosIsASelect) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %idx = s32[2,3,1] parameter(), index=0
  %u = f32[2,3,1,4] parameter(), index=1
  %zero = f32[] constant(0)
  %z = f32[2,3,5,4] broadcast(%zero), dims={}
  ROOT %s = f32[2,3,5,4] scatter_add(%z, %idx, %u), axis=2, batch_dims=2, name="loss.grad"
}
)",
             R"(module @m

ENTRY computation @main {
  %idx = s32[2,3,1] parameter(), index=0
  %u = f32[2,3,1,4] parameter(), index=1
  %zero = f32[] constant(0)
  %z = f32[2,3,5,4] broadcast(%zero), dims={}
  %iota.0 = s32[2,3,5,4] iota(), dim=2, name="loss.grad"
  %broadcast.1 = s32[2,3,5,4] broadcast(%idx), dims={0,1,2}, name="loss.grad"
  %compare.2 = pred[2,3,5,4] compare(%iota.0, %broadcast.1), direction=eq, name="loss.grad"
  %broadcast.3 = f32[2,3,5,4] broadcast(%u), dims={0,1,2,3}, name="loss.grad"
  ROOT %select.4 = f32[2,3,5,4] select(%compare.2, %broadcast.3, %z), name="loss.grad"
}
)",
             true);
}

// Kept: an operand that is not all zeros, two indices per row, and indices that are not
// batched up to the axis (each would need a sum or a search, not one compare).
TEST(Simplify, OtherScattersStay) {
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[2,5] parameter(), index=0
  %i1 = s32[2,1] parameter(), index=1
  %u1 = f32[2,1] parameter(), index=2
  %a = f32[2,5] scatter_add(%x, %i1, %u1), axis=1, batch_dims=1
  %zero = f32[] constant(0)
  %z = f32[2,5] broadcast(%zero), dims={}
  %i2 = s32[2,2] parameter(), index=3
  %u2 = f32[2,2] parameter(), index=4
  %b = f32[2,5] scatter_add(%z, %i2, %u2), axis=1, batch_dims=1
  %i3 = s32[1] parameter(), index=5
  %u3 = f32[2,1] parameter(), index=6
  %c = f32[2,5] scatter_add(%z, %i3, %u3), axis=1
  ROOT %out = (f32[2,5], f32[2,5], f32[2,5]) tuple(%a, %b, %c)
}
)";
  SimplifyPass simplify;
  check_pass(simplify, text, text, false);
}

TEST(Simplify, ReshapeChainsAndNoOpReshapes) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %r1 = f32[6,4] reshape(%x)
  %r2 = f32[24] reshape(%r1)
  %r3 = f32[4,6] reshape(%r2), name="folded"
  %r4 = f32[4,6] reshape(%r3)
  %s1 = f32[6,4] reshape(%x)
  %s2 = f32[2,3,4] reshape(%s1)
  %e = f32[2,3,4] exp(%s2)
  ROOT %t = (f32[4,6], f32[2,3,4]) tuple(%r4, %e)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[2,3,4] parameter(), index=0
  %e = f32[2,3,4] exp(%x)
  %reshape.1 = f32[4,6] reshape(%x), name="folded"
  ROOT %t = (f32[4,6], f32[2,3,4]) tuple(%reshape.1, %e)
}
)",
             true);
}

TEST(Simplify, WholeSlicesSingleConcatenatesEmptyReductionsAndTupleElements) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[4,5] parameter(), index=0
  %v = f32[] parameter(), index=1
  %s = f32[4,5] slice(%x), limit={4,5}, start={0,0}
  %c = f32[4,5] concatenate(%s), dim=0
  %r = f32[4,5] reduce_sum(%c), dims={}
  %p = f32[4,5] pad(%r, %v), high={0,0}, low={0,0}
  %b = f32[4,5] broadcast(%p), dims={0,1}
  %t = (f32[4,5], f32[]) tuple(%b, %v)
  %g = f32[4,5] get_tuple_element(%t), index=0
  ROOT %e = f32[4,5] exp(%g)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4,5] parameter(), index=0
  %v = f32[] parameter(), index=1
  ROOT %e = f32[4,5] exp(%x)
}
)",
             true);
}

TEST(Simplify, MergesBroadcastChainsAndDropsWholeDynamicWindows) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[3] parameter(), index=0
  %u = f32[3] parameter(), index=1
  %i = s32[] parameter(), index=2
  %ds = f32[3] dynamic_slice(%x, %i), sizes={3}
  %dus = f32[3] dynamic_update_slice(%ds, %u, %i)
  %b1 = f32[3,1] broadcast(%dus), dims={0}
  %b2 = f32[2,3,4] broadcast(%b1), dims={1,2}
  ROOT %e = f32[2,3,4] exp(%b2)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[3] parameter(), index=0
  %u = f32[3] parameter(), index=1
  %i = s32[] parameter(), index=2
  %broadcast.0 = f32[2,3,4] broadcast(%u), dims={1}
  ROOT %e = f32[2,3,4] exp(%broadcast.0)
}
)",
             true);
}

TEST(Simplify, FoldsSmallConstantExpressions) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[3] parameter(), index=0
  %a = f32[3] constant({1, 2, 3})
  %b = f32[3] constant({0.5, -1, 4})
  %m = f32[3] mul(%a, %b)
  %e = f32[3] exp(%m)
  %s = f32[] reduce_sum(%e), dims={0}
  %bs = f32[3] broadcast(%s), dims={}
  ROOT %r = f32[3] add(%x, %bs)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[3] parameter(), index=0
  %constant.2 = f32[] constant(162756.58)
  %bs = f32[3] broadcast(%constant.2), dims={}
  ROOT %r = f32[3] add(%x, %bs)
}
)",
             true);
}

// A device's shard of a constant, or a sum over devices, depends on which device runs it:
// never folded at compile time (the compiler sees no device). One-device groups here, so
// that the check can also evaluate the module.
TEST(Simplify, LeavesDeviceDependentOpsOnConstantsAlone) {
  SimplifyPass simplify;
  const char* text = R"(module @m

ENTRY computation @main {
  %a = f32[4] constant({1, 2, 3, 4})
  %s = f32[4] shard_slice(%a), dim=0, group_size=1, mesh_axes=fsdp
  ROOT %r = f32[4] all_reduce(%s), group_size=1, mesh_axes=data
}
)";
  check_pass(simplify, text, text, false);
}

TEST(Simplify, FoldsElementwiseOpsOnSplatsAtAnySize) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[64,64] parameter(), index=0
  %two = f32[] constant(2)
  %three = f32[] constant(3)
  %b2 = f32[64,64] broadcast(%two), dims={}
  %b3 = f32[64,64] broadcast(%three), dims={}
  %p = f32[64,64] pow(%b2, %b3), name="eight"
  ROOT %r = f32[64,64] mul(%x, %p)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[64,64] parameter(), index=0
  %constant.0 = f32[] constant(8), name="eight"
  %broadcast.1 = f32[64,64] broadcast(%constant.0), dims={}, name="eight"
  ROOT %r = f32[64,64] mul(%x, %broadcast.1)
}
)",
             true);
}

TEST(Simplify, DoesNotMaterializeLargeOrGrowingConstants) {
  // exp of a 2048-element constant is over the folding limit; a broadcast of a constant
  // would grow it; iota and rng are sources, so their sum has no constant operands.
  std::string values;
  for (int i = 0; i < 2048; ++i) values += (i ? ", " : "") + std::to_string(i % 7);
  std::string text = R"(module @m

ENTRY computation @main {
  %x = f32[2048] parameter(), index=0
  %c = f32[2] constant({1, 2})
  %b = f32[2,2] broadcast(%c), dims={1}
  %big = f32[2048] constant({)" + values + R"(})
  %e = f32[2048] exp(%big)
  %i = f32[2048] iota(), dim=0
  %r = f32[2048] rng(), distribution=uniform, seed=1
  %s = f32[2048] add(%i, %r)
  %y = f32[2048] add(%x, %s)
  %z = f32[2048] add(%y, %e)
  ROOT %t = (f32[2,2], f32[2048]) tuple(%b, %z)
}
)";
  SimplifyPass simplify;
  check_pass(simplify, text, text, false);
}

TEST(Simplify, FoldingLimitIsAnOption) {
  SimplifyPass::Options options;
  options.max_fold_elements = 2;
  SimplifyPass simplify(options);
  const char* text = R"(module @m

ENTRY computation @main {
  %a = f32[3] constant({1, 2, 3})
  ROOT %e = f32[3] exp(%a)
}
)";
  check_pass(simplify, text, text, false);
}

TEST(Simplify, SelectOnConstantPredicateAndEqualBranches) {
  SimplifyPass simplify;
  check_pass(simplify, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %y = f32[4] parameter(), index=1
  %p = pred[4] parameter(), index=2
  %t = pred[] constant(1)
  %bt = pred[4] broadcast(%t), dims={}
  %s1 = f32[4] select(%bt, %x, %y)
  %s2 = f32[4] select(%p, %s1, %s1)
  ROOT %e = f32[4] exp(%s2)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %y = f32[4] parameter(), index=1
  %p = pred[4] parameter(), index=2
  ROOT %e = f32[4] exp(%x)
}
)",
             true);
}

TEST(Simplify, DeclinesRewritesThatWouldDropASharding) {
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[4,2] parameter(), index=0
  %c = f32[4,2] copy(%x), sharding={[fsdp],[]}
  ROOT %e = f32[4,2] exp(%c)
}
)";
  SimplifyPass simplify;
  check_pass(simplify, text, text, false);
}

TEST(Simplify, LeavesAlreadySimpleModulesAlone) {
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %y = f32[2,3] parameter(), index=1
  %t = f32[3,2] transpose(%x), perm={1,0}
  %r = f32[6] reshape(%y)
  %two = f32[] constant(2)
  %b = f32[2,3] broadcast(%two), dims={}
  %m = f32[2,3] mul(%y, %b)
  %s = f32[3] reduce_sum(%m), dims={0}
  %sl = f32[1,3] slice(%x), limit={1,3}, start={0,0}
  ROOT %out = (f32[3,2], f32[6], f32[3], f32[1,3]) tuple(%t, %r, %s, %sl)
}
)";
  SimplifyPass simplify;
  check_pass(simplify, text, text, false);
}

}  // namespace
}  // namespace kiln::passes
