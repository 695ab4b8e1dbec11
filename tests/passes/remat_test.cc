#include "kiln/passes/remat.h"

#include <gmock/gmock.h>

#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

RematPass make(std::string_view policy) { return RematPass(RematPolicy::from_name(policy).value()); }

// One decoder layer and its hand-written backward pass: h = x * w (checkpoint name mlpwi_0),
// a = tanh(h), y = x + a (the layer's output), loss = sum(y); the gradient of w reads `a`
// (through tanh's derivative) and `x`.
constexpr const char* kLayer = R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0"
  %a = f32[4] tanh(%h), name="layers.0.mlp.hidden"
  %y = f32[4] add(%x, %a), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %one = f32[] constant(1)
  %dy = f32[4] broadcast(%one), dims={}, name="loss.grad"
  %aa = f32[4] mul(%a, %a), name="layers.0.mlp.hidden.grad"
  %d = f32[4] sub(%dy, %aa), name="layers.0.mlp.hidden.grad"
  %dw = f32[4] mul(%d, %x), name="layers.0.mlp.mlpwi_0.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)";

TEST(Remat, FullRecomputesTheLayerFromItsInputsNextToTheBackwardPass) {
  RematPass remat = make("full");
  // The backward pass now reads clones built from the layer's input %x and weight %w; the
  // forward values %h and %a die at their last forward use.
  check_pass(remat, kLayer, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0"
  %a = f32[4] tanh(%h), name="layers.0.mlp.hidden"
  %y = f32[4] add(%x, %a), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %one = f32[] constant(1)
  %dy = f32[4] broadcast(%one), dims={}, name="loss.grad"
  %mul.0 = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0.remat"
  %tanh.1 = f32[4] tanh(%mul.0), name="layers.0.mlp.hidden.remat"
  %aa = f32[4] mul(%tanh.1, %tanh.1), name="layers.0.mlp.hidden.grad"
  %d = f32[4] sub(%dy, %aa), name="layers.0.mlp.hidden.grad"
  %dw = f32[4] mul(%d, %x), name="layers.0.mlp.mlpwi_0.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             true);
  ASSERT_EQ(remat.decisions().size(), 0u);  // the second run (check_pass) found nothing
}

TEST(Remat, ALayerInsideAMicroBatchScopeIsRecomputedInItsStage) {
  // Gradient accumulation names micro-batch m's values "micro_batch_m.layers.N..." and gives
  // them stage m + 1: they are layer N of that micro-batch, and the clones keep the stage.
  RematPass remat = make("full");
  check_pass(remat, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="micro_batch_1.layers.0.mlp.mlpwi_0", stage=2
  %a = f32[4] tanh(%h), name="micro_batch_1.layers.0.mlp.hidden", stage=2
  %y = f32[4] add(%x, %a), name="micro_batch_1.layers.0.output", stage=2
  %loss = f32[] reduce_sum(%y), dims={0}, name="micro_batch_1.loss", stage=2
  %one = f32[] constant(1)
  %dy = f32[4] broadcast(%one), dims={}, name="micro_batch_1.loss.grad", stage=2
  %aa = f32[4] mul(%a, %a), name="micro_batch_1.layers.0.mlp.hidden.grad", stage=2
  %d = f32[4] sub(%dy, %aa), name="micro_batch_1.layers.0.mlp.hidden.grad", stage=2
  %dw = f32[4] mul(%d, %x), name="micro_batch_1.layers.0.mlp.mlpwi_0.grad", stage=2
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="micro_batch_1.layers.0.mlp.mlpwi_0", stage=2
  %a = f32[4] tanh(%h), name="micro_batch_1.layers.0.mlp.hidden", stage=2
  %y = f32[4] add(%x, %a), name="micro_batch_1.layers.0.output", stage=2
  %loss = f32[] reduce_sum(%y), dims={0}, name="micro_batch_1.loss", stage=2
  %one = f32[] constant(1)
  %dy = f32[4] broadcast(%one), dims={}, name="micro_batch_1.loss.grad", stage=2
  %mul.0 = f32[4] mul(%x, %w), name="micro_batch_1.layers.0.mlp.mlpwi_0.remat", stage=2
  %tanh.1 = f32[4] tanh(%mul.0), name="micro_batch_1.layers.0.mlp.hidden.remat", stage=2
  %aa = f32[4] mul(%tanh.1, %tanh.1), name="micro_batch_1.layers.0.mlp.hidden.grad", stage=2
  %d = f32[4] sub(%dy, %aa), name="micro_batch_1.layers.0.mlp.hidden.grad", stage=2
  %dw = f32[4] mul(%d, %x), name="micro_batch_1.layers.0.mlp.mlpwi_0.grad", stage=2
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             true);
}

TEST(Remat, MinimalKeepsTheMlpwiDotAndRecomputesFromIt) {
  RematPass remat = make("minimal");
  check_pass(remat, kLayer, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0"
  %a = f32[4] tanh(%h), name="layers.0.mlp.hidden"
  %y = f32[4] add(%x, %a), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %one = f32[] constant(1)
  %dy = f32[4] broadcast(%one), dims={}, name="loss.grad"
  %tanh.0 = f32[4] tanh(%h), name="layers.0.mlp.hidden.remat"
  %aa = f32[4] mul(%tanh.0, %tanh.0), name="layers.0.mlp.hidden.grad"
  %d = f32[4] sub(%dy, %aa), name="layers.0.mlp.hidden.grad"
  %dw = f32[4] mul(%d, %x), name="layers.0.mlp.mlpwi_0.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             true);
}

TEST(Remat, DecisionsCarryReasons) {
  std::unique_ptr<ir::Module> module = testing::parse_or_die(kLayer);
  ASSERT_NE(module, nullptr);
  RematPass remat = make("save_out_proj");
  ASSERT_TRUE(remat.run(*module).ok());
  ASSERT_EQ(remat.decisions().size(), 1u);  // %a is the only layer value the backward pass reads
  EXPECT_EQ(remat.decisions()[0].value, "%a (layers.0.mlp.hidden)");
  EXPECT_TRUE(remat.decisions()[0].recompute);
  EXPECT_EQ(remat.decisions()[0].reason, "recompute: not saved by remat_policy=save_out_proj");
}

TEST(Remat, NoneLeavesTheModuleAlone) {
  RematPass remat = make("none");
  check_pass(remat, kLayer, kLayer, false);
}

// A loss tile (the model's num_vocab_tiling): its logits %l and their exp %e, which the
// backward pass reads, are recomputed whatever the policy, under `none` too; the layer's
// values are not (`none` keeps them), and the tile's output (its share of the loss, read
// outside the tile) is saved.
constexpr const char* kTile = R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="decoder_norm"
  %w = f32[4] parameter(), index=1, name="logits_dense.kernel"
  %h = f32[4] tanh(%x), name="layers.0.mlp.hidden"
  %l = f32[4] mul(%h, %w), name="loss.vocab_tiles.0.logits"
  %e = f32[4] exp(%l), name="loss.vocab_tiles.0.exp"
  %s = f32[] reduce_sum(%e), dims={0}, name="loss.vocab_tiles.0.sum"
  %loss = f32[] neg(%s), name="loss"
  %one = f32[] constant(1)
  %ds = f32[4] broadcast(%one), dims={}, name="loss.vocab_tiles.0.sum.grad"
  %dl = f32[4] mul(%ds, %e), name="loss.vocab_tiles.0.logits.grad"
  %dh = f32[4] mul(%dl, %h), name="layers.0.mlp.hidden.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dh)
}
)";

