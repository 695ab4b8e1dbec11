// Where the trainer's batches come from (dataset_type), opened and checked before anything
// is traced or compiled, so bad data is a one-line error before training starts:
//   synthetic  seeded random tokens (synthetic_data.h); no pipeline here
//   tokens     token shards under dataset_path (data/pipeline.h)
//   text       text files under dataset_path, tokenized once with tokenizer_type /
//              tokenizer_path into dataset_cache_dir (data/text_dataset.h), then as tokens
//   hf         Parquet / JSONL(.gz/.zst) files under hf_path, streamed: tokenized and packed
//              as training needs them (data/stream_pipeline.h)
// With eval_interval > 0 the corpus is split by document (data::Split) into a training
// pipeline and a held-out eval pipeline of eval_batches batches.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/data/batch_source.h"
#include "kiln/train/synthetic_data.h"

namespace kiln::train {

struct DataSources {
  std::unique_ptr<data::BatchSource> train, eval;  // null for synthetic data (eval: no split)
  int64_t eval_interval = 0, eval_batches = 0;
  std::vector<std::string> report;  // console lines saying what was opened
};

Result<DataSources> open_data_sources(const config::Config& config);

// s32 [B, T] literals of a pipeline batch.
HostBatch to_host_batch(const data::Batch& b);

}  // namespace kiln::train
