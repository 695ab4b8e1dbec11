// The global batch split over a mesh: which mesh axes shard the batch (activation_batch's
// rule, in mesh order), each device's rows, and that the data-parallel devices' rows
// concatenate to exactly the single-device global batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/data/batch_split.h"
#include "kiln/data/pipeline.h"

namespace kiln::data {
namespace {

config::Mesh mesh(std::vector<std::string> axes, std::vector<int64_t> ici) {
  return config::Mesh(std::move(axes), std::move(ici));
}

// MaxText's default rule for the batch of activations.
const std::vector<config::LogicalAxisRule> kRules = {
    {"activation_batch", {"data", "fsdp", "fsdp_transpose", "expert"}},
    {"activation_batch", {"data", "fsdp"}},  // a fallback: never used for the batch dimension
    {"mlp", {"tensor"}}};

TEST(BatchSplit, DataAxisSplitsDevicesInOrder) {
  BatchSplit s = make_batch_split(mesh({"data", "fsdp", "tensor"}, {2, 1, 1}), kRules);
  EXPECT_EQ(s.axes, (std::vector<std::string>{"data", "fsdp"}));
  EXPECT_EQ(s.num_shards, 2);
  EXPECT_EQ(s.shard_of_device, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.rows(8, 0), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(s.rows(8, 1), (std::pair<int64_t, int64_t>{4, 4}));
}

TEST(BatchSplit, TensorParallelDevicesShareTheirRows) {
  // data=2 tensor=2: devices (data, tensor) = (0,0) (0,1) (1,0) (1,1).
  BatchSplit s = make_batch_split(mesh({"data", "fsdp", "tensor"}, {2, 1, 2}), kRules);
  EXPECT_EQ(s.num_shards, 2);
  EXPECT_EQ(s.shard_of_device, (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(BatchSplit, SeveralBatchAxesCombineRowMajorInMeshOrder) {
  // The rule lists expert after fsdp; the mesh puts expert last: fsdp is the outer index.
  BatchSplit s = make_batch_split(mesh({"fsdp", "tensor", "expert"}, {2, 1, 2}), kRules);
  EXPECT_EQ(s.axes, (std::vector<std::string>{"fsdp", "expert"}));
  EXPECT_EQ(s.num_shards, 4);
  EXPECT_EQ(s.shard_of_device, (std::vector<int64_t>{0, 1, 2, 3}));
  // dcn sizes multiply in: data = 2 slices of 1.
  const config::Mesh m({"data", "tensor"}, {1, 2}, {2, 1});
  BatchSplit d = make_batch_split(m, kRules);
  EXPECT_EQ(d.shard_of_device, (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(BatchSplit, NoRuleReplicatesAndUnevenBatchesAreRefused) {
  BatchSplit s = make_batch_split(mesh({"data", "tensor"}, {2, 2}), {{"mlp", {"tensor"}}});
  EXPECT_EQ(s.num_shards, 1);
  EXPECT_EQ(s.shard_of_device, (std::vector<int64_t>{0, 0, 0, 0}));
  BatchSplit three = make_batch_split(mesh({"data"}, {3}), kRules);
  Status st = three.check_batch(4);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot be split evenly over the 3 data shards of mesh axes [data]"), std::string::npos)
      << st.message();
  EXPECT_TRUE(three.check_batch(6).ok());
}

// dp=2: each device's rows of global batch k, concatenated in shard order, are the one-device
// global batch k, for several batches across an epoch boundary.
TEST(BatchSplit, DataParallelRowsConcatenateToTheSingleDeviceBatch) {
  ShardWriter w({1000, 1, 2});
  for (int d = 0; d < 40; ++d) {
    std::vector<int32_t> doc;
    for (int j = 0; j < 3 + (d * 7) % 13; ++j) doc.push_back(10 + (d * 31 + j) % 900);
    ASSERT_TRUE(w.add_document(doc).ok());
  }
  const std::string path = ::testing::TempDir() + "kiln_batch_split_" + std::to_string(getpid()) + ".bin";
  ASSERT_TRUE(w.write(path).ok());
  PipelineOptions o;
  o.global_batch = 4;
  o.seq_len = 8;
  o.seed = 7;
  auto open = [&]() {
    std::vector<std::unique_ptr<Shard>> shards;
    auto shard = Shard::open(path);
    EXPECT_TRUE(shard.ok());
    shards.push_back(std::move(*shard));
    auto p = TokenPipeline::create(std::move(shards), o);
    EXPECT_TRUE(p.ok()) << p.status().message();
    return std::move(*p);
  };
  auto one = open();
  auto dp = open();
  const BatchSplit single = make_batch_split(mesh({"data"}, {1}), kRules);
  const BatchSplit two = make_batch_split(mesh({"data", "tensor"}, {2, 2}), kRules);
  const int64_t epoch_batches = one->samples_per_epoch() / o.global_batch;
  for (int64_t k : {int64_t{0}, int64_t{1}, epoch_batches, epoch_batches + 3}) {
    Batch global = one->batch_for_device(k, single, 0);
    ASSERT_EQ(global.batch, 4);
    Batch a = dp->batch_for_device(k, two, 1);  // device 1: data 0, tensor 1
    Batch b = dp->batch_for_device(k, two, 2);  // device 2: data 1, tensor 0
    ASSERT_EQ(a.batch, 2);
    ASSERT_EQ(b.batch, 2);
    for (auto field : {&Batch::inputs, &Batch::targets, &Batch::positions, &Batch::segmentation}) {
      std::vector<int32_t> cat = a.*field;
      cat.insert(cat.end(), (b.*field).begin(), (b.*field).end());
      EXPECT_EQ(cat, global.*field) << "batch " << k;
    }
    // Devices that differ only along `tensor` read the same rows.
    EXPECT_EQ(dp->batch_for_device(k, two, 0).inputs, a.inputs);
  }
}

}  // namespace
}  // namespace kiln::data
