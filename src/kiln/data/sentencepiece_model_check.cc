#include "kiln/data/sentencepiece_model_check.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace kiln::data {

namespace {

// Protobuf wire format, just enough to find length-delimited fields.
struct Field {
  uint32_t number = 0;
  std::string_view bytes;  // wire type 2 only
};

std::optional<uint64_t> read_varint(std::string_view& in) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in[0]);
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// The length-delimited fields of one message, or nullopt when the bytes are not a message.
std::optional<std::vector<Field>> fields(std::string_view in) {
  std::vector<Field> out;
  while (!in.empty()) {
    const std::optional<uint64_t> key = read_varint(in);
    if (!key) return std::nullopt;
    switch (*key & 7) {
      case 0:
        if (!read_varint(in)) return std::nullopt;
        break;
      case 1:
        if (in.size() < 8) return std::nullopt;
        in.remove_prefix(8);
        break;
      case 5:
        if (in.size() < 4) return std::nullopt;
        in.remove_prefix(4);
        break;
      case 2: {
        const std::optional<uint64_t> n = read_varint(in);
        if (!n || *n > in.size()) return std::nullopt;
        out.push_back({static_cast<uint32_t>(*key >> 3), in.substr(0, *n)});
        in.remove_prefix(*n);
        break;
      }
      default:
        return std::nullopt;  // groups are not used by SentencePiece models
    }
  }
  return out;
}

// darts-clone's unit layout (what the library's commonPrefixSearch reads).
bool is_leaf(uint32_t u) { return (u >> 31) != 0; }
uint32_t value(uint32_t u) { return u & 0x7fffffffu; }
uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

Status check_charsmap(std::string_view blob, const std::string& path, const char* which) {
  if (blob.empty()) return ok_status();  // no map: the identity normalization
  auto bad = [&](const std::string& what) {
    return invalid_argument("tokenizer_path={}: not a usable SentencePiece model: {} precompiled_charsmap {}", path,
                            which, what);
  };
  if (blob.size() < 4) return bad("is shorter than its 4-byte length");
  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, blob.data(), 4);
  if (trie_bytes > blob.size() - 4 || trie_bytes % 4 != 0 || trie_bytes == 0) {
    return bad("has a trie of " + std::to_string(trie_bytes) + " bytes in " + std::to_string(blob.size() - 4));
  }
  const std::string_view normalized = blob.substr(4 + trie_bytes);
  if (normalized.empty() || normalized.back() != '\0') return bad("has normalized strings without a final NUL");
  const size_t n = trie_bytes / 4;
  std::vector<uint32_t> units(n);
  std::memcpy(units.data(), blob.data() + 4, trie_bytes);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = units[i];
    if (is_leaf(u)) {
      if (value(u) >= normalized.size()) return bad("points past its normalized strings");
      continue;
    }
    // From node i the search reads unit (i ^ offset ^ c) for a byte c, and a leaf at
    // (i ^ offset): all 256 must be units of the array (which darts-clone builds in blocks
    // of 256, so a valid trie passes whether or not the unit is reachable).
    const uint64_t base = static_cast<uint64_t>(i) ^ offset(u);
    if ((base | 0xff) >= n) return bad("has a trie transition outside the trie");
  }
  return ok_status();
}

}  // namespace

Status check_sentencepiece_charsmaps(std::string_view model, const std::string& path) {
  const std::optional<std::vector<Field>> top = fields(model);
  if (!top) return invalid_argument("tokenizer_path={}: not a SentencePiece model (malformed protobuf)", path);
  for (const Field& f : *top) {
    if (f.number != 3 && f.number != 5) continue;  // normalizer_spec, denormalizer_spec
    const char* which = f.number == 3 ? "normalizer_spec" : "denormalizer_spec";
    const std::optional<std::vector<Field>> spec = fields(f.bytes);
    if (!spec) return invalid_argument("tokenizer_path={}: not a SentencePiece model (malformed {})", path, which);
    for (const Field& g : *spec) {
      if (g.number == 2) KILN_RETURN_IF_ERROR(check_charsmap(g.bytes, path, which));
    }
  }
  return ok_status();
}

}  // namespace kiln::data
