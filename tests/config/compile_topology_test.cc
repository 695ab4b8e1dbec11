// compile_topology names (config/compile_topology.h): the slices Google and NVIDIA sell, their
// device counts and libtpu's chip grids, and one-line refusals naming what is accepted.
#include "kiln/config/compile_topology.h"

#include <gtest/gtest.h>

#include "kiln/config/config.h"

namespace kiln::config {
namespace {

TEST(CompileTopology, TpuSlicesCountChipsOrTensorCores) {
  Result<CompileTopology> v6e = parse_compile_topology("v6e-4", 1);
  ASSERT_TRUE(v6e.ok()) << v6e.status().message();
  EXPECT_EQ(v6e->platform, "tpu");
  EXPECT_EQ(v6e->target, "tpu-v6e");
  EXPECT_EQ(v6e->devices, 4);
  EXPECT_EQ(v6e->tpu_topology, "v6e:2x2");
  EXPECT_EQ(parse_compile_topology("v6e-8", 1)->tpu_topology, "v6e:2x4");
  EXPECT_EQ(parse_compile_topology("v6e-256", 1)->tpu_topology, "v6e:16x16");
  // v5p names TensorCores, two per chip: v5p-8 is 4 chips, v5p-64 is 32.
  Result<CompileTopology> v5p = parse_compile_topology("v5p-8", 1);
  ASSERT_TRUE(v5p.ok());
  EXPECT_EQ(v5p->devices, 4);
  EXPECT_EQ(v5p->tpu_topology, "v5p:2x2x1");
  EXPECT_EQ(parse_compile_topology("v5p-64", 1)->devices, 32);
  EXPECT_EQ(parse_compile_topology("v5p-64", 1)->tpu_topology, "v5p:2x4x4");
  Result<CompileTopology> two = parse_compile_topology("v5e-16", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->total_devices(), 32);
}

TEST(CompileTopology, GpusWithinANodeOrWholeNodes) {
  Result<CompileTopology> h100 = parse_compile_topology("h100-4", 1);
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->platform, "cuda");
  EXPECT_EQ(h100->target, "h100");
  EXPECT_EQ(h100->devices, 4);
  EXPECT_TRUE(h100->tpu_topology.empty());
  EXPECT_EQ(parse_compile_topology("h200-64", 1)->devices, 64);
  EXPECT_EQ(parse_compile_topology("b200-1", 1)->target, "b200");
}

TEST(CompileTopology, RefusalsNameTheAcceptedForms) {
  for (const char* bad : {"h100-12", "v6e-6", "v5p-6", "a100-8", "v6e", "v6e-x", "v6e-0", "h100--4"}) {
    Result<CompileTopology> t = parse_compile_topology(bad, 1);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find("accepted: v6e-N"), std::string::npos) << t.status().message();
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
  }
  EXPECT_FALSE(parse_compile_topology("v6e-4", 0).ok());
}

TEST(CompileTopology, ConfigTakesItsDevicesFromTheTopology) {
  Result<Config> c = load({"model_name=gpt-oss-tiny", "backend=pjrt", "compile_topology=v6e-8", "ici_fsdp_parallelism=-1",
                           "ici_expert_parallelism=2"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->derived().num_devices, 8);
  EXPECT_EQ(c->derived().mesh.size("fsdp"), 4);
  Result<Config> slices = load({"model_name=gpt-oss-tiny", "backend=pjrt", "compile_topology=v6e-4",
                                "compile_topology_num_slices=2", "dcn_data_parallelism=2"});
  ASSERT_TRUE(slices.ok()) << slices.status().message();
  EXPECT_EQ(slices->derived().num_devices, 8);
  EXPECT_EQ(slices->derived().num_slices, 2);
  // No accelerator peak needed: the target file has it.
  EXPECT_TRUE(load({"model_name=gpt-oss-tiny", "backend=pjrt", "compile_topology=h100-1"}).ok());
}

TEST(CompileTopology, ConfigRefusals) {
  Result<Config> cpu = load({"model_name=gpt-oss-tiny", "compile_topology=h100-4"});
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("add backend=pjrt"), std::string::npos) << cpu.status().message();
  Result<Config> local = load({"model_name=gpt-oss-tiny", "backend=pjrt", "compile_topology=h100-4", "local_devices=2"});
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("has 4 devices"), std::string::npos) << local.status().message();
  Result<Config> bad = load({"model_name=gpt-oss-tiny", "backend=pjrt", "compile_topology=h100-3x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compile_topology=h100-3x: unknown topology"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace kiln::config
