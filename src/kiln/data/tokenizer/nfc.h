// Unicode normalization form C, for tokenizer.json files whose normalizer is NFC (Qwen2/3):
// ICU's (Debian's libicu-dev), in the module libkiln_nfc.so (nfc_icu.cc) that the first use
// loads ($KILN_NFC_MODULE when set, else beside the kiln binary or in its lib/, else where
// the build put it; shared_module.h). Without it nfc_available() is false and such files are
// refused with a line that says so and why (nfc_unavailable_reason()).
#pragma once

#include <string>
#include <string_view>

namespace kiln::data {

bool nfc_available();
std::string nfc_unavailable_reason();

// Writes the NFC form of `text` to `out` and returns true, or returns false (leaving `out`
// alone) when `text` is already in NFC, the usual case. Bytes that are not UTF-8 are kept.
bool to_nfc(std::string_view text, std::string& out);

}  // namespace kiln::data
