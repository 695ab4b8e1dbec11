// Loads libkiln_parquet.so (parquet_reader.h) once and opens Parquet files through it.
#include <string>

#include "kiln/base/shared_module.h"
#include "kiln/data/sources/parquet_reader.h"

namespace kiln::data {

Result<std::unique_ptr<DocumentReader>> open_parquet_reader(const std::string& path, const std::string& column) {
#ifdef KILN_PARQUET_MODULE_PATH
  static const ModuleSymbol module =
      load_module_symbol("libkiln_parquet.so", "KILN_PARQUET_MODULE", KILN_PARQUET_MODULE_PATH, kParquetEntry);
#else
  static const ModuleSymbol module = load_module_symbol("libkiln_parquet.so", "KILN_PARQUET_MODULE", "", kParquetEntry);
#endif
  if (!module.address) {
    return unimplemented("{}: reading Parquet needs Kiln's Parquet module (Apache Arrow's reader), and {}; set "
                         "KILN_PARQUET_MODULE to it, or use JSONL files (.jsonl, .jsonl.gz, .jsonl.zst), which need "
                         "none",
                         path, module.error);
  }
  Result<std::unique_ptr<DocumentReader>> out = internal_error("{}: the Parquet module returned nothing", path);
  reinterpret_cast<ParquetOpen>(module.address)(path, column, out);
  return out;
}

}  // namespace kiln::data
