// dataset_type=synthetic: seeded random token batches, as MaxText's SyntheticDataIterator
// (input_pipeline/synthetic_data_processing.py) builds them:
//   tokens  [B, T + 1] uniform over [0, vocab_size)
//   inputs  = tokens[:, :-1], targets = tokens[:, 1:] (next-token prediction)
//   positions 0 .. T-1 in every row; segmentation all 1 (one document per row, no padding)
// Tokens come from a counter-based hash of (data_shuffle_seed, batch number, element), so
// batch k is the same on every machine and run. With reuse_example_batch=1 every step gets
// batch 0 (memorisation and throughput runs); with 0 each step k gets fresh batch k.
// (MaxText's synthetic iterator always returns its one fixed batch, drawn from PRNGKey(0);
// Kiln's tokens are not JAX's tokens.)
#pragma once

#include <cstdint>

#include "kiln/config/config.h"
#include "kiln/ir/literal.h"

namespace kiln::train {

struct HostBatch {
  ir::Literal inputs, targets, positions, segmentation;  // s32 [B, T] each
};

class SyntheticData {
 public:
  SyntheticData(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, bool reuse);
  // global_batch_size (every micro-batch) × max_target_length over vocab_size, seeded by data_shuffle_seed.
  static SyntheticData from_config(const config::Config& config);

  HostBatch next();
  // The number of the next batch (0 with reuse_example_batch), moving past it.
  int64_t take();
  // Batch number k, whatever the iterator position.
  HostBatch batch(int64_t k) const;
  // Rows [first, first + count) of batch k alone (equal to those rows of batch(k)).
  HostBatch rows(int64_t k, int64_t first, int64_t count) const;

 private:
  int64_t batch_, seq_len_, vocab_;
  uint64_t seed_;
  bool reuse_;
  int64_t position_ = 0;
};

}  // namespace kiln::train
