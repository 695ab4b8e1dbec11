// The cost model on IR text: a kernel's roofline time, overlap of an async collective with
// the compute between its start and done, the links a group crosses (one or two levels), the ring factors, host
// time per instruction, the wait for the slowest device, and MoE routing bounds. Every expected figure is worked out by hand
// from test_target (plan_test_target.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/plan/cost_model.h"
#include "plan_test_target.h"

namespace kiln::plan {
namespace {

using testing::predict;
using testing::Predicted;
using testing::test_target;
using train::KernelKind;

// x [256,256] @ w [256,256]: 2*256^3 = 33.6 MFLOP; 3 * 256 KiB = 768 KiB moved.
constexpr const char* kGemm = R"(module @g
ENTRY computation @main {
  %x = f32[256,256] parameter(), index=0
  %w = f32[256,256] parameter(), index=1
  ROOT %y = f32[256,256] dot_general(%x, %w), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
}
)";

TEST(CostModel, GemmIsTheSlowerOfItsFlopsAndBytesOverItsEfficiency) {
  Target t = test_target();
  const double flops = 2.0 * 256 * 256 * 256, bytes = 3.0 * 256 * 256 * 4;
  // Memory bound at 1 GB/s: 786 us of bytes against 34 us of FLOPs.
  Predicted r = predict(kGemm, config::Mesh(), t);
  EXPECT_NEAR(r.p.step_s, 1e-6 + bytes / 1e9 / 0.5, 1e-12);
  EXPECT_EQ(r.p.cls(KernelKind::kGemm).count, 1);
  EXPECT_DOUBLE_EQ(r.p.cls(KernelKind::kGemm).flops, flops);
  EXPECT_EQ(r.p.instructions, 1);  // the parameters run nothing
  // Compute bound once memory is fast.
  t.memory_bandwidth_gbs = 1e6;
  r = predict(kGemm, config::Mesh(), t);
  EXPECT_NEAR(r.p.step_s, 1e-6 + flops / 1e12 / 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(r.p.compute_s, r.p.step_s);
  EXPECT_EQ(r.p.exposed_s, 0);
}

// The loss's pick of each label's logit: 8 rows of a [8, 32000] f32 table.
constexpr const char* kLabelLogit = R"(module @pick
ENTRY computation @main {
  %logits = f32[8,32000] parameter(), index=0
  %labels = s32[8,1] parameter(), index=1
  ROOT %picked = f32[8,1] gather(%logits, %labels), axis=1, batch_dims=1
}
)";

TEST(CostModel, AGatherMovesTheRowsItPicksNotTheWholeTable) {
  // 32 B read, 32 B of labels, 32 B written: 96 B at 1 GB/s, where the whole table would
  // be 1 MB (a thousand times the time).
  Predicted r = predict(kLabelLogit, config::Mesh(), test_target());
  EXPECT_DOUBLE_EQ(r.p.cls(KernelKind::kOther).bytes, 96);
  EXPECT_NEAR(r.p.step_s, 96e-9, 1e-15);
}

TEST(CostModel, AnOpcodeWithItsOwnFixedCostPaysThatOne) {
  // The gather's 96 B as above, plus the fixed cost: the class's, or the gather's own when the
  // target has one (a calibrated CPU's "other" class); another opcode's does not apply.
  Target t = test_target();
  KernelRate& other = t.rate(KernelKind::kOther);
  other.fixed_us = 2;
  EXPECT_NEAR(predict(kLabelLogit, config::Mesh(), t).p.step_s, 2e-6 + 96e-9, 1e-15);
  other.fixed_us_by_opcode = {{"sort", 40}};
  EXPECT_NEAR(predict(kLabelLogit, config::Mesh(), t).p.step_s, 2e-6 + 96e-9, 1e-15);
  other.fixed_us_by_opcode["gather"] = 7;
  EXPECT_NEAR(predict(kLabelLogit, config::Mesh(), t).p.step_s, 7e-6 + 96e-9, 1e-15);
}

// One loop over x [1024] f32 writing two results, exp(x) and -x.
constexpr const char* kTwoOutputs = R"(module @two
computation @fused.ab {
  %ab.x = f32[1024] parameter(), index=0
  %ab.e = f32[1024] exp(%ab.x)
  %ab.n = f32[1024] neg(%ab.x)
  ROOT %ab.t = (f32[1024], f32[1024]) tuple(%ab.e, %ab.n)
}

ENTRY computation @main {
  %x = f32[1024] parameter(), index=0
  %ab = (f32[1024], f32[1024]) fusion(%x), kind=loop, calls={@fused.ab}
  ROOT %a = f32[1024] get_tuple_element(%ab), index=0
}
)";

