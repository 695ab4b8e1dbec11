// Per-rank data: each process's devices get exactly their rows of the global batch (the rows
// the partitioner's batch sharding gives them), built alone, for every micro-batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/config/mesh.h"
#include "kiln/spmd/partitioner.h"
#include "kiln/train/batch_feed.h"
#include "kiln/train/synthetic_data.h"

namespace kiln::train {
namespace {

config::Config load(const std::vector<std::string>& overrides) {
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "max_target_length=8", "vocab_size=64",
                  "local_devices=4"};
  lo.overrides.insert(lo.overrides.end(), overrides.begin(), overrides.end());
  auto cfg = config::load(lo);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

// Each device's batch equals its shard of the whole global batch, laid out as the program
// takes it ([k, rows, T] with k micro-batches), and a process reads only its devices' rows.
void check_mesh(const std::vector<std::string>& mesh, int64_t per_device, int64_t accumulation) {
  std::vector<std::string> o = mesh;
  o.push_back("per_device_batch_size=" + std::to_string(per_device));
  o.push_back("gradient_accumulation_steps=" + std::to_string(accumulation));
  config::Config cfg = load(o);
  const config::Derived& d = cfg.derived();
  SyntheticData data = SyntheticData::from_config(cfg);
  const HostBatch global = data.batch(3);
  const int64_t B = d.micro_batch_size, T = 8;
  ASSERT_EQ(global.inputs.shape().dim(0), B * accumulation);
  // The global batch as the program takes it, and the partitioner's layout of it.
  ir::Shape shape(ir::DType::kS32, accumulation > 1 ? std::vector<int64_t>{accumulation, B, T} : std::vector<int64_t>{B, T});
  const ir::Literal whole(shape, global.inputs.values());
  auto rules = spmd::LogicalRules::from_config(cfg);
  ASSERT_TRUE(rules.ok());
  const config::Mesh m = d.mesh;
  std::vector<std::string> logical = {"activation_batch", "activation_length"};
  if (accumulation > 1) logical.insert(logical.begin(), "");
  const ir::Sharding sharding = rules->resolve(logical, shape.dims(), m, nullptr);
  for (int64_t first = 0; first < 4; first += 2) {  // two processes of 2 devices each
    auto feed = BatchFeed::make(cfg, first, 2);
    ASSERT_TRUE(feed.ok()) << feed.status().to_string();
    int64_t rows_asked = 0;
    std::vector<HostBatch> got = feed->build([&](int64_t row, int64_t count) {
      rows_asked += count;
      return data.rows(3, row, count);
    });
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(rows_asked, feed->rows_read());
    EXPECT_LT(feed->rows_read(), B * accumulation) << "a process must not build the whole global batch";
    for (int64_t l = 0; l < 2; ++l) {
      const ir::Literal want = spmd::shard_literal(whole, sharding, m, first + l);
      EXPECT_EQ(got[l].inputs.shape(), want.shape()) << "device " << first + l;
      EXPECT_EQ(got[l].inputs.values(), want.values()) << "device " << first + l;
    }
  }
}

TEST(BatchFeed, FsdpDevicesTakeTheirRows) { check_mesh({"ici_fsdp_parallelism=4"}, 2, 1); }
TEST(BatchFeed, DataTimesFsdp) { check_mesh({"ici_data_parallelism=2", "ici_fsdp_parallelism=2"}, 1, 1); }
TEST(BatchFeed, AccumulatedMicroBatches) { check_mesh({"ici_fsdp_parallelism=4"}, 1, 3); }
TEST(BatchFeed, ExpertTimesFsdpWithMicroBatches) {
  check_mesh({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, 2, 2);
}

}  // namespace
}  // namespace kiln::train
