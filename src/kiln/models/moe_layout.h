// Where a MoE decoder's experts and tokens lie on the configured mesh: every family with
// MoE layers calls resolve_moe_layout from its make function, so its dispatch is written over
// the same shards the partitioner will resolve from the logical axis rules.
#pragma once

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/models/gpt_oss/gpt_oss.h"

namespace kiln::models {

// Sets c.expert_shards and c.token_shards from the mesh and logical axis rules ("exp",
// "activation_batch"), and c.moe_chunks from num_moe_chunks (-1 chosen). Nothing for a dense
// config. An num_moe_chunks that does not divide the tokens each device routes is an error
// naming the key.
Status resolve_moe_layout(const config::Config& config, gpt_oss::GptOssConfig& c);

}  // namespace kiln::models
