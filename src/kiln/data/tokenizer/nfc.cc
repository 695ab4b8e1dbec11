// NFC through libkiln_nfc.so (nfc_icu.cc), loaded on first use.
#include "kiln/data/tokenizer/nfc.h"

#include "kiln/base/check.h"
#include "kiln/base/shared_module.h"

namespace kiln::data {

namespace {

using NfcEntry = int (*)(const char* text, size_t size, std::string& out);

const ModuleSymbol& module() {
#ifdef KILN_NFC_MODULE_PATH
  static const ModuleSymbol m = load_module_symbol("libkiln_nfc.so", "KILN_NFC_MODULE", KILN_NFC_MODULE_PATH, "kiln_nfc_v1");
#else
  static const ModuleSymbol m = [] {
    ModuleSymbol none = load_module_symbol("libkiln_nfc.so", "KILN_NFC_MODULE", "", "kiln_nfc_v1");
    if (!none.address) none.error += " (this build found no ICU: install libicu-dev, scripts/setup.sh)";
    return none;
  }();
#endif
  return m;
}

}  // namespace

bool nfc_available() { return module().address != nullptr; }

std::string nfc_unavailable_reason() { return module().error; }

bool to_nfc(std::string_view text, std::string& out) {
  KILN_CHECK(nfc_available()) << "to_nfc without the NFC module: " << module().error;
  const int r = reinterpret_cast<NfcEntry>(module().address)(text.data(), text.size(), out);
  KILN_CHECK(r >= 0) << "ICU's NFC normalization failed";
  return r == 1;
}

}  // namespace kiln::data