TEST(Remat, LossTilesAreRecomputedWhateverThePolicy) {
  RematPass remat = make("none");
  check_pass(remat, kTile, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="decoder_norm"
  %w = f32[4] parameter(), index=1, name="logits_dense.kernel"
  %h = f32[4] tanh(%x), name="layers.0.mlp.hidden"
  %l = f32[4] mul(%h, %w), name="loss.vocab_tiles.0.logits"
  %e = f32[4] exp(%l), name="loss.vocab_tiles.0.exp"
  %s = f32[] reduce_sum(%e), dims={0}, name="loss.vocab_tiles.0.sum"
  %loss = f32[] neg(%s), name="loss"
  %one = f32[] constant(1)
  %ds = f32[4] broadcast(%one), dims={}, name="loss.vocab_tiles.0.sum.grad"
  %mul.0 = f32[4] mul(%h, %w), name="loss.vocab_tiles.0.logits.remat"
  %exp.1 = f32[4] exp(%mul.0), name="loss.vocab_tiles.0.exp.remat"
  %dl = f32[4] mul(%ds, %exp.1), name="loss.vocab_tiles.0.logits.grad"
  %dh = f32[4] mul(%dl, %h), name="layers.0.mlp.hidden.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dh)
}
)",
             true);
  std::unique_ptr<ir::Module> module = testing::parse_or_die(kTile);
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(remat.run(*module).ok());
  std::vector<std::string> reasons;
  for (const RematDecision& d : remat.decisions()) reasons.push_back(d.value + ": " + d.reason);
  EXPECT_THAT(reasons, ::testing::ElementsAre("%h (layers.0.mlp.hidden): saved: remat_policy=none",
                                              "%e (loss.vocab_tiles.0.exp): recompute: a loss tile's value (num_vocab_tiling)"));
}

