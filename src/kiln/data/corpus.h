// Text corpora -> token shards (what `kiln tokenize` runs), and opening a shard set.
//
// Documents in a text file:
//   plain (any name but *.jsonl): a document is a paragraph; paragraphs are separated by
//         blank lines or by lines that are exactly "%" (the fortune-file format).
//   jsonl (*.jsonl): one JSON object per line; its "text" string is one document.
// Empty documents are skipped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/shard.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

// The documents of one text file (format from its extension, as above).
Result<std::vector<std::string>> read_documents(const std::string& path);

struct TokenizeOptions {
  std::string output_dir;
  int64_t shard_tokens = 1 << 24;  // start a new shard once one holds this many tokens
};

struct TokenizeReport {
  int64_t documents = 0, tokens = 0, shards = 0;
  std::string manifest_path;
};

// Tokenizes `inputs` in order into output_dir/shard_NNNNN.bin and writes
// output_dir/manifest.json: the tokenizer, each input (documents, bytes), each shard
// (documents, tokens, FNV-1a 64 checksum of the file) and the totals.
Result<TokenizeReport> tokenize_files(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                      const TokenizeOptions& options);

// dataset_path -> shards: a manifest.json (its shards, checksums verified), a directory
// (its manifest.json if present, else every *.bin in name order) or one .bin file.
// An empty set is an error naming the path.
Result<std::vector<std::unique_ptr<Shard>>> open_shards(const std::string& dataset_path);

}  // namespace kiln::data
