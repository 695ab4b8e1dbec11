// TensorBoard record encoding (CRC-32C, protobuf wire bytes, TFRecord framing) and the
// attribution table's arithmetic, on hand-computed values. The end-to-end run with an
// independent Python reader is tests/train/observability_test.py.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "kiln/ir/parser.h"
#include "kiln/ops/device_context.h"
#include "kiln/train/observability/attribution.h"
#include "kiln/train/observability/tensorboard.h"
#include "kiln/train/observability/trace.h"

namespace kiln::train {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

// A restart marker is Event{wall_time, step, session_log = 7 {status = START}}: the field
// TensorBoard's readers purge by (6 is the deprecated log_message, which they ignore).
TEST(TensorBoard, SessionStartIsField7WithStatusStart) {
  const std::string e = encode_session_start(0.0, 5);
  const std::string tail = {0x10, 0x05, 0x3a, 0x02, 0x08, 0x01};  // step 5 | field 7, 2 bytes: status 1
  ASSERT_GE(e.size(), tail.size());
  EXPECT_EQ(e.substr(e.size() - tail.size()), tail);
}

TEST(TensorBoard, Crc32cMatchesTheCastagnoliCheckValue) {
  // The standard check value of CRC-32C over "123456789" (RFC 3720, B.4).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, EventEncodesWallTimeStepAndScalars) {
  // wall_time=1.5 (field 1, fixed64), step=7 (field 2, varint), summary (field 5) holding one
  // Value {tag "a" (1), simple_value 2.0f (2, fixed32)}.
  const std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0x07, 0x2A, 0x0A, 0x0A, 0x08, 0x0A,
                                      0x01, 'a', 0x15, 0, 0, 0, 0x40});
  EXPECT_EQ(encode_event(1.5, 7, {{"a", 2.0f}}), expected);
  // A step above 127 takes two varint bytes; file_version is field 3.
  const std::string header = encode_event(0.0, 300, {}, "v");
  EXPECT_EQ(header.substr(9), bytes({0x10, 0xAC, 0x02, 0x1A, 0x01, 'v'}));
}

TEST(TensorBoard, RecordFramingHasLengthAndBothCrcs) {
  const std::string data = "hello";
  const std::string rec = frame_record(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  uint64_t length;
  std::memcpy(&length, rec.data(), 8);
  EXPECT_EQ(length, 5u);
  uint32_t length_crc, data_crc;
  std::memcpy(&length_crc, rec.data() + 8, 4);
  std::memcpy(&data_crc, rec.data() + 12 + data.size(), 4);
  EXPECT_EQ(length_crc, masked_crc32c(rec.data(), 8));
  EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size()));
  EXPECT_EQ(rec.substr(12, data.size()), data);
}

// Two steps of 1 s: 0.5 s of f32 GEMMs at 0.1 TFLOP of work each, 0.2 s fused, 0.1 s data.
StepTotals two_steps() {
  StepTotals t;
  t.steps = 2;
  t.wall_s = 2.0;
  KindTotal& g = t.kinds[static_cast<int>(KernelKind::kGemm)];
  g.seconds = 1.0, g.flops = 2 * 0.1e12, g.count = 2;
  t.gemm_shapes["f32 1x1000x1000x50000 NN"] = {1, 1000, 1000, 50000, false, false, "f32", 2, 1.0};
  KindTotal& f = t.kinds[static_cast<int>(KernelKind::kFused)];
  f.seconds = 0.4, f.bytes = 4e9, f.count = 10;
  t.data_wait_s = 0.2;
  t.between_kernels_s = 0.3;
  return t;
}

// f32 peak `f32`, bf16 twice that; MFU against f32 unless `bf16_compute`.
Peaks peaks(double f32, bool bf16_compute = false) {
  Peaks p;
  p.f32_tflops = f32;
  p.bf16_tflops = 2 * f32;
  p.bf16_compute = bf16_compute;
  p.source = "test";
  return p;
}

