// The mesh's device numbering and groups, and MaxText's logical-axis-rule semantics.
#include <gtest/gtest.h>

#include "kiln/config/mesh.h"
#include "kiln/spmd/logical_rules.h"

namespace kiln::spmd {
namespace {

TEST(MeshTest, DevicesAreRowMajorOverAxesInMeshOrder) {
  config::Mesh mesh({"data", "fsdp", "expert"}, {1, 2, 2});
  EXPECT_EQ(mesh.num_devices(), 4);
  EXPECT_EQ(mesh.coordinate(3, "fsdp"), 1);
  EXPECT_EQ(mesh.coordinate(3, "expert"), 1);
  EXPECT_EQ(mesh.coordinate(2, "expert"), 0);
  EXPECT_EQ(mesh.coordinate(2, "tensor"), 0);  // not in the mesh
  EXPECT_EQ(mesh.to_string(), "fsdp=2 expert=2");
}

TEST(MeshTest, GroupsVaryOnlyAlongTheirAxesAndRankByShardIndex) {
  config::Mesh mesh({"data", "fsdp", "expert"}, {1, 2, 2});
  EXPECT_EQ(mesh.group(3, {"fsdp"}), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(mesh.group(2, {"expert"}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mesh.group(1, {"fsdp", "expert"}), (std::vector<int64_t>{0, 1, 2, 3}));
  // Outermost axis first: with [expert, fsdp] the expert coordinate is the major one.
  EXPECT_EQ(mesh.group(0, {"expert", "fsdp"}), (std::vector<int64_t>{0, 2, 1, 3}));
  for (int64_t d = 0; d < 4; ++d) {
    std::vector<int64_t> g = mesh.group(d, {"expert", "fsdp"});
    EXPECT_EQ(g[mesh.shard_index(d, {"expert", "fsdp"})], d);
  }
  EXPECT_EQ(mesh.group(2, {}), (std::vector<int64_t>{2}));
}

LogicalRules maxtext_like_rules() {
  return LogicalRules({{"activation_batch", {"data", "fsdp", "expert"}},
                       {"embed", {"fsdp", "sequence", "expert"}},
                       {"embed", {"fsdp", "sequence"}},
                       {"mlp", {"tensor"}},
                       {"exp", {"expert"}},
                       {"embed_moe", {"fsdp"}}});
}

TEST(LogicalRulesTest, FirstRuleWhoseAxesAreFreeWins) {
  config::Mesh mesh({"data", "fsdp", "tensor", "expert"}, {1, 2, 1, 2});
  LogicalRules rules = maxtext_like_rules();
  // embed alone takes its first rule: fsdp and expert (size-1 axes dropped).
  EXPECT_EQ(rules.resolve({"embed", "mlp"}, {8, 4}, mesh).to_string(), "{[fsdp,expert],[]}");
  // After exp took `expert`, embed's first rule is not free: the fallback applies.
  EXPECT_EQ(rules.resolve({"exp", "embed", "mlp"}, {4, 8, 4}, mesh).to_string(), "{[expert],[fsdp],[]}");
  // Unknown names and "" are replicated.
  EXPECT_EQ(rules.resolve({"", "vocab"}, {4, 4}, mesh).to_string(), "{[],[]}");
}

TEST(LogicalRulesTest, AnIndivisibleDimensionStaysReplicatedWithAReason) {
  config::Mesh mesh({"fsdp"}, {4});
  std::vector<std::string> notes;
  ir::Sharding s = maxtext_like_rules().resolve({"embed"}, {6}, mesh, &notes);
  EXPECT_EQ(s.to_string(), "{[]}");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("not divisible by 4"), std::string::npos) << notes[0];
}

}  // namespace
}  // namespace kiln::spmd
