// `kiln tokenize FILE...`: text corpora -> token shards + manifest, in parallel and resumable.
//
// Work is cut into units: each input file is split at document boundaries every
// `chunk_bytes` of text (a separator line in plain text, a line end in JSONL), so a unit
// depends only on the file and chunk_bytes and always gives the same shard. Threads take
// units in turn; unit k is written to DIR/shard_{k:05d}.bin (none when it holds no
// documents). Documents follow corpus.h's rules; JSONL documents are the `text_field`
// string of each line.
//
// DIR/manifest.json (written last, atomically) lists the tokenizer, the settings, every
// input (path, size, mtime, documents, tokens) and every shard (file, documents, tokens,
// FNV-1a 64 checksum) in order; open_shards() reads it. While the job runs, each finished
// unit is recorded in DIR/manifest.partial.json. A re-run with the same tokenizer, settings
// and unchanged inputs skips every unit whose shard is listed there (or in manifest.json)
// and still has its checksum, so an interrupted job continues where it stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/progress.h"
#include "kiln/base/status.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

struct TokenizeCorpusOptions {
  std::string output_dir;
  std::string text_field = "text";   // JSONL: the field that holds a document
  int64_t chunk_bytes = 64ll << 20;  // input bytes per unit (and shard), cut at a document boundary
  int threads = 0;                   // 0: one per core
  Progress::Mode progress = Progress::Mode::kAuto;
};

struct TokenizeCorpusReport {
  int64_t documents = 0, tokens = 0, input_bytes = 0;
  int64_t shards = 0, reused_shards = 0;  // reused: found finished with a matching checksum
  std::string manifest_path;
  std::string restart_reason;  // why an existing manifest was not reused ("" if none or reused)
};

Result<TokenizeCorpusReport> tokenize_corpus(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                             const TokenizeCorpusOptions& options);

}  // namespace kiln::data
