#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "kiln/base/check.h"
#include "kiln/data/tokenizer/nfc.h"

namespace kiln::data {

namespace {

const icu::Normalizer2& nfc() {
  static const icu::Normalizer2* n = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* instance = icu::Normalizer2::getNFCInstance(status);
    KILN_CHECK(U_SUCCESS(status) && instance != nullptr) << "ICU has no NFC data: " << u_errorName(status);
    return instance;
  }();
  return *n;
}

}  // namespace

bool nfc_available() { return true; }

bool to_nfc(std::string_view text, std::string& out) {
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (nfc().isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  std::string normalized;
  normalized.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&normalized);
  nfc().normalizeUTF8(0, piece, sink, nullptr, status);
  KILN_CHECK(U_SUCCESS(status)) << "ICU NFC normalization failed: " << u_errorName(status);
  out = std::move(normalized);
  return true;
}

}  // namespace kiln::data