TEST(Attribution, RowsSumToTheStepTimeWithHostOverheadMeasuredAndTheRestOutside) {
  const StepTotals t = two_steps();
  const Attribution a = attribute(t, /*model_tflops=*/0.1, peaks(0.25));
  EXPECT_DOUBLE_EQ(a.step_s, 1.0);
  EXPECT_NEAR(a.mfu, 0.1 / 1.0 / 0.25, 1e-12);
  EXPECT_NEAR(a.percent_sum, 100.0, 1e-9);
  auto row = [&](const std::string& name) {
    for (const AttributionRow& r : a.rows) {
      if (r.name == name) return r;
    }
    ADD_FAILURE() << "no row " << name;
    return AttributionRow{};
  };
  EXPECT_NEAR(row("gemm").percent, 50.0, 1e-9);
  EXPECT_NEAR(row("fused elementwise").percent, 20.0, 1e-9);
  EXPECT_NEAR(row("data wait").percent, 10.0, 1e-9);
  EXPECT_NEAR(row("host overhead").percent, 15.0, 1e-9);  // measured between kernels
  EXPECT_NEAR(row("outside the program").percent, 5.0, 1e-9);  // the rest
  // GEMMs: 0.1 TFLOP per step at 0.25 TFLOP/s peak needs 0.4 s of the 0.5 s: loss 0.1 s.
  EXPECT_NEAR(a.gemm_gflops, 200.0, 1e-9);
  EXPECT_NEAR(row("gemm").mfu_without, 0.1 / 0.9 / 0.25, 1e-12);
  // Data wait and host overhead are pure loss.
  EXPECT_NEAR(row("data wait").mfu_without, 0.1 / 0.9 / 0.25, 1e-12);
  EXPECT_NEAR(row("host overhead").mfu_without, 0.1 / 0.85 / 0.25, 1e-12);
  // Elementwise bandwidth: 2e9 bytes per step in 0.2 s = 10 GB/s.
  EXPECT_NE(row("fused elementwise").rate.find("10.0 GB/s"), std::string::npos) << row("fused elementwise").rate;
  const std::string table = attribution_table(a, t, peaks(0.25));
  EXPECT_NE(table.find("MaxText"), std::string::npos) << table;
  EXPECT_NE(table.find("total"), std::string::npos);
}

// GEMM FLOPs are the executed kernels' own: a rate above the configured peak can only mean
// the peak is set below the machine's, and the table says so under the rows.
TEST(Attribution, AKernelRowAbovePeakIsFlaggedAsAPeakSetTooLow) {
  const StepTotals t = two_steps();  // 0.1 TFLOP of GEMMs per step in 0.5 s = 200 GFLOP/s
  const Attribution within = attribute(t, 0.1, peaks(0.25));
  EXPECT_TRUE(within.notes.empty());
  EXPECT_EQ(attribution_table(within, t, peaks(0.25)).find("note:"), std::string::npos);
  const Attribution above = attribute(t, 0.1, peaks(0.16));
  ASSERT_EQ(above.notes.size(), 1u);
  EXPECT_NE(above.notes[0].find("gemm ran at 125% of the peak"), std::string::npos) << above.notes[0];
  EXPECT_NE(attribution_table(above, t, peaks(0.16)).find("\n" + above.notes[0]), std::string::npos);
}

// The step's MFU and every "MFU without" are fractions of the peak: a peak below the run's
// rate gives "n/a" and a note, never a figure above 100 %.
TEST(Attribution, AStepAbovePeakHasNoMfuFigure) {
  const StepTotals t = two_steps();  // 1 s per step
  const Attribution a = attribute(t, /*model_tflops=*/0.3, peaks(0.25));
  EXPECT_TRUE(std::isnan(a.mfu));
  const std::string table = attribution_table(a, t, peaks(0.25));
  EXPECT_NE(table.find("MFU n/a against the f32 peak"), std::string::npos) << table;
  EXPECT_NE(table.find("note: MFU n/a: the run's 0.3 TFLOP/s per device is above the f32 peak"), std::string::npos)
      << table;
  for (const AttributionRow& r : a.rows) EXPECT_TRUE(std::isnan(r.mfu_without) || r.mfu_without <= 1.0) << r.name;
  // The memory-bound row is against the measured bandwidth when there is one.
  Peaks measured = peaks(0.25);
  measured.memory_gbs = 40.0;
  const Attribution b = attribute(t, 0.1, measured);
  for (const AttributionRow& r : b.rows) {
    if (r.name == "fused elementwise") {
      EXPECT_NE(r.rate.find("10.0 GB/s = 25% of 40.0 GB/s"), std::string::npos) << r.rate;
    }
  }
}

