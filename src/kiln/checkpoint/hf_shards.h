// Hugging Face's sharded safetensors layout, as save_pretrained writes it: when the tensors
// exceed `max_shard_size` bytes they are split, in order, over
// model-00001-of-0000N.safetensors ... and model.safetensors.index.json maps every tensor to
// its file ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}); otherwise one
// model.safetensors and no index. A tensor larger than the limit gets a file of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

// "5GB" (10^9 bytes, as Hugging Face counts), "500MB", "64KB", "2GiB", "4MiB", "1KiB" or a
// plain number of bytes; a one-line error naming `key` otherwise.
Result<int64_t> parse_shard_size(const std::string& key, const std::string& text);

// Which tensors go into which file: the file names, in order, and per file the indices
// of its tensors. `bytes[i]` is tensor i's size.
struct ShardPlan {
  std::vector<std::string> files;
  std::vector<std::vector<size_t>> members;
};
ShardPlan plan_hf_shards(const std::vector<int64_t>& bytes, int64_t max_shard_size);

// Writes `tensors` into `dir` per plan_hf_shards (files fsynced) and, for several files, the
// index; `on_file` is called after each file with its size in bytes. Returns the plan.
Result<ShardPlan> write_hf_safetensors(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                       int64_t max_shard_size, const std::function<void(int64_t)>& on_file = nullptr);

}  // namespace kiln::checkpoint
