// What the trainer reads batches from, whatever the dataset_type: a numbered sequence of
// global batches of packed rows (Batch), a position in it (the next batch the
// step consumes), and that position as JSON for the checkpoint.
//
//   TokenPipeline   dataset_type=tokens / text: random access into a laid-out corpus
//   StreamPipeline  dataset_type=hf: documents streamed from Parquet / JSONL files,
//                   tokenized and packed as they are needed
//
// Threads: rows() is called from one thread (the prefetcher's) with batch numbers that
// only move forward, except that a source may be asked for an earlier batch again (eval
// restarts at batch 0); next_batch_index(), advance(), state() and restore() come from the
// trainer's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"

namespace kiln::data {

// int32 [batch, seq_len] each, row-major.
struct Batch {
  int64_t batch = 0, seq_len = 0;
  std::vector<int32_t> inputs, targets, positions, segmentation;

  // `rows` rows of `seq_len` zeros: all padding (segment id 0) until rows are filled in.
  static Batch zeros(int64_t rows, int64_t seq_len) {
    Batch b;
    b.batch = rows;
    b.seq_len = seq_len;
    const size_t n = static_cast<size_t>(rows * seq_len);
    b.inputs.assign(n, 0);
    b.targets.assign(n, 0);
    b.positions.assign(n, 0);
    b.segmentation.assign(n, 0);
    return b;
  }
};

// Train/eval split by document: every kEvalStride-th document (token pipeline: counting the
// non-empty documents of all shards in order; stream pipeline: by its index in its file) is
// an eval document.
enum class Split { kAll, kTrain, kEval };
inline constexpr int64_t kEvalStride = 20;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // "tokens" or "hf": the checkpoint's data_iterator type.
  virtual std::string type() const = 0;
  virtual int64_t global_batch() const = 0;
  // Rows [first, first + count) of global batch k. A source that can fail mid-run (a corrupt
  // file met in a stream) returns zero rows of the right shape and keeps the error for
  // status(), which the trainer checks before each step.
  virtual Batch rows(int64_t k, int64_t first, int64_t count) = 0;
  virtual Status status() const { return ok_status(); }
  // All rows of global batch k.
  Batch batch(int64_t k) { return rows(k, 0, global_batch()); }
  // The batch the next step consumes, and moving past it.
  virtual int64_t next_batch_index() const = 0;
  virtual void advance() = 0;
  // The position for the checkpoint (with "type") and back; restore fails with one line when
  // the state is for another corpus, seed or layout.
  virtual nlohmann::json state() const = 0;
  virtual Status restore(const nlohmann::json& state) = 0;
  // Sequences of max_target_length per epoch where known without reading the corpus, else -1.
  virtual int64_t samples_per_epoch() const = 0;
  // Tokens (padding excluded) of the batches the steps consumed so far, per named source of a
  // mixture; empty where the source does not count them.
  virtual std::vector<std::pair<std::string, int64_t>> consumed_tokens() const { return {}; }
  // A content hash of global batch k (FNV-1a 64 over its inputs, targets, positions and
  // segment ids, row-major) where the source keeps one: a run's batches compared across
  // restarts and meshes by metrics.jsonl alone. nullopt where it does not.
  virtual std::optional<uint64_t> batch_hash(int64_t k) const { return std::nullopt; }
};

}  // namespace kiln::data