TEST(CostModel, AMultiOutputFusionWritesEveryOutput) {
  // 4 KiB read, 2 x 4 KiB written.
  Predicted r = predict(kTwoOutputs, config::Mesh(), test_target());
  EXPECT_DOUBLE_EQ(r.p.cls(KernelKind::kFused).bytes, 3 * 4096);
  EXPECT_EQ(r.p.cls(KernelKind::kFused).count, 1);
}

TEST(CostModel, AFusedKernelRunsAtItsSignaturesEfficiency) {
  Result<std::unique_ptr<ir::Module>> m = ir::parse_module(kTwoOutputs);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ir::Instr* fusion = (*m)->entry()->root()->operand(0);  // the root picks one of its results
  EXPECT_EQ(fusion_signature(*fusion), "loop exp,neg,tuple -> f32");
  // 12 KiB at 1 GB/s: at the class's efficiency, then at the signature's; another
  // signature's does not apply.
  Target t = test_target();
  KernelRate& fused = t.rate(KernelKind::kFused);
  const double at_class = fused.fixed_us * 1e-6 + 3 * 4096 / 1e9 / fused.efficiency;
  EXPECT_NEAR(predict(kTwoOutputs, config::Mesh(), t).p.step_s, at_class, 1e-15);
  fused.efficiency_by_signature = {{"loop exp,tuple -> f32", 0.125}};
  EXPECT_NEAR(predict(kTwoOutputs, config::Mesh(), t).p.step_s, at_class, 1e-15);
  fused.efficiency_by_signature["loop exp,neg,tuple -> f32"] = 0.25;
  EXPECT_NEAR(predict(kTwoOutputs, config::Mesh(), t).p.step_s, fused.fixed_us * 1e-6 + 3 * 4096 / 1e9 / 0.25, 1e-15);
}

TEST(CostModel, Bf16KernelsRunAgainstTheBf16PeakAndTheirOwnRate) {
  Target t = test_target();
  t.memory_bandwidth_gbs = 1e6;  // compute bound
  const std::string bf16 = R"(module @g
ENTRY computation @main {
  %x = bf16[256,256] parameter(), index=0
  %w = bf16[256,256] parameter(), index=1
  ROOT %y = f32[256,256] dot_general(%x, %w), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
}
)";
  const double flops = 2.0 * 256 * 256 * 256;
  EXPECT_NEAR(predict(bf16, config::Mesh(), t).p.step_s, 1e-6 + flops / 2e12 / 0.5, 1e-12);  // the f32 rate
  // A bf16 step's kernels run at its own rates where the target has them.
  t.bf16_rates = true;
  for (KernelKind k : kKernelClasses) t.kernels_bf16[static_cast<int>(k)] = {0.25, 3.0};
  EXPECT_NEAR(predict(bf16, config::Mesh(), t, {.bf16_step = true}).p.step_s, 3e-6 + flops / 2e12 / 0.25, 1e-12);
  EXPECT_NEAR(predict(bf16, config::Mesh(), t).p.step_s, 1e-6 + flops / 2e12 / 0.5, 1e-12);  // an f32 step's rate
  EXPECT_NEAR(predict(kGemm, config::Mesh(), t, {.bf16_step = true}).p.step_s, 3e-6 + flops / 1e12 / 0.25, 1e-12);
}

// A weight gathered over fsdp=2 (result 256 KiB), with or without a GEMM between the start
// and the done, then used.
std::string gathered(bool compute_between, const std::string& axes = "fsdp", int group = 2) {
  std::string text = R"(module @a
ENTRY computation @main {
  %x = f32[256,256] parameter(), index=0
  %w = f32[)" + std::to_string(256 / group) + R"(,256] parameter(), index=1
  %g.start = f32[256,256] all_gather_start(%w), dim=0, group_size=)" + std::to_string(group) +
                     ", mesh_axes=\"" + axes + "\"\n";
  if (compute_between) {
    text += "  %h = f32[256,256] dot_general(%x, %x), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}\n";
  } else {
    text += "  %h = f32[256,256] parameter(), index=2\n";
  }
  text += "  %g = f32[256,256] all_gather_done(%g.start, %w)\n";
  text += "  ROOT %y = f32[256,256] dot_general(%h, %g), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}\n}\n";
  return text;
}

