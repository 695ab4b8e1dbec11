// Flash attention's visited tiles (plan/attention_cost.h), counted by hand, and the attention
// and GEMM-shape refinements of a calibrated target in the cost model.
#include <gtest/gtest.h>

#include <memory>

#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/plan/attention_cost.h"
#include "kiln/plan/cost_model.h"
#include "plan_test_target.h"

namespace kiln::plan {
namespace {

TEST(VisitedPairs, FullAttentionVisitsEveryTile) {
  EXPECT_EQ(visited_pairs(128, 128, /*causal=*/false, 0, 64, 64), 128.0 * 128);
  // A partial last key block is padded to the tile: 100 keys cost 128 columns.
  EXPECT_EQ(visited_pairs(64, 100, false, 0, 64, 64), 64.0 * 128);
}

TEST(VisitedPairs, CausalVisitsTheBlocksOnAndBelowTheDiagonal) {
  // 4 query blocks of 64 see 1, 2, 3, 4 key blocks: 10 tiles of 64 x 64.
  EXPECT_EQ(visited_pairs(256, 256, true, 0, 64, 64), 10.0 * 64 * 64);
  // 100 queries: a block of 64 (1 key block) and one of 36 (2 key blocks).
  EXPECT_EQ(visited_pairs(100, 100, true, 0, 64, 64), 64.0 * 64 + 36.0 * 128);
}

TEST(VisitedPairs, AWindowShorterThanATileStillVisitsTwoBlocks) {
  // Window 16: block q0 = 64 sees keys 49..127, blocks 0 and 1; block 0 only block 0.
  EXPECT_EQ(visited_pairs(256, 256, true, 16, 64, 64), (1.0 + 2 + 2 + 2) * 64 * 64);
  // Window 128 over 512: blocks from (q0 - 127) / 64 to q0 / 64 + ... : 1, 2, 3, 3, 3, ...
  EXPECT_EQ(visited_pairs(512, 512, true, 128, 64, 64), (1.0 + 2 + 3 + 3 + 3 + 3 + 3 + 3) * 64 * 64);
  // Every tile costs its whole width, so per allowed pair a short window costs more.
  const double allowed_w16 = 16.0 * 17 / 2 + 240.0 * 16;
  EXPECT_GT(visited_pairs(256, 256, true, 16, 64, 64) / allowed_w16, 7.0);
}

constexpr const char* kAttention = R"(module @a
ENTRY computation @main {
  %q = bf16[2,256,8,32] parameter(), index=0
  %k = bf16[2,256,2,32] parameter(), index=1
  %v = bf16[2,256,2,32] parameter(), index=2
  %s = f32[8] parameter(), index=3
  ROOT %a = (bf16[2,256,8,32], f32[2,8,256]) attention(%q, %k, %v, %s), causal=1, scale=0.17, window=16
}
)";

std::unique_ptr<ir::Module> parsed(const std::string& text) {
  auto m = ir::parse_module(text);
  KILN_CHECK(m.ok()) << m.status().to_string();
  return std::move(*m);
}

TEST(AttentionWork, ReadsTheShapesAndTheMask) {
  auto m = parsed(kAttention);
  std::optional<AttentionWork> w = attention_work(*m->entry()->root(), 64, 64);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->op, "attention");
  EXPECT_TRUE(w->bf16);
  EXPECT_EQ(w->head_dim, 32);
  EXPECT_EQ(w->rows, 2.0 * 256 * 8);
  EXPECT_EQ(w->visited_pairs, 2.0 * 8 * 7 * 64 * 64);
  EXPECT_FALSE(attention_work(*m->entry()->param(0), 64, 64).has_value());
}

// test_target (plan_test_target.h) with memory fast enough that the kernels below are bound
// by their FLOPs or by the attention model.
Target fast_memory_target() {
  Target t = testing::test_target();
  t.memory_bandwidth_gbs = 1000;
  return t;
}

double step_seconds(const std::string& text, const Target& t, bool bf16_step = false) {
  return testing::predict(text, config::Mesh(), t, {.bf16_step = bf16_step}).p.step_s;
}

TEST(CostModel, ACalibratedAttentionRunsByItsRowsAndVisitedTiles) {
  Target t = fast_memory_target();
  const double roofline = step_seconds(kAttention, t);
  t.attention.tile_q = 64, t.attention.tile_k = 64;
  t.attention.in_step_f32 = 1.5, t.attention.in_step_bf16 = 2;
  t.attention.rates = {{"attention", true, 64, 10, 3, 0.5}, {"attention", false, 32, 99, 99, 99},
                       {"attention_grad", true, 32, 99, 99, 99}};
  const double rows = 2.0 * 256 * 8, visited = 2.0 * 8 * 7 * 64 * 64;
  // The bf16 forward rate of the nearest width (64 for 32): its pair term halved.
  const double alone = 10e-6 + 1e-9 * (3 * rows + 0.5 * 0.5 * visited);
  EXPECT_NEAR(step_seconds(kAttention, t), 1.5 * alone, 1e-12);
  EXPECT_NEAR(step_seconds(kAttention, t, /*bf16_step=*/true), 2 * alone, 1e-12);
  // No rate for this op and dtype: the class's roofline.
  t.attention.rates = {{"attention", false, 32, 1, 1, 1}};
  EXPECT_NEAR(step_seconds(kAttention, t), roofline, 1e-15);
}

