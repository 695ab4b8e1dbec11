#include "kiln/train/synthetic_data.h"

#include <vector>

#include "kiln/base/hash.h"

namespace kiln::train {

SyntheticData::SyntheticData(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, bool reuse)
    : batch_(batch), seq_len_(seq_len), vocab_(vocab), seed_(seed), reuse_(reuse) {}

SyntheticData SyntheticData::from_config(const config::Config& config) {
  return SyntheticData(config.derived().global_batch_size,  // every micro-batch of the step
                       config.get_int("max_target_length"),
                       config.get_int("vocab_size"), static_cast<uint64_t>(config.get_int("data_shuffle_seed")),
                       config.get_int("reuse_example_batch") != 0);
}

int64_t SyntheticData::take() {
  int64_t k = reuse_ ? 0 : position_;
  ++position_;
  return k;
}

HostBatch SyntheticData::next() { return batch(take()); }

HostBatch SyntheticData::batch(int64_t k) const { return rows(k, 0, batch_); }

HostBatch SyntheticData::rows(int64_t k, int64_t first, int64_t count) const {
  // Token i of the global batch (row r = i / (T + 1)) depends on (seed, k, i) only, so any
  // rows can be made alone, equal to the same rows of the whole batch.
  const int64_t T = seq_len_, row = T + 1;
  const uint64_t stream = mix64(hash_combine(mix64(seed_), static_cast<uint64_t>(k)));
  std::vector<double> inputs, targets, positions, segmentation;
  std::vector<double> tokens(static_cast<size_t>(row));
  for (int64_t b = first; b < first + count; ++b) {
    for (int64_t t = 0; t < row; ++t) {
      uint64_t bits = mix64(hash_combine(stream, static_cast<uint64_t>(b * row + t)));
      tokens[t] = static_cast<double>(bits % static_cast<uint64_t>(vocab_));  // bias < vocab / 2^64
    }
    for (int64_t t = 0; t < T; ++t) {
      inputs.push_back(tokens[t]);
      targets.push_back(tokens[t + 1]);
      positions.push_back(static_cast<double>(t));
      segmentation.push_back(1.0);
    }
  }
  ir::Shape shape(ir::DType::kS32, {count, T});
  return {ir::Literal(shape, std::move(inputs)), ir::Literal(shape, std::move(targets)),
          ir::Literal(shape, std::move(positions)), ir::Literal(shape, std::move(segmentation))};
}

}  // namespace kiln::train