TEST(CostModel, AGatherHidesBehindTheComputeBetweenItsStartAndDone) {
  const Target t = test_target();
  const config::Mesh mesh({"fsdp"}, {2});
  const double gemm = 1e-6 + 3.0 * 256 * 256 * 4 / 1e9 / 0.5;
  const double gather = 0.5 * 256 * 256 * 4 / 1e9 + 10e-6;  // (g-1)/g of the result, one hop
  Predicted exposed = predict(gathered(false), mesh, t);
  EXPECT_NEAR(exposed.p.collective_s, gather, 1e-12);
  EXPECT_NEAR(exposed.p.exposed_s, gather, 1e-12);
  EXPECT_NEAR(exposed.p.step_s, gather + gemm, 1e-12);
  EXPECT_EQ(exposed.p.collectives.at("all_gather").link, "intra");
  EXPECT_EQ(exposed.p.collectives.at("all_gather").count, 1);
  // The gemm between (786 us) is longer than the gather (141 us): nothing is exposed.
  Predicted hidden = predict(gathered(true), mesh, t);
  EXPECT_NEAR(hidden.p.exposed_s, 0, 1e-15);
  EXPECT_NEAR(hidden.p.overlapped_s(), gather, 1e-12);
  EXPECT_NEAR(hidden.p.step_s, 2 * gemm, 1e-12);
}

TEST(CostModel, CollectivesThatDoNotOverlapAreAllExposedAndScaledInTheStep) {
  Target t = test_target();
  const config::Mesh mesh({"fsdp"}, {2});
  const double gemm = 1e-6 + 3.0 * 256 * 256 * 4 / 1e9 / 0.5;
  const double gather = 0.5 * 256 * 256 * 4 / 1e9 + 10e-6;
  // The GEMM between start and done hides the gather on a target whose engine moves it...
  EXPECT_NEAR(predict(gathered(true), mesh, t).p.exposed_s, 0, 1e-15);
  // ...not where the device's own thread does: the start waits for it.
  t.collectives_overlap = false;
  Predicted r = predict(gathered(true), mesh, t);
  EXPECT_NEAR(r.p.exposed_s, gather, 1e-12);
  EXPECT_NEAR(r.p.step_s, 2 * gemm + gather, 1e-12);
  t.collective_in_step_f32 = 1.5;
  t.collective_in_step_bf16 = 3;
  r = predict(gathered(true), mesh, t);
  EXPECT_NEAR(r.p.collective_s, 1.5 * gather, 1e-12);
  EXPECT_NEAR(r.p.step_s, 2 * gemm + 1.5 * gather, 1e-12);
  EXPECT_NEAR(predict(gathered(true), mesh, t, {.bf16_step = true}).p.collective_s, 3 * gather, 1e-12);
}

// A GEMM, a gathered weight, a second GEMM, a second gathered weight, a last GEMM.
constexpr char kTwoGathers[] = R"(module @a
ENTRY computation @main {
  %x = f32[256,256] parameter(), index=0
  %w = f32[128,256] parameter(), index=1
  %h = f32[256,256] dot_general(%x, %x), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g1.start = f32[256,256] all_gather_start(%w), dim=0, group_size=2, mesh_axes="fsdp"
  %g1 = f32[256,256] all_gather_done(%g1.start, %w)
  %h2 = f32[256,256] dot_general(%h, %g1), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g2.start = f32[256,256] all_gather_start(%w), dim=0, group_size=2, mesh_axes="fsdp"
  %g2 = f32[256,256] all_gather_done(%g2.start, %w)
  ROOT %y = f32[256,256] dot_general(%h2, %g2), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
}
)";

