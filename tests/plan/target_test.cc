// Target files: every published one parses, with its sources; bad files get one line naming
// the file and the field; calibrate's writer and the parser agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <vector>

#include "kiln/plan/target.h"

namespace kiln::plan {
namespace {

constexpr const char* kGood = R"(name: test
description: a test device
sources: ["made up for the test"]
peak_tflops: {bfloat16: 100, float32: 10}
memory: {capacity_gib: 16, bandwidth_gbs: 1000}
links:
  intra: {name: fast, bandwidth_gbs: 100, latency_us: 2}
  inter: {name: slow, bandwidth_gbs: 10, latency_us: 20}
devices_per_node: 8
kernels:
  gemm: {efficiency: 0.7, fixed_us: 3}
  grouped_matmul: {efficiency: 0.6, fixed_us: 4}
  attention: {efficiency: 0.5, fixed_us: 5}
  fused: {efficiency: 0.8, fixed_us: 1}
  other: {efficiency: 0.4, fixed_us: 2}
host_us_per_kernel: 0.5
)";

TEST(Target, EveryPublishedTargetParsesWithItsSources) {
  const std::vector<std::string> names = available_targets();
  for (const char* want : {"cpu", "tpu-v5e", "tpu-v5p", "tpu-v6e", "h100", "h200", "b200"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const std::string& name : names) {
    if (name == "cpu") continue;
    Result<Target> t = load_target(name, 1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->name, name);
    EXPECT_FALSE(t->sources.empty()) << name;
    EXPECT_GE(t->peak_tflops_bf16, t->peak_tflops_f32) << name;  // no accelerator here is faster in f32
    EXPECT_GT(t->intra.bandwidth_gbs, t->inter.bandwidth_gbs) << name;
    EXPECT_GE(t->devices_per_node, 8) << name;
    EXPECT_TRUE(t->calibrated.empty()) << name;
  }
  // The reference run's chip: spec part 3 quotes 918 TFLOP/s bf16.
  EXPECT_EQ(load_target("tpu-v6e", 1)->peak_tflops_bf16, 918);
}

TEST(Target, ParsesEveryField) {
  Result<Target> t = parse_target(kGood, "good.yml");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->peak_tflops(true), 100);
  EXPECT_EQ(t->peak_tflops(false), 10);
  EXPECT_EQ(t->memory_gib, 16);
  EXPECT_EQ(t->inter.latency_us, 20);
  EXPECT_EQ(t->devices_per_node, 8);
  EXPECT_EQ(t->rate(train::KernelKind::kAttention).efficiency, 0.5);
  EXPECT_EQ(t->rate(train::KernelKind::kOther).fixed_us, 2);
  EXPECT_EQ(t->host_us_per_kernel, 0.5);
}

TEST(Target, WriterAndParserAgree) {
  Target t = *parse_target(kGood, "good.yml");
  t.calibrated = "2026-12-02 by a test";
  t.rate(train::KernelKind::kFused).efficiency = 1.7;  // a CPU's cached kernels beat DRAM bandwidth
  t.bf16_rates = true;
  for (train::KernelKind k : kKernelClasses) t.kernels_bf16[static_cast<int>(k)] = {0.25, 7.5, {}};
  t.rate(train::KernelKind::kOther).fixed_us_by_opcode = {{"gather", 8.5}, {"sort", 47.75}};
  t.kernels_bf16[static_cast<int>(train::KernelKind::kOther)].fixed_us_by_opcode = {{"slice", 11.25}};
  t.rate(train::KernelKind::kFused).efficiency_by_signature = {{"loop add,logistic,mul -> bf16", 0.25},
                                                               {"input add,reduce_sum,tuple -> bf16,f32", 1.375}};
  t.collectives_overlap = false;
  t.collective_in_step_f32 = 1.5;
  t.collective_in_step_bf16 = 2.5;
  t.collective_wait_f32 = 0.0625, t.collective_wait_bf16 = 0.125;
  t.attention.tile_q = 64, t.attention.tile_k = 32;
  t.attention.in_step_f32 = 1.25, t.attention.in_step_bf16 = 0.75;
  t.attention.rates = {{"attention", true, 64, 10, 3, 0.5}, {"attention_grad", false, 32, 0, 7, 1.5}};
  t.gemm_shapes = {{"bf16", "f32", 2, 768, 512, 128, true, false, 0.375}};
  t.gemm_sizes.in_step_f32 = 1.125, t.gemm_sizes.in_step_bf16 = 0.875;
  t.gemm_sizes.products = {{"f32", "f32", 1, 512, 512, 512, false, true, 0.75},
                           {"bf16", "bf16", 1, 1024, 1024, 1024, false, false, 0.625}};
  Result<Target> back = parse_target(target_to_yaml(t), "written.yml");
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << target_to_yaml(t);
  EXPECT_EQ(back->calibrated, t.calibrated);
  EXPECT_EQ(back->sources, t.sources);
  EXPECT_EQ(back->intra.name, "fast");
  for (train::KernelKind k : kKernelClasses) {
    EXPECT_DOUBLE_EQ(back->rate(k).efficiency, t.rate(k).efficiency) << kernel_class_key(k);
    EXPECT_DOUBLE_EQ(back->rate(k).fixed_us, t.rate(k).fixed_us) << kernel_class_key(k);
    EXPECT_DOUBLE_EQ(back->rate(k, /*bf16_step=*/true).efficiency, 0.25) << kernel_class_key(k);
    EXPECT_DOUBLE_EQ(back->rate(k, /*bf16_step=*/false).efficiency, t.rate(k).efficiency) << kernel_class_key(k);
  }
  EXPECT_EQ(back->rate(train::KernelKind::kOther).fixed_us_by_opcode, t.rate(train::KernelKind::kOther).fixed_us_by_opcode);
  EXPECT_DOUBLE_EQ(back->rate(train::KernelKind::kOther, /*bf16_step=*/true).fixed_us_of("slice"), 11.25);
  EXPECT_DOUBLE_EQ(back->rate(train::KernelKind::kOther, /*bf16_step=*/true).fixed_us_of("gather"), 7.5);
  EXPECT_TRUE(back->rate(train::KernelKind::kFused).fixed_us_by_opcode.empty());
  EXPECT_EQ(back->rate(train::KernelKind::kFused).efficiency_by_signature,
            t.rate(train::KernelKind::kFused).efficiency_by_signature);
  EXPECT_DOUBLE_EQ(back->rate(train::KernelKind::kFused, /*bf16_step=*/true).efficiency_of("loop add,logistic,mul -> bf16"),
                   0.25);  // the bf16 step's class has none: its own efficiency
  EXPECT_FALSE(back->collectives_overlap);
  EXPECT_DOUBLE_EQ(back->collective_in_step(false), 1.5);
  EXPECT_DOUBLE_EQ(back->collective_in_step(true), 2.5);
  EXPECT_DOUBLE_EQ(back->collective_wait(false), 0.0625);
  EXPECT_DOUBLE_EQ(back->collective_wait(true), 0.125);
  EXPECT_EQ(back->attention.tile_q, 64);
  EXPECT_EQ(back->attention.tile_k, 32);
  EXPECT_DOUBLE_EQ(back->attention.in_step_f32, 1.25);
  EXPECT_DOUBLE_EQ(back->attention.in_step_bf16, 0.75);
  ASSERT_EQ(back->attention.rates.size(), 2u);
  const AttentionRate& g = back->attention.rates[1];
  EXPECT_EQ(g.op, "attention_grad");
  EXPECT_FALSE(g.bf16);
  EXPECT_EQ(g.head_dim, 32);
  EXPECT_DOUBLE_EQ(g.row_ns, 7);
  EXPECT_DOUBLE_EQ(g.pair_ns, 1.5);
  ASSERT_EQ(back->gemm_shapes.size(), 1u);
  const GemmShapeRate& s = back->gemm_shapes[0];
  EXPECT_EQ(s.dtype, "bf16");
  EXPECT_EQ(s.out_dtype, "f32");
  EXPECT_EQ(s.batch, 2);
  EXPECT_EQ(s.m, 768);
  EXPECT_EQ(s.k, 128);
  EXPECT_TRUE(s.trans_a);
  EXPECT_FALSE(s.trans_b);
  EXPECT_DOUBLE_EQ(s.efficiency, 0.375);
  EXPECT_DOUBLE_EQ(back->gemm_sizes.in_step_f32, 1.125);
  EXPECT_DOUBLE_EQ(back->gemm_sizes.in_step_bf16, 0.875);
  ASSERT_EQ(back->gemm_sizes.products.size(), 2u);
  const GemmShapeRate& p = back->gemm_sizes.products[1];
  EXPECT_EQ(p.dtype, "bf16");
  EXPECT_EQ(p.out_dtype, "bf16");
  EXPECT_EQ(p.m, 1024);
  EXPECT_FALSE(p.trans_b);
  EXPECT_TRUE(back->gemm_sizes.products[0].trans_b);
  EXPECT_DOUBLE_EQ(p.efficiency, 0.625);
  // The attention model's faults name the field.
  const std::string text = target_to_yaml(t);
  for (const auto& [from, to, field] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"op: attention_grad", "op: softmax", "attention.rates[1].op"},
           {"tile: [64, 32]", "tile: [64]", "attention.tile"},
           {"dtype: bfloat16, head_dim", "dtype: fp8, head_dim", "attention.rates[0].dtype"},
           {"efficiency: 0.375", "efficiency: -1", "gemm_shapes[0].efficiency"},
           {"out_dtype: f32, batch: 2", "out_dtype: f16, batch: 2", "gemm_shapes[0].out_dtype"},
           {"efficiency: 0.625", "efficiency: 0", "gemm_sizes.products[1].efficiency"},
           {"bfloat16: 0.875", "bfloat16: nan", "gemm_sizes.in_step.bfloat16"},
           {"bfloat16: 0.125", "bfloat16: -0.125", "collective_wait.bfloat16"},
           {"gather: 8.5", "gathr: 8.5", "kernels.other.fixed_us_by_opcode.gathr is not an opcode"},
           {"sort: 47.75", "sort: -1", "kernels.other.fixed_us_by_opcode.sort"},
           {"slice: 11.25", "slice: fast", "kernels_bf16.other.fixed_us_by_opcode.slice"},
           {"bf16\": 0.25", "bf16\": 0", "kernels.fused.efficiency_by_signature.loop add,logistic,mul -> bf16"}}) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << "\n" << text;
    Result<Target> bad = parse_target(std::string(text).replace(at, from.size(), to), "bad.yml");
    ASSERT_FALSE(bad.ok()) << field;
    EXPECT_NE(bad.status().message().find(field), std::string::npos) << bad.status().message();
  }
}

