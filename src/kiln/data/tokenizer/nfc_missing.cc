// Built when CMake found no ICU (libicu-dev): tokenizer.json files with an NFC normalizer
// are refused (hf_tokenizer.cc checks nfc_available()).
#include "kiln/base/check.h"
#include "kiln/data/tokenizer/nfc.h"

namespace kiln::data {

bool nfc_available() { return false; }

bool to_nfc(std::string_view, std::string&) {
  KILN_CHECK(false) << "to_nfc called in a build without ICU (check nfc_available() first)";
  return false;
}

}  // namespace kiln::data