TEST(CostModel, TheWaitForTheSlowestDeviceGrowsSlowerThanTheComputeBeforeIt) {
  Target t = test_target();
  t.collective_wait_f32 = 0.1;
  t.collective_wait_bf16 = 0.3;
  EXPECT_NEAR(t.collective_wait_seconds(false, 0.010), 0.001, 1e-15);  // a tenth of 10 ms
  EXPECT_NEAR(t.collective_wait_seconds(true, 0.010), 0.003, 1e-15);
  // 1 s of compute: 100 times 10 ms, the wait 100^0.8 = 39.8 times 1 ms (4% of it).
  EXPECT_NEAR(t.collective_wait_seconds(false, 1.0), 0.001 * std::pow(100.0, 0.8), 1e-12);
  EXPECT_EQ(t.collective_wait_seconds(false, 0), 0);
  t.collective_wait_f32 = 0;
  EXPECT_EQ(t.collective_wait_seconds(false, 1.0), 0);
}

TEST(CostModel, EachCollectiveWaitsAfterTheComputeSinceThePreviousOne) {
  Target t = test_target();
  t.collectives_overlap = false;
  const config::Mesh mesh({"fsdp"}, {2});
  const double gemm = 1e-6 + 3.0 * 256 * 256 * 4 / 1e9 / 0.5;
  const double gather = 0.5 * 256 * 256 * 4 / 1e9 + 10e-6;
  EXPECT_NEAR(predict(kTwoGathers, mesh, t).p.collective_s, 2 * gather, 1e-12);  // no wait by default
  t.collective_wait_f32 = 0.1;
  t.collective_wait_bf16 = 0.3;
  // Each gather waits after the one GEMM before it (the second's span restarts at the
  // first's issue); the last GEMM comes after every collective and adds no wait.
  const double wait = 0.1 * 0.010 * std::pow(gemm / 0.010, 0.8);
  Predicted r = predict(kTwoGathers, mesh, t);
  EXPECT_NEAR(r.p.collective_s, 2 * gather + 2 * wait, 1e-12);
  EXPECT_NEAR(r.p.exposed_s, 2 * gather + 2 * wait, 1e-12);
  EXPECT_NEAR(r.p.step_s, 3 * gemm + 2 * gather + 2 * wait, 1e-12);
  EXPECT_NEAR(predict(kTwoGathers, mesh, t, {.bf16_step = true}).p.collective_s, 2 * gather + 6 * wait, 1e-12);
}

TEST(CostModel, AGroupAcrossNodesGathersAcrossThemOnlyTheNodesShare) {
  const Target t = test_target();  // 2 devices per node
  const double bytes = 256.0 * 256 * 4;
  // fsdp=4 spans two nodes of 2: across them a ring of 2 over half the result (each device
  // gathers its node-mate's half of the other node's quarter pair: 1/2 of 128 KiB at 0.1 GB/s,
  // one hop of 100 us), then on the node a ring of 2 over the whole result (1/2 of 256 KiB at
  // 1 GB/s, one hop of 10 us). The flat ring would send 3/4 of 256 KiB over the slow link.
  Predicted r = predict(gathered(false, "fsdp", 4), config::Mesh({"fsdp"}, {4}), t);
  EXPECT_EQ(r.p.collectives.at("all_gather").link, "inter");
  EXPECT_NEAR(r.p.collective_s, 0.5 * (bytes / 2) / 0.1e9 + 100e-6 + 0.5 * bytes / 1e9 + 10e-6, 1e-12);
  // The same gather over the inner axis of data=2 x fsdp=2 stays on the node.
  Predicted inner = predict(gathered(false), config::Mesh({"data", "fsdp"}, {2, 2}), t);
  EXPECT_EQ(inner.p.collectives.at("all_gather").link, "intra");
  EXPECT_NEAR(inner.p.collective_s, 0.5 * bytes / 1e9 + 10e-6, 1e-12);
  // ... and over the outer one (one member per node) is the flat ring on the inter link.
  Predicted outer = predict(gathered(false, "data"), config::Mesh({"data", "fsdp"}, {2, 2}), t);
  EXPECT_EQ(outer.p.collectives.at("all_gather").link, "inter");
  EXPECT_NEAR(outer.p.collective_s, 0.5 * bytes / 0.1e9 + 100e-6, 1e-12);
}