TEST(Remat, SavedNamesLayerOutputsAndValuesOutsideLayersAreNeverRecomputed) {
  // The backward pass reads the query projection (saved by save_qkv_proj), the layer's
  // output %y (read by the next layer: the residual stream is always saved) and %e, which
  // belongs to no layer. Nothing is left to recompute.
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %e = f32[4] exp(%x), name="embed"
  %q = f32[4] mul(%e, %e), name="layers.0.self_attention.query_proj"
  %y = f32[4] add(%q, %e), name="layers.0.output"
  %z = f32[4] mul(%y, %y), name="layers.1.output"
  %loss = f32[] reduce_sum(%z), dims={0}, name="loss"
  %g1 = f32[4] mul(%y, %q), name="layers.1.output.grad"
  %g2 = f32[4] mul(%g1, %e), name="layers.0.self_attention.query_proj.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %g2)
}
)";
  RematPass remat = make("save_qkv_proj");
  check_pass(remat, text, text, false);
  std::unique_ptr<ir::Module> module = testing::parse_or_die(text);
  ASSERT_TRUE(remat.run(*module).ok());
  std::vector<std::string> reasons;
  for (const RematDecision& d : remat.decisions()) reasons.push_back(d.value + ": " + d.reason);
  EXPECT_THAT(reasons, ::testing::ElementsAre(
                           "%q (layers.0.self_attention.query_proj): saved: checkpoint name 'query_proj' is saved "
                           "by remat_policy=save_qkv_proj",
                           "%y (layers.0.output): saved: an output of layers.0 (read by %z (layers.1.output) outside it)"));
}

TEST(Remat, TupleValuesAreRecomputedWithTheirElements) {
  // An op with two results (as the attention forward kernel): the backward pass reads an
  // element; the clone recomputes the tuple.
  RematPass remat = make("full");
  check_pass(remat, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %n = f32[4] neg(%x), name="layers.0.self_attention"
  %p = (f32[4], f32[4]) tuple(%n, %x), name="layers.0.self_attention.pair"
  %c = f32[4] get_tuple_element(%p), index=0, name="layers.0.self_attention.context"
  %y = f32[4] mul(%c, %x), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %g = f32[4] mul(%c, %c), name="layers.0.output.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %g)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %n = f32[4] neg(%x), name="layers.0.self_attention"
  %p = (f32[4], f32[4]) tuple(%n, %x), name="layers.0.self_attention.pair"
  %c = f32[4] get_tuple_element(%p), index=0, name="layers.0.self_attention.context"
  %y = f32[4] mul(%c, %x), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %neg.0 = f32[4] neg(%x), name="layers.0.self_attention.remat"
  %tuple.1 = (f32[4], f32[4]) tuple(%neg.0, %x), name="layers.0.self_attention.pair.remat"
  %get_tuple_element.2 = f32[4] get_tuple_element(%tuple.1), index=0, name="layers.0.self_attention.context.remat"
  %g = f32[4] mul(%get_tuple_element.2, %get_tuple_element.2), name="layers.0.output.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %g)
}
)",
             true);
}

TEST(Remat, UnnamedInstructionsBelongToTheLayerOfTheirOperands) {
  // %n has no name (a pass made it): it is part of layers.0, so it is recomputed too, and
  // reading it does not make %h an output of the layer.
  RematPass remat = make("full");
  check_pass(remat, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0"
  %n = f32[4] neg(%h)
  %y = f32[4] add(%x, %n), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %dw = f32[4] mul(%n, %x), name="layers.0.mlp.mlpwi_0.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0, name="embed"
  %w = f32[4] parameter(), index=1, name="layers.0.mlp.wi_0"
  %h = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0"
  %n = f32[4] neg(%h)
  %y = f32[4] add(%x, %n), name="layers.0.output"
  %loss = f32[] reduce_sum(%y), dims={0}, name="loss"
  %mul.0 = f32[4] mul(%x, %w), name="layers.0.mlp.mlpwi_0.remat"
  %neg.1 = f32[4] neg(%mul.0), name="layers.0.remat"
  %dw = f32[4] mul(%neg.1, %x), name="layers.0.mlp.mlpwi_0.grad"
  ROOT %t = (f32[], f32[4]) tuple(%loss, %dw)
}
)",
             true);
}

TEST(RematPolicy, MaxTextNamesAndErrors) {
  EXPECT_FALSE(RematPolicy::from_name("none")->enabled);
  EXPECT_TRUE(RematPolicy::from_name("full")->saved_names.empty());
  EXPECT_EQ(RematPolicy::from_name("save_dot_except_mlpwi")->saved_names,
            (std::set<std::string>{"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "mlpwo"}));
  EXPECT_EQ(RematPolicy::from_name("minimal_with_context")->saved_names.count("context"), 1u);
  EXPECT_EQ(RematPolicy::from_name("minimal")->saved_names.count("context"), 0u);
  auto offloaded = RematPolicy::from_name("minimal_offloaded");
  ASSERT_FALSE(offloaded.ok());
  EXPECT_THAT(offloaded.status().message(), ::testing::HasSubstr("remat_policy=minimal_offloaded is not supported"));
  auto typo = RematPolicy::from_name("fulll");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), ::testing::HasSubstr("accepted: none, minimal_with_context, minimal"));
}

}  // namespace
}  // namespace kiln::passes
