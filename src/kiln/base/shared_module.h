// Optional parts of Kiln built as shared modules and loaded on first use (dlopen), so that a
// large library only loads for the runs that need it and a kiln carried without the module
// (make gpu-bundle copies what ldd lists) runs everything else: the Parquet reader
// (libkiln_parquet.so, Apache Arrow) and the NFC normalizer (libkiln_nfc.so, ICU).
#pragma once

#include <string>

namespace kiln {

struct ModuleSymbol {
  void* address = nullptr;  // the entry point, or null
  std::string error;        // why it is null: "no libkiln_nfc.so at A, B", "X does not load: ..."
};

// Looks for `file_name` at $`env_var` when that is set (only there), else beside the running
// binary, in its lib/, then at `build_path` (where the build put it; may be empty), loads the
// first found (never unloaded: what it made keeps its code there) and returns `symbol`.
ModuleSymbol load_module_symbol(const std::string& file_name, const char* env_var, const std::string& build_path,
                                const char* symbol);

}  // namespace kiln