// Over fsdp=8 on nodes of 4 (two nodes): a reduce-scatter and an all-reduce of x [256, 256]
// (256 KiB), and a device's ragged exchange into a worst-case buffer [1, 8 * 64, 64] (128 KiB).
TEST(CostModel, ReductionsAndExchangesAcrossNodesTakeTwoLevels) {
  Target t = test_target();
  t.devices_per_node = 4;
  const config::Mesh mesh({"fsdp"}, {8});
  const std::string text = R"(module @r
ENTRY computation @main {
  %x = f32[256,256] parameter(), index=0
  %s = f32[32,256] reduce_scatter(%x), dim=0, group_size=8, mesh_axes=fsdp
  %a = f32[256,256] all_reduce(%x), group_size=8, mesh_axes=fsdp
  %rows = f32[1,64,64] parameter(), index=1
  %sizes = s32[1,8] parameter(), index=2
  ROOT %e = f32[1,512,64] ragged_all_to_all(%rows, %sizes), group_size=8, rows=64, slot=64, reverse=0, mesh_axes=fsdp
}
)";
  Predicted r = predict(text, mesh, t);
  const double bytes = 256.0 * 256 * 4;
  // On the node a ring of 4 over the whole buffer (3/4 of it, 3 hops of 10 us); across the
  // nodes a ring of 2 over the quarter each device then holds (1/2 of it, 1 hop of 100 us).
  const double intra = 0.75 * bytes / 1e9 + 3 * 10e-6, inter = 0.5 * (bytes / 4) / 0.1e9 + 100e-6;
  EXPECT_NEAR(r.p.collectives.at("reduce_scatter").seconds, intra + inter, 1e-12);
  // All-reduce: reduce-scatter and all-gather on the node, an all-reduce (twice the ring)
  // across.
  EXPECT_NEAR(r.p.collectives.at("all_reduce").seconds, 2 * intra + 2 * inter, 1e-12);
  // All-to-all: 3/8 of the buffer to the node's members and 4/8 to the other node's, at once
  // (the inter link's 655 us bounds it), one message per peer.
  const double buffer = 512.0 * 64 * 4;
  const double exchange = std::max(3.0 / 8 * buffer / 1e9, 4.0 / 8 * buffer / 0.1e9) + 3 * 10e-6 + 4 * 100e-6;
  EXPECT_NEAR(r.p.collectives.at("ragged_all_to_all").seconds, exchange, 1e-12);
  EXPECT_EQ(r.p.collectives.at("ragged_all_to_all").link, "inter");
}

TEST(CostModel, AGroupSpreadUnevenlyOverNodesIsAFlatRingOnTheInterLink) {
  Target t = test_target();
  t.devices_per_node = 4;
  // fsdp=6: devices 0-3 on one node, 4-5 on the next.
  const std::string text = R"(module @r
ENTRY computation @main {
  %x = f32[240,256] parameter(), index=0
  ROOT %s = f32[40,256] reduce_scatter(%x), dim=0, group_size=6, mesh_axes=fsdp
}
)";
  Predicted r = predict(text, config::Mesh({"fsdp"}, {6}), t);
  const double bytes = 240.0 * 256 * 4;
  EXPECT_NEAR(r.p.collectives.at("reduce_scatter").seconds, 5.0 / 6 * bytes / 0.1e9 + 5 * 100e-6, 1e-12);
}

TEST(CostModel, AllReduceMovesTwiceWhatAReduceScatterDoes) {
  const Target t = test_target();
  const config::Mesh mesh({"fsdp"}, {2});
  const std::string rs = R"(module @r
ENTRY computation @main {
  %x = f32[256,256] parameter(), index=0
  %s = f32[128,256] reduce_scatter(%x), dim=0, group_size=2, mesh_axes=fsdp
  ROOT %a = f32[256,256] all_reduce(%x), group_size=2, mesh_axes=fsdp
}
)";
  Predicted r = predict(rs, mesh, t);
  const double bytes = 256.0 * 256 * 4;
  EXPECT_NEAR(r.p.collectives.at("reduce_scatter").seconds, 0.5 * bytes / 1e9 + 10e-6, 1e-12);
  EXPECT_NEAR(r.p.collectives.at("all_reduce").seconds, 2 * 0.5 * bytes / 1e9 + 2 * 10e-6, 1e-12);
  // Synchronous: all of it waits.
  EXPECT_NEAR(r.p.exposed_s, r.p.collective_s, 1e-15);
  EXPECT_NEAR(r.p.step_s, r.p.collective_s, 1e-15);
}

