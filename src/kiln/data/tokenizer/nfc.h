// Unicode normalization form C, for tokenizer.json files whose normalizer is NFC (Qwen2/3):
// ICU's (Debian's libicu-dev) when the build found it, else nfc_available() is false and
// such files are refused with a line that says so.
#pragma once

#include <string>
#include <string_view>

namespace kiln::data {

bool nfc_available();

// Writes the NFC form of `text` to `out` and returns true, or returns false (leaving `out`
// alone) when `text` is already in NFC, the usual case. Bytes that are not UTF-8 are kept.
bool to_nfc(std::string_view text, std::string& out);

}  // namespace kiln::data
