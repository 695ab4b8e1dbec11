// Kiln's NFC module (libkiln_nfc.so): Unicode normalization form C through ICU, loaded on
// first use (nfc.h) so that ICU's 30 MB of data load only for tokenizer.json files that ask
// for NFC. Built from this file alone.
#include <string>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

// 0: `text` is already NFC (`out` untouched); 1: its NFC form is in `out`; -1: ICU failed.
extern "C" __attribute__((visibility("default"))) int kiln_nfc_v1(const char* text, size_t size, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  static const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (nfc == nullptr) return -1;
  status = U_ZERO_ERROR;
  const icu::StringPiece piece(text, static_cast<int32_t>(size));
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return 0;
  status = U_ZERO_ERROR;
  std::string normalized;
  normalized.reserve(size + size / 8);
  icu::StringByteSink<std::string> sink(&normalized);
  nfc->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) return -1;
  out = std::move(normalized);
  return 1;
}
