// Streaming document readers for real pretraining data, the files a Hugging Face dataset
// (or MaxText's hf input pipeline) is made of: Parquet (parquet_reader.cc, Apache Arrow's
// C++ library from the pyarrow wheel) and JSON Lines, plain or gzip/zstd compressed
// (jsonl_reader.cc over decompress.h). Each reader holds one batch of rows of one Parquet
// row group, or one decompression buffer and the current line; never the whole file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::data {

// Reads the documents of one file in order, streaming, with bounded memory: one text per
// Parquet row / JSONL line, from the column (field) named at open.
class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document's text into *text; false at the end of the file. Errors are one line
  // naming the file and where (row group and row, or line number) and what was expected.
  virtual Result<bool> next(std::string* text) = 0;
  // Skips the next n documents; cheaper than reading them where the format allows (Parquet
  // skips whole row groups by their metadata without decompressing them). Skipping past the
  // end is an out_of_range error naming the file and its document count.
  // (base/status.h has no out-of-range code: it is kInvalidArgument, "... is out of range:
  // the file has N documents"; the reader is then at the end of the file.)
  virtual Status skip(int64_t n) = 0;
  // Documents in the file if known without reading it (Parquet metadata), else -1.
  virtual int64_t num_documents() const = 0;
};

// By the file's name: *.parquet; *.jsonl, *.json (JSON Lines), each optionally .gz or .zst.
// `column` names the text column / JSON field ("text" by default in the configs). Errors: a
// missing/unreadable file, an unknown extension (naming the accepted ones), a Parquet file
// without that column (naming the columns it has), a column that is not a string column, a
// corrupt or truncated Parquet, gzip or zstd file, a JSONL line that is not a JSON object or
// lacks the field (naming the line) -- each one line naming the file.
Result<std::unique_ptr<DocumentReader>> open_document_reader(const std::string& path, const std::string& column);

// The files of a dataset, MaxText/HF style: `path` is a local directory (or a glob); with
// `data_dir` non-empty, path/data_dir; `files` (a glob relative to that directory, e.g.
// "data/train-*.parquet" or "*.jsonl.zst"; empty: every supported file under the directory,
// recursively, the way the Hugging Face datasets layout puts them in data/) selects. Sorted by
// path. Errors: missing directory, no matching file (naming the directory, the glob and the
// accepted extensions).
//
// Globs: `*`, `?` and `[...]` match within one path component, `**` matches any number of
// components; as in a shell, a wildcard does not match a leading '.', and hidden files and
// folders (.cache/, .git/) are never listed. Only files with a supported extension are
// listed, so "data/*" picks the data files and leaves README.md alone. A glob `path`
// (e.g. "/data/c4/en/c4-train.*.json.gz") selects files by itself: then data_dir and files
// must be empty. A `path` that is one supported file lists that file.
Result<std::vector<std::string>> list_dataset_files(const std::string& path, const std::string& data_dir,
                                                    const std::string& files);

// The accepted file names, for messages: ".parquet, .jsonl, .json, .jsonl.gz, ...".
const char* supported_document_extensions();

}  // namespace kiln::data