TEST(CostModel, HostTimeIsPaidBeforeEveryInstructionTheDeviceRuns) {
  Target t = test_target();
  t.host_us_per_kernel = 5;
  Predicted base = predict(gathered(true), config::Mesh({"fsdp"}, {2}), test_target());
  Predicted r = predict(gathered(true), config::Mesh({"fsdp"}, {2}), t);
  EXPECT_EQ(r.p.instructions, 4);  // two gemms, the start and the done
  EXPECT_NEAR(r.p.host_s, 20e-6, 1e-15);
  EXPECT_NEAR(r.p.step_s, base.p.step_s + 20e-6, 1e-12);
}

// Two experts' rows received over expert=2 into a worst-case buffer, then their product.
constexpr const char* kRouted = R"(module @moe
ENTRY computation @main {
  %x = f32[2,64,32] parameter(), index=0
  %sizes = s32[2,2] parameter(), index=1
  %r.start = f32[2,64,32] ragged_all_to_all_start(%x, %sizes), group_size=2, rows=64, slot=32, reverse=0, mesh_axes=expert
  %r = f32[2,64,32] ragged_all_to_all_done(%r.start, %x)
  ROOT %y = f32[2,64,32] mul(%r, %r)
}
)";

TEST(CostModel, RoutingLoadScalesTheRaggedExchange) {
  const Target t = test_target();
  const config::Mesh mesh({"expert"}, {2});
  Predicted balanced = predict(kRouted, mesh, t);
  Predicted worst = predict(kRouted, mesh, t, {.routing_load = 1.0});
  Predicted observed = predict(kRouted, mesh, t, {.routing_load = 0.75});
  EXPECT_DOUBLE_EQ(balanced.p.routing_load, 0.5);  // 1/e
  const double bytes = 2.0 * 64 * 32 * 4;
  EXPECT_NEAR(worst.p.collectives.at("ragged_all_to_all").bytes, bytes, 1e-9);
  EXPECT_NEAR(balanced.p.collectives.at("ragged_all_to_all").bytes, 0.5 * bytes, 1e-9);
  EXPECT_LT(balanced.p.step_s, observed.p.step_s);
  EXPECT_LT(observed.p.step_s, worst.p.step_s);
  // Without an expert axis routing changes nothing.
  Predicted none = predict(kRouted, config::Mesh({"fsdp"}, {2}), t, {.routing_load = 1.0});
  EXPECT_EQ(none.p.routing_load, 0);
}

// A worst-case buffer of 64 routed rows through 2 experts' [32, 16] weights.
constexpr const char* kExperts = R"(module @gmm
ENTRY computation @main {
  %x = f32[64,32] parameter(), index=0
  %w = f32[2,32,16] parameter(), index=1
  %s = s32[2] parameter(), index=2
  ROOT %y = f32[64,16] grouped_matmul(%x, %w, %s)
}
)";

TEST(CostModel, RoutingLoadScalesTheGroupedMatmulsRowsNotItsWeights) {
  Target t = test_target();
  t.memory_bandwidth_gbs = 1e-3;  // memory bound: the time is the bytes
  const config::Mesh mesh({"expert"}, {2});
  const double rows = 64.0 * 32 * 4 + 64.0 * 16 * 4, weights = 2.0 * 32 * 16 * 4 + 2 * 4;
  Predicted worst = predict(kExperts, mesh, t, {.routing_load = 1.0});
  Predicted balanced = predict(kExperts, mesh, t);
  EXPECT_DOUBLE_EQ(worst.p.cls(KernelKind::kGroupedMatmul).bytes, rows + weights);
  EXPECT_DOUBLE_EQ(balanced.p.cls(KernelKind::kGroupedMatmul).bytes, 0.5 * rows + weights);
  EXPECT_DOUBLE_EQ(balanced.p.cls(KernelKind::kGroupedMatmul).flops, 0.5 * 2 * 64 * 32 * 16);
  EXPECT_NEAR(balanced.p.step_s, (0.5 * rows + weights) / 1e6, 1e-12);
}

}  // namespace
}  // namespace kiln::plan
