// A Llama trains, and parallelism is a config value for it too: llama3-tiny, shrunk (Llama 3.1
// RoPE scaling on, over an original 16-token context; 2 layers of width 64, 4 query heads on 2
// kv heads), learns the fortunes corpus and on 4 virtual devices (fsdp 2 x tensor 2: the
// embedding, the attention heads and the MLP width split by the logical axis rules) gives the
// one-device losses (tests/train/family_training.h). The per-device programs run on the
// reference interpreter, so what is tested is the model's sharding and the collectives, not a
// kernel's rounding.
#include "tests/train/family_training.h"

namespace kiln::train {
namespace {

TEST(LlamaTraining, LearnsOnOneDeviceAndFsdpTimesTensorGivesTheSameLosses) {
  testing::expect_learns_and_shards_alike(
      {"model_name=llama3-tiny", "base_emb_dim=64", "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
       "base_mlp_dim=128", "base_num_decoder_layers=2", "original_max_position_embeddings=16",
       "max_position_embeddings=128"},
      {"learning_rate=3e-3", "warmup_steps_fraction=0.1", "backend=interpreter"},
      {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}, "llama3-tiny");
}

}  // namespace
}  // namespace kiln::train