constexpr const char* kBf16Gemm = R"(module @g
ENTRY computation @main {
  %x = bf16[1024,512] parameter(), index=0
  %w = bf16[512,512] parameter(), index=1
  ROOT %y = bf16[1024,512] dot_general(%x, %w), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
}
)";

TEST(CostModel, AGemmNearACalibratedShapeRunsAtItsEfficiency) {
  Target t = fast_memory_target();
  const double roofline = 2.0 * 1024 * 512 * 512 / 2e12;  // FLOP-bound at the bf16 peak
  const double class_rate = 1e-6 + roofline / 0.5;        // the gemm class: half the peak, 1 us
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), class_rate, 1e-12);
  // m 768 for 1024 (0.415 of log2 apart), the same n, k and layout: its efficiency.
  t.gemm_shapes = {{"bf16", "", 1, 768, 512, 512, false, false, 0.25}, {"bf16", "", 1, 1024, 512, 512, false, true, 0.9},
                   {"f32", "", 1, 1024, 512, 512, false, false, 0.9}, {"bf16", "f32", 1, 1024, 512, 512, false, false, 0.8}};
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), roofline / 0.25, 1e-12);
  // A shape recorded with a result of another dtype is not the same kernel.
  t.gemm_shapes = {{"bf16", "f32", 1, 1024, 512, 512, false, false, 0.8}};
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), class_rate, 1e-12);
  // Farther than 4x over the dimensions together (m 256 and k 128: 2 + 2): the class's rate.
  t.gemm_shapes = {{"bf16", "bf16", 1, 256, 512, 128, false, false, 0.25}};
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), class_rate, 1e-12);
}

TEST(CostModel, AGemmLargerThanTheStepsRunsAtTheSizeSweepsEfficiency) {
  Target t = fast_memory_target();
  const double flops = 2.0 * 1024 * 512 * 512;
  const double roofline = flops / 2e12;
  const double class_rate = 1e-6 + roofline / 0.5;
  // The step's largest bf16 GEMM is smaller; the sweep has 256^3 (0.4) and 1024^3 (0.8) in
  // the layout, a bf16 -> f32 product of another efficiency and one in another layout.
  t.gemm_shapes = {{"bf16", "bf16", 1, 64, 64, 64, false, false, 0.25}};
  t.gemm_sizes.in_step_bf16 = 1.25;
  t.gemm_sizes.products = {{"bf16", "bf16", 1, 256, 256, 256, false, false, 0.4},
                           {"bf16", "bf16", 1, 1024, 1024, 1024, false, false, 0.8},
                           {"bf16", "f32", 1, 1024, 1024, 1024, false, false, 0.1},
                           {"bf16", "bf16", 1, 512, 512, 512, true, false, 0.1}};
  // 2^29 FLOPs lie 4/6 of the way from 256^3 (2^25 FLOPs) to 1024^3 (2^31) in log FLOPs.
  const double efficiency = (0.4 + (0.8 - 0.4) * 4.0 / 6.0) / 1.25;
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), roofline / efficiency, 1e-12);
  // Beyond the sweep's largest: its efficiency.
  t.gemm_sizes.products.erase(t.gemm_sizes.products.begin() + 1);
  t.gemm_sizes.products[0].m = t.gemm_sizes.products[0].n = t.gemm_sizes.products[0].k = 64;
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), roofline / (0.4 / 1.25), 1e-12);
  // No product in its layout: the other layouts' curve.
  t.gemm_sizes.products = {{"bf16", "bf16", 1, 512, 512, 512, true, false, 0.5}};
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), roofline / (0.5 / 1.25), 1e-12);
  // Within the step's own sizes (a larger bf16 GEMM was timed, none near): the class's rate.
  t.gemm_shapes.push_back({"bf16", "bf16", 1, 4096, 4096, 64, true, true, 0.25});
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), class_rate, 1e-12);
  // No product of its dtypes: the class's rate.
  t.gemm_shapes.pop_back();
  t.gemm_sizes.products = {{"f32", "f32", 1, 1024, 1024, 1024, false, false, 0.9}};
  EXPECT_NEAR(step_seconds(kBf16Gemm, t), class_rate, 1e-12);
}

}  // namespace
}  // namespace kiln::plan
