// dataset_type=tokens: token shards -> packed, shuffled, deterministic batches.
//
// Examples. Every document becomes [BOS] tokens [EOS] (add_bos, add_eos) and is shifted
// within itself: inputs = doc[:-1], targets = doc[1:], so a target never crosses a
// document. A document longer than max_target_length (T) + 1 is cut into pieces of T
// inputs; each piece is its own segment.
//   packing=true:  pieces, in a seeded order of documents, fill rows of T left to right; a
//                  piece that does not fit in what is left of a row starts the next one.
//                  Segment ids 1, 2, ... per piece in the row, positions restart at 0 in
//                  each segment, and padding has segment id 0 (excluded from the loss).
//   packing=false: one piece per row, padded with segment id 0.
// The rows ("samples") of the corpus are laid out once; epoch e visits them in a
// permutation seeded by (data_shuffle_seed, e). Global batch k holds global samples
// [k·G, (k+1)·G) for global batch size G, whatever the device count; data-parallel
// shard d of D takes rows [d·G/D, (d+1)·G/D) of it. The iterator state is just the
// global sample index (plus the seed and the corpus fingerprint, to check a restore).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/batch_source.h"
#include "kiln/data/batch_split.h"
#include "kiln/data/shard.h"

namespace kiln::data {

struct PipelineOptions {
  int64_t global_batch = 1;  // G: rows per global batch
  int64_t seq_len = 1;       // T: max_target_length
  int64_t model_vocab = 0;   // every id must be below it (0: do not check)
  bool add_bos = true, add_eos = true, packing = true;
  uint64_t seed = 0;
  Split split = Split::kAll;
};

struct IteratorState {
  int64_t sample = 0;       // global sample index of the next batch's first row
  uint64_t seed = 0;        // data_shuffle_seed
  uint64_t fingerprint = 0; // the corpus layout the index refers to
};

class TokenPipeline final : public BatchSource {
 public:
  static Result<std::unique_ptr<TokenPipeline>> create(std::vector<std::unique_ptr<Shard>> shards,
                                                       const PipelineOptions& options);

  std::string type() const override { return "tokens"; }
  int64_t samples_per_epoch() const override { return static_cast<int64_t>(rows_.size()); }
  // Global batch k split over `num_shards` data-parallel shards: shard `shard`'s rows.
  Batch batch(int64_t k, int64_t shard = 0, int64_t num_shards = 1) const;
  // Global batch k's rows for `device` of a mesh (batch_split.h): the same global batches
  // whatever the mesh.
  Batch batch_for_device(int64_t k, const BatchSplit& split, int64_t device) const {
    return batch(k, split.shard_of_device.at(static_cast<size_t>(device)), split.num_shards);
  }
  // Rows [first, first + count) of global batch k, and only those are read: a process
  // builds just the rows its devices consume (train/batch_feed.h).
  Batch rows(int64_t k, int64_t first, int64_t count) const;
  Batch rows(int64_t k, int64_t first, int64_t count) override {
    return static_cast<const TokenPipeline*>(this)->rows(k, first, count);
  }
  // The next global batch (all rows); advances the state by G samples.
  Batch next();
  // The index k of the next global batch, and moving past it without building it (for a
  // prefetcher that builds batch(k) on its own thread).
  int64_t next_batch_index() const override { return next_sample_ / options_.global_batch; }
  void advance() override { next_sample_ += options_.global_batch; }
  int64_t global_batch() const override { return options_.global_batch; }

  IteratorState position() const { return {next_sample_, options_.seed, fingerprint_}; }
  // Fails (invalid_argument) if the state is from another seed or corpus layout.
  Status restore_position(const IteratorState& state);
  // The same as the checkpoint's JSON: {"type": "tokens", "sample", "seed", "fingerprint"}.
  nlohmann::json state() const override;
  Status restore(const nlohmann::json& state) override;

 private:
  struct Piece {
    int32_t doc;    // index into docs_
    int32_t start;  // first input position within the document (with BOS/EOS)
    int32_t len;    // inputs in this piece
  };
  struct Doc {
    int32_t shard;
    int64_t index;
    int64_t size;  // tokens with BOS/EOS
  };
  TokenPipeline() = default;
  int32_t doc_token(const Doc& d, int64_t j) const;
  int64_t row_of(int64_t sample) const;  // the sample's row in the corpus layout
  void fill_row(int64_t row, int64_t r, Batch& out) const;

  PipelineOptions options_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<Doc> docs_;
  std::vector<std::vector<Piece>> rows_;
  uint64_t fingerprint_ = 0;
  int64_t next_sample_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
};

}  // namespace kiln::data
