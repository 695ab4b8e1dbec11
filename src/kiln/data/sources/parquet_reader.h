// Parquet documents (*.parquet, as the Hugging Face datasets layout stores them): one row
// one document, the text from one string column, read through Apache Arrow's C++ Parquet
// reader (the pyarrow wheel's libparquet, src/kiln/data/CMakeLists.txt) one row group at a
// time and within it 1024 rows at a time.
//
// The reader lives in a module, libkiln_parquet.so (parquet_reader.cc, the only file that
// includes Arrow's headers), which open_parquet_reader loads on first use
// (parquet_module.cc): from $KILN_PARQUET_MODULE when set (only there), else beside the
// kiln binary (or in its lib/), else where the build put it. Where it is not found, opening a Parquet file is one
// line saying so; every other format works without it.
#pragma once

#include <memory>
#include <string>

#include "kiln/base/status.h"
#include "kiln/data/sources/document_reader.h"

namespace kiln::data {

Result<std::unique_ptr<DocumentReader>> open_parquet_reader(const std::string& path, const std::string& column);

// The module's entry point: fills `out` with the reader or the error.
using ParquetOpen = void (*)(const std::string& path, const std::string& column,
                             Result<std::unique_ptr<DocumentReader>>& out);
inline constexpr const char* kParquetEntry = "kiln_parquet_open_v1";

}  // namespace kiln::data
