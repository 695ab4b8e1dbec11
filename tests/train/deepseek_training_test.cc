// DeepSeek-V3 trains: deepseek3-tiny, shrunk (3 layers of width 32: 1 dense, 2 MoE; MLA on 2
// heads; top-2 of 8 experts from 2 of 4 groups, a shared expert, the bias update at rate 1e-3,
// one MTP module, whose loss is part of the loss), learns the fortunes corpus, and on 4
// virtual devices (fsdp 2 × expert 2: experts split over 2 devices, tokens exchanged with
// ragged all-to-alls, weights all-gathered over fsdp) gives the one-device losses
// (tests/train/family_training.h). Both runs are compiled by the CPU backend.
#include "tests/train/family_training.h"

namespace kiln::train {
namespace {

TEST(DeepseekTraining, LearnsOnOneDeviceAndFsdpTimesExpertGivesTheSameLosses) {
  testing::expect_learns_and_shards_alike(
      {"model_name=deepseek3-tiny", "base_emb_dim=32", "base_num_query_heads=2", "base_num_kv_heads=2",
       "q_lora_rank=16", "kv_lora_rank=8", "qk_nope_head_dim=8", "qk_rope_head_dim=4", "v_head_dim=8",
       "base_mlp_dim=48", "base_moe_mlp_dim=16", "routed_bias_update_rate=1e-3"},
      {"learning_rate=1e-2", "warmup_steps_fraction=0", "backend=cpu"},
      {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, "deepseek3-tiny");
}

}  // namespace
}  // namespace kiln::train
