// JSON Lines documents (*.jsonl, *.json; plain, .gz or .zst): one JSON object per line, its
// `field` (a string) one document. Empty lines are skipped and are no document; they still
// count in the line numbers that errors name. Memory: one input buffer and the longest line.
#pragma once

#include <memory>
#include <string>

#include "kiln/base/status.h"
#include "kiln/data/sources/decompress.h"
#include "kiln/data/sources/document_reader.h"

namespace kiln::data {

Result<std::unique_ptr<DocumentReader>> open_jsonl_reader(const std::string& path, const std::string& field,
                                                          Compression compression);

}  // namespace kiln::data