std::string error_of(const std::string& text) {
  Result<Target> t = parse_target(text, "bad.yml");
  EXPECT_FALSE(t.ok());
  const std::string m = t.ok() ? "" : t.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Target, BadFilesNameTheFileAndTheField) {
  EXPECT_NE(error_of(replaced(kGood, "bfloat16: 100", "bfloat16: -1")).find("bad.yml: peak_tflops.bfloat16"),
            std::string::npos);
  EXPECT_NE(error_of(replaced(kGood, "bandwidth_gbs: 1000", "bandwidth_gbs: fast")).find("memory.bandwidth_gbs is not a number"),
            std::string::npos);
  EXPECT_NE(error_of(replaced(kGood, "  attention: {efficiency: 0.5, fixed_us: 5}\n", "")).find("kernels.attention"),
            std::string::npos);
  EXPECT_NE(error_of(replaced(kGood, "devices_per_node: 8", "devices_per_node: 2.5")).find("whole number"),
            std::string::npos);
  EXPECT_NE(error_of(replaced(kGood, "sources: [\"made up for the test\"]", "sources: []")).find("sources"),
            std::string::npos);
  const std::string unknown = error_of(std::string(kGood) + "flops_per_watt: 3\n");
  EXPECT_NE(unknown.find("unknown key 'flops_per_watt'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("peak_tflops"), std::string::npos) << unknown;  // what is accepted
  EXPECT_NE(error_of("[1, 2").find("not YAML"), std::string::npos);
}

TEST(Target, UnknownNamesListWhatIsAccepted) {
  Result<Target> t = load_target("tpu-v9000", 1);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown target 'tpu-v9000'"), std::string::npos);
  EXPECT_NE(t.status().message().find("h100"), std::string::npos);
  EXPECT_FALSE(load_target("../targets/h100", 1).ok());  // names, not paths (paths end in .yml)
}

}  // namespace
}  // namespace kiln::plan
