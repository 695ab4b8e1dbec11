// Qwen3-MoE trains: qwen3-moe-tiny, shrunk (2 layers of width 32, QK-norm on 4 heads of 16,
// top-2 of 8 experts with the load-balance loss on), learns the fortunes corpus, and on 4
// virtual devices (fsdp 2 × expert 2: the experts split over 2 devices, tokens exchanged with
// ragged all-to-alls, weights all-gathered over fsdp) gives the one-device losses
// (tests/train/family_training.h). Both runs are compiled by the CPU backend.
#include "tests/train/family_training.h"

namespace kiln::train {
namespace {

TEST(Qwen3MoeTraining, LearnsOnOneDeviceAndFsdpTimesExpertGivesTheSameLosses) {
  testing::expect_learns_and_shards_alike(
      {"model_name=qwen3-moe-tiny", "base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
       "base_num_decoder_layers=2", "base_moe_mlp_dim=16", "num_experts=8", "num_experts_per_tok=2"},
      {"learning_rate=1e-2", "warmup_steps_fraction=0", "backend=cpu"},
      {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, "qwen3-moe-tiny");
}

}  // namespace
}  // namespace kiln::train
