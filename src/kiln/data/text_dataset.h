// dataset_type=text: text files, tokenized once with the configured tokenizer and cached as
// token shards, then read like dataset_type=tokens.
//
// dataset_path is a comma-separated list of text files and directories. A directory
// contributes its regular files in name order; symbolic links are skipped (the fortune
// package's *.u8 links would repeat files) and so are files with a NUL byte in their first
// 4 KiB (binary files, like the fortune package's *.dat indexes). Documents follow
// corpus.h's rules (paragraphs, or JSONL "text" fields).
//
// The cache directory is CACHE_ROOT/text_<key>, where key hashes the tokenizer (name,
// vocab, BOS/EOS and the caller's tokenizer key: type and model file) and each input (path
// and FNV-1a 64 of its bytes), so editing a file or switching tokenizers tokenizes again
// and an unchanged corpus is read straight from the shards. A cache is written to a
// temporary directory and renamed, so a crash never leaves a half-written one behind.
#pragma once

#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

struct TextFiles {
  std::vector<std::string> files;
  int64_t skipped = 0;  // binary files and links left out of directories
};

// The text files of dataset_path; one-line errors for an empty value, a missing path or a
// directory without text files.
Result<TextFiles> list_text_files(const std::string& dataset_path);

struct CachedCorpus {
  std::string dir;      // the shard directory (holds manifest.json)
  bool reused = false;  // true: found in the cache, nothing tokenized
  int64_t documents = 0, tokens = 0;
};

// Tokenizes `files` into the cache (or finds them there). tokenizer_key distinguishes
// tokenizers with the same name (e.g. "sentencepiece:/path/sp.model").
Result<CachedCorpus> tokenize_cached(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                                     const std::string& tokenizer_key, const std::string& cache_root);

}  // namespace kiln::data
