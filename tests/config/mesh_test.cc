#include <gtest/gtest.h>

#include "kiln/config/mesh.h"

namespace kiln::config {
namespace {

const std::vector<std::string>& axes() { return known_mesh_axes(); }

// ici sizes by axis name; every other axis 1.
std::vector<int64_t> sizes(std::initializer_list<std::pair<const char*, int64_t>> set) {
  std::vector<int64_t> out(axes().size(), 1);
  for (const auto& [name, size] : set) {
    for (size_t i = 0; i < axes().size(); ++i) {
      if (axes()[i] == name) out[i] = size;
    }
  }
  return out;
}

TEST(Mesh, ParallelismKeysUseMaxTextNames) {
  EXPECT_EQ(parallelism_key("fsdp", "ici"), "ici_fsdp_parallelism");
  EXPECT_EQ(parallelism_key("stage", "dcn"), "dcn_pipeline_parallelism");
}

TEST(Mesh, MinusOneFillsTheRemainingDevices) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"fsdp", -1}, {"expert", 2}}), sizes({{"data", -1}}),
                             8, 1, "local_devices=8");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->size("fsdp"), 4);
  EXPECT_EQ(m->size("expert"), 2);
  EXPECT_EQ(m->size("data"), 1);
  EXPECT_EQ(m->num_devices(), 8);
  EXPECT_EQ(m->to_string(), "fsdp=4 expert=2");
}

TEST(Mesh, DcnMultipliesWithIci) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"fsdp", -1}}), sizes({{"data", -1}}), 4, 2, "");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->size("data"), 2);
  EXPECT_EQ(m->size("fsdp"), 4);
  EXPECT_EQ(m->num_devices(), 8);
  EXPECT_EQ(m->sizes(), (std::vector<int64_t>{2, 1, 4, 1, 1, 1, 1, 1, 1}));
}

TEST(Mesh, ProductMustEqualTheDeviceCount) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"fsdp", 3}}), sizes({{"data", -1}}), 4, 1,
                             "local_devices=4");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "mesh: the ici_* parallelism sizes multiply to 3 (ici_fsdp_parallelism=3), but the "
            "mesh needs 4 devices (local_devices=4); make them multiply to 4 or set one to -1");
}

TEST(Mesh, FillMustBeWhole) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"fsdp", -1}, {"tensor", 3}}), sizes({}), 4, 1,
                             "local_devices=4");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cannot fill ici_fsdp_parallelism=-1"), std::string::npos)
      << m.status().message();
}

TEST(Mesh, AtMostOneFillPerLevel) {
  Result<Mesh> m =
      fill_mesh(axes(), sizes({{"fsdp", -1}, {"tensor", -1}}), sizes({}), 4, 1, "");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "ici_fsdp_parallelism=-1 and ici_tensor_parallelism=-1: at most one ici_* "
            "parallelism may be -1 (the axis that fills the rest)");
  Result<Mesh> d = fill_mesh(axes(), sizes({}), sizes({{"data", -1}, {"fsdp", -1}}), 1, 1, "");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("at most one dcn_*"), std::string::npos);
}

TEST(Mesh, ZeroIsNotASize) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"tensor", 0}}), sizes({}), 1, 1, "");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "ici_tensor_parallelism=0: expected a positive size or -1 (fill the rest)");
}

TEST(Mesh, DcnSizesNeedSlices) {
  Result<Mesh> m = fill_mesh(axes(), sizes({{"fsdp", -1}}), sizes({{"fsdp", 2}}), 2, 1, "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("dcn_* parallelism sizes multiply to 2"), std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace kiln::config
