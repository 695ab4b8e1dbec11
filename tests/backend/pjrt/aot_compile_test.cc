// Ahead-of-time compiles for hardware that is not here (aot_compile.h, aot_target.h): the GPU
// target description Kiln writes from its hardware files, the topology each compile_topology
// becomes, and Kiln's emitted ragged ops (grouped matmul as ragged_dot with s32 group sizes,
// the ragged all-to-all) with a collective compiled for 4 H100s through the CUDA plugin and
// for a v6e-4 through libtpu. libtpu is opt-in (python/requirements-tpu.txt): without it the
// TPU cases skip with one line. Plugins run in a child process (child_process.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kiln/backend/pjrt/aot_compile.h"
#include "kiln/backend/pjrt/aot_target.h"
#include "kiln/backend/pjrt/hlo_census.h"
#include "kiln/backend/pjrt/plugin_path.h"
#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "tests/backend/pjrt/child_process.h"
#include "tests/backend/pjrt/pjrt_testing.h"

namespace kiln::backend::pjrt {
namespace {

namespace fs = std::filesystem;
using testing::child_succeeded;
using testing::run_in_child;

const std::string kTargets = std::string(KILN_SOURCE_DIR) + "/configs/targets";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GpuTargetConfig, WrittenFromTheHardwareFile) {
  Result<std::string> h100 = gpu_target_config(read(kTargets + "/h100.yml"));
  ASSERT_TRUE(h100.ok()) << h100.status().message();
  for (const char* line : {"core_count: 132", "device_memory_size: 84942979072", "memory_bandwidth: 3352320000000",
                           "cuda_compute_capability { major: 9 minor: 0 }", "name: \"NVIDIA H100 80GB HBM3\"",
                           "platform_name: \"CUDA\"", "dnn_version_info { major: 9 minor: 10 patch: 0 }"}) {
    EXPECT_NE(h100->find(line), std::string::npos) << line << "\n" << *h100;
  }
  Result<std::string> b200 = gpu_target_config(read(kTargets + "/b200.yml"));
  ASSERT_TRUE(b200.ok()) << b200.status().message();
  EXPECT_NE(b200->find("cuda_compute_capability { major: 10 minor: 0 }"), std::string::npos);
  Result<std::string> none = gpu_target_config(read(kTargets + "/tpu-v6e.yml"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no xla_gpu block"), std::string::npos);
  Result<std::string> missing = gpu_target_config("xla_gpu:\n  name: x\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing compute_capability"), std::string::npos)
      << missing.status().message();
}

TEST(AotTarget, TopologiesOfGpusAndTpus) {
  Result<AotTarget> h100 = aot_target(*config::parse_compile_topology("h100-16", 1), kTargets);
  ASSERT_TRUE(h100.ok()) << h100.status().message();
  EXPECT_EQ(h100->plugin, "cuda");
  ASSERT_EQ(h100->spec.options.size(), 2u);
  EXPECT_EQ(h100->spec.options[1].name, "topology");
  EXPECT_EQ(std::get<std::string>(h100->spec.options[1].value), "1x2x8");  // 2 hosts of 8 GPUs
  EXPECT_NEAR(h100->capacity_bytes / (1 << 30), 79.6, 1e-9);
  EXPECT_EQ(std::get<std::string>(aot_target(*config::parse_compile_topology("h100-4", 1), kTargets)->spec.options[1].value),
            "1x1x4");
  Result<AotTarget> v6e = aot_target(*config::parse_compile_topology("v6e-4", 1), kTargets);
  ASSERT_TRUE(v6e.ok()) << v6e.status().message();
  EXPECT_EQ(v6e->plugin, "tpu");
  EXPECT_EQ(v6e->spec.topology_name, "v6e:2x2");
  EXPECT_EQ(v6e->spec.environment.at("TPU_ACCELERATOR_TYPE"), "v6e-4");
  EXPECT_EQ(v6e->peak_bf16_tflops, 918);
  Result<AotTarget> nowhere = aot_target(*config::parse_compile_topology("h100-4", 1), "/nonexistent");
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.status().message().find("cannot read its hardware file"), std::string::npos);
}

// The ragged ops of an MoE layer as Kiln emits them for an accelerator, on a 4-device mesh
// (fsdp 2 x expert 2): the grouped matmul (ragged_dot, s32 group sizes), the ragged exchange
// and an all-reduce.
std::string ragged_program() {
  const std::string text = testing::module_text(
      "  %x = bf16[2,8,16] parameter(), index=0\n  %s = s32[2,2] parameter(), index=1\n"
      "  %w = bf16[4,16,8] parameter(), index=2\n  %g = s32[4] parameter(), index=3\n",
      "  %r = bf16[2,16,16] ragged_all_to_all(%x, %s), group_size=2, rows=8, slot=8, reverse=0, mesh_axes=expert\n"
      "  %flat = bf16[32,16] reshape(%r)\n"
      "  %y = bf16[32,8] grouped_matmul(%flat, %w, %g)\n"
      "  ROOT %sum = bf16[32,8] all_reduce(%y), mesh_axes=fsdp, group_size=2\n");
  std::unique_ptr<ir::Module> module = testing::parse(text);
  if (module == nullptr) return "";
  EmitOptions options;
  options.mesh = config::Mesh({"fsdp", "expert"}, {2, 2});
  options.ragged_dot = true;
  options.mixed_precision_dot = true;
  Result<std::string> emitted = emit_stablehlo(*module, options);
  EXPECT_TRUE(emitted.ok()) << emitted.status().message();
  return emitted.ok() ? *emitted : "";
}

// Compiles the ragged program for `topology` in a child process and checks XLA's report.
void expect_compiles_for(const std::string& topology_name) {
  const std::string program = ragged_program();
  ASSERT_FALSE(program.empty());
  Result<config::CompileTopology> topology = config::parse_compile_topology(topology_name, 1);
  ASSERT_TRUE(topology.ok());
  Result<AotTarget> target = aot_target(*topology, kTargets);
  ASSERT_TRUE(target.ok()) << target.status().message();
  Result<std::string> path = resolve_plugin(target->plugin);
  ASSERT_TRUE(path.ok()) << path.status().message();
  auto result = run_in_child([&](int) {
    Result<const Plugin*> plugin = load_for_topology(*path, target->spec);
    ASSERT_TRUE(plugin.ok()) << plugin.status().message();
    Result<AotExecutable> exe = compile_for_topology(**plugin, target->spec, program, 4);
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    EXPECT_EQ(exe->platform, target->plugin == "cuda" ? "cuda" : "tpu");
    EXPECT_GT(exe->memory.argument_bytes, 0);
    EXPECT_GT(exe->memory.output_bytes, 0);
    Result<HloCensus> census = hlo_census(exe->optimized_hlo);
    ASSERT_TRUE(census.ok()) << census.status().message();
    EXPECT_GT(census->instructions, 0);
    EXPECT_GE(census->collectives["all-reduce"], 1);
    EXPECT_GE(census->collectives["all-to-all"] + census->collectives["ragged-all-to-all"], 1);
  });
  EXPECT_TRUE(child_succeeded(result));
}

TEST(AotCompile, RaggedOpsForFourH100s) { expect_compiles_for("h100-4"); }

TEST(AotCompile, RaggedOpsForAV6e4) {
  if (!resolve_plugin("tpu").ok()) {
    GTEST_SKIP() << "libtpu is not installed (opt-in: make setup-tpu, python/requirements-tpu.txt)";
  }
  expect_compiles_for("v6e-4");
}

TEST(AotCompile, ReadsLibtpuCompileTimeOutOfMemory) {
  // libtpu 0.0.52's message for gpt-oss-120b on v5p-64 (fsdp 32), as Kiln's error carries it.
  const std::string message =
      "pjrt: PJRT_Compile: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO "
      "temporaries (274.91G) exceeds available HBM (95.73G). HLO module: kiln.; See "
      "https://openxla.org/xla/errors/error_1000 for more details.";
  ASSERT_TRUE(compile_time_oom_gib(message).has_value());
  EXPECT_DOUBLE_EQ(*compile_time_oom_gib(message), 274.91);
  EXPECT_FALSE(compile_time_oom_gib("pjrt: PJRT_Compile: INVALID_ARGUMENT: bad program").has_value());
  EXPECT_FALSE(compile_time_oom_gib("CompileTimeHbmOom without the figure").has_value());
}

TEST(AotCompile, RefusesAProgramXlaRejects) {
  Result<AotTarget> target = aot_target(*config::parse_compile_topology("h100-1", 1), kTargets);
  ASSERT_TRUE(target.ok());
  Result<std::string> path = resolve_plugin("cuda");
  ASSERT_TRUE(path.ok()) << path.status().message();
  auto result = run_in_child([&](int) {
    Result<const Plugin*> plugin = load_for_topology(*path, target->spec);
    ASSERT_TRUE(plugin.ok()) << plugin.status().message();
    Result<AotExecutable> exe = compile_for_topology(**plugin, target->spec, "module { this is not stablehlo }", 1);
    ASSERT_FALSE(exe.ok());
    EXPECT_NE(exe.status().message().find("PJRT_Compile"), std::string::npos) << exe.status().message();
    EXPECT_EQ(exe.status().message().find('\n'), std::string::npos);
  });
  EXPECT_TRUE(child_succeeded(result));
}

}  // namespace
}  // namespace kiln::backend::pjrt