// A bf16 step's MFU is against the bf16 peak, and an f32 GEMM against the f32 one.
TEST(Attribution, Bf16StepsUseTheBf16PeakAndEachGemmItsOwnDtype) {
  const StepTotals t = two_steps();  // one f32 GEMM shape: 0.1 TFLOP per step in 0.5 s
  const Attribution a = attribute(t, 0.1, peaks(0.25, /*bf16_compute=*/true));
  EXPECT_NEAR(a.mfu, 0.1 / 1.0 / 0.5, 1e-12);
  auto gemm = [](const Attribution& x) {
    for (const AttributionRow& r : x.rows) {
      if (r.name == "gemm") return r;
    }
    return AttributionRow{};
  };
  EXPECT_NE(gemm(a).rate.find("= 80% of peak"), std::string::npos) << gemm(a).rate;  // 200 of 250 GFLOP/s
  StepTotals bf16 = t;
  bf16.gemm_shapes.begin()->second.dtype = "bf16";
  EXPECT_NE(gemm(attribute(bf16, 0.1, peaks(0.25, true))).rate.find("= 40% of peak"), std::string::npos);
  EXPECT_NE(attribution_table(a, t, peaks(0.25, true)).find("against the bf16 peak"), std::string::npos);
}

TEST(Attribution, CollectivesGetOneRowPerKind) {
  StepTotals t = two_steps();
  t.collectives["all_gather"] = {0.1, 0, 0, 4};
  t.collectives["reduce_scatter"] = {0.05, 0, 0, 4};
  t.between_kernels_s = 0.1;  // the gaps fit in the step with the collectives' time
  const Attribution a = attribute(t, 0.1, peaks(0.25));
  int rows = 0;
  for (const AttributionRow& r : a.rows) rows += r.name.find("collective ") == 0;
  EXPECT_EQ(rows, 2);
  EXPECT_NEAR(a.percent_sum, 100.0, 1e-9);
}

// Two devices of one process run a GEMM and a gather's done; device 1 was behind, so device 0
// waited 9 ms in the done and device 1 only 1 ms. The totals are the mean of the two devices
// (collective 5 ms, GEMM 3 ms, gaps 1.5 ms), with counts per device, not summed.
TEST(TraceRecorder, TotalsAreTheMeanOverTheDevicesSeen) {
  auto m = ir::parse_module(R"(module @a
ENTRY computation @main {
  %x = f32[64,64] parameter(), index=0
  %w = f32[32,64] parameter(), index=1
  %y = f32[64,64] dot_general(%x, %x), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %g.start = f32[64,64] all_gather_start(%w), dim=0, group_size=2, mesh_axes="fsdp"
  ROOT %g = f32[64,64] all_gather_done(%g.start, %w)
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ir::Instr* gemm = nullptr;
  const ir::Instr* done = (*m)->entry()->root();
  for (const auto& i : (*m)->entry()->instructions()) {
    if (i->opcode() == ir::Opcode::kDotGeneral) gemm = i.get();
  }
  ASSERT_NE(gemm, nullptr);
  TraceRecorder recorder(/*keep_events=*/false);
  constexpr int64_t kMs = 1000000;
  recorder.begin_step(1);
  // (gemm begin, gemm end, done begin, done end) per device, in ms from the step's start.
  const int64_t times[2][4] = {{0, 2, 3, 12}, {0, 4, 6, 7}};
  for (int64_t d = 0; d < 2; ++d) {
    std::thread([&, d] {
      const ops::DeviceContext context{config::Mesh({"fsdp"}, {2}), d, nullptr};
      ops::ScopedDeviceContext scope(&context);
      recorder.on_instruction(*gemm, times[d][0] * kMs, times[d][1] * kMs);
      recorder.on_instruction(*done, times[d][2] * kMs, times[d][3] * kMs);
    }).join();
  }
  recorder.end_step(1, 0, 13 * kMs);
  const StepTotals t = recorder.totals();
  EXPECT_EQ(t.steps, 1);
  EXPECT_NEAR(t.wall_s, 0.013, 1e-12);
  const KindTotal& g = t.kinds[static_cast<int>(KernelKind::kGemm)];
  EXPECT_NEAR(g.seconds, 0.003, 1e-12);
  EXPECT_EQ(g.count, 1);
  EXPECT_NEAR(g.flops, 2.0 * 64 * 64 * 64, 1e-6);
  ASSERT_EQ(t.collectives.count("all_gather"), 1u);
  EXPECT_NEAR(t.collectives.at("all_gather").seconds, 0.005, 1e-12);
  EXPECT_EQ(t.collectives.at("all_gather").count, 1);
  EXPECT_NEAR(t.between_kernels_s, 0.0015, 1e-12);  // gaps of 1 and 2 ms
  ASSERT_EQ(t.gemm_shapes.size(), 1u);
  EXPECT_EQ(t.gemm_shapes.begin()->second.count, 1);
  EXPECT_NEAR(t.gemm_shapes.begin()->second.seconds, 0.003, 1e-12);
  EXPECT_EQ(t.gemm_shapes.begin()->second.m, 64);
}

}  // namespace
}  // namespace kiln::train
