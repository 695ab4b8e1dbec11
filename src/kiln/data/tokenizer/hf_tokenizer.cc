#include "kiln/data/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kiln/data/tokenizer/hf_tokenizer_json.h"
#include "kiln/data/tokenizer/nfc.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

// GPT-2's byte-to-unicode map: bytes that are printable Latin-1 stand for themselves, the
// other 68 for U+0100 onwards, in byte order. tokenizer.json spells byte-level tokens with
// these characters; Kiln keeps the bytes.
class ByteAlphabet {
 public:
  ByteAlphabet() {
    std::fill(std::begin(byte_of_), std::end(byte_of_), -1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_of_[printable ? b : next++] = b;
    }
  }
  // The bytes a token's text stands for; false when a character is outside the alphabet.
  bool decode(std::string_view text, std::string& bytes) const {
    bytes.clear();
    for (size_t i = 0; i < text.size();) {
      const auto b0 = static_cast<unsigned char>(text[i]);
      uint32_t cp;
      if (b0 < 0x80) {
        cp = b0, i += 1;
      } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
        cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu), i += 2;
      } else {
        return false;  // three or more bytes: above U+07FF, outside the alphabet
      }
      if (cp >= std::size(byte_of_) || byte_of_[cp] < 0) return false;
      bytes.push_back(static_cast<char>(byte_of_[cp]));
    }
    return true;
  }

 private:
  int byte_of_[324];  // code point -> byte; the alphabet ends at U+0143
};

Result<std::string> read_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return io_error("{}: cannot read the file", file);
  return text.str();
}

}  // namespace

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::load(const std::string& path) {
  const std::string accepted = "a tokenizer.json file or a directory that holds one (read from disk, never downloaded)";
  if (path.empty()) return invalid_argument("tokenizer_type=huggingface needs tokenizer_path: {}", accepted);
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "tokenizer.json").string();
    if (!fs::is_regular_file(file, ec)) return not_found("tokenizer_path={}: the directory has no tokenizer.json", path);
  } else if (!fs::is_regular_file(path, ec)) {
    return not_found("tokenizer_path={}: no such file or directory; accepted: {}", path, accepted);
  }
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(file));
  return from_json(file, text);
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::from_json(const std::string& file, const std::string& text) {
  KILN_ASSIGN_OR_RETURN(hf::TokenizerSpec spec, hf::parse_tokenizer_json(file, text));
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->file_ = file;
  t->nfc_ = spec.nfc;
  if (spec.nfc && !nfc_available()) {
    return unimplemented("{}: normalizer NFC needs ICU, through Kiln's NFC module, and {} (install libicu-dev, "
                         "e.g. with scripts/setup.sh, and rebuild; or set KILN_NFC_MODULE to libkiln_nfc.so)",
                         file, nfc_unavailable_reason());
  }
  Result<std::unique_ptr<hf::PreTokenizer>> pre = hf::PreTokenizer::compile(spec.pre_tokenizer);
  if (!pre.ok()) return pre.status().with_context(file + ": pre_tokenizer");
  t->pre_tokenizer_ = std::move(pre).value();

  int64_t vocab = 0;
  for (const auto& [s, id] : spec.vocab) vocab = std::max<int64_t>(vocab, int64_t{id} + 1);
  for (const hf::AddedTokenSpec& a : spec.added_tokens) vocab = std::max<int64_t>(vocab, int64_t{a.id} + 1);
  t->vocab_size_ = vocab;
  t->decoder_.assign(static_cast<size_t>(vocab), std::string());
  t->known_.assign(static_cast<size_t>(vocab), 0);

  // The model: tokens spelled in the byte alphabet are BPE's; any other text (a special
  // token kept in the vocabulary) is reachable only as an added token and decodes as itself.
  static const ByteAlphabet alphabet;
  std::vector<uint8_t> byte_level(static_cast<size_t>(vocab), 0);
  std::string bytes;
  for (auto& [s, id] : spec.vocab) {
    const auto i = static_cast<size_t>(id);
    t->known_[i] = 1;
    if (alphabet.decode(s, bytes) && !bytes.empty()) {
      t->bpe_.add_token(bytes, id);  // distinct texts are distinct bytes; ids are distinct (parsed)
      byte_level[i] = 1;
      t->decoder_[i] = bytes;
    } else {
      t->decoder_[i] = std::move(s);
    }
  }
  if (int b = t->bpe_.missing_byte(); b >= 0) {
    return invalid_argument("{}: model.vocab has no token for byte 0x{:02X}; accepted: a byte-level BPE vocabulary "
                            "(one token per byte, in GPT-2's byte alphabet)",
                            file, b);
  }
  // A merge of tokens outside the alphabet can never apply (every piece starts as bytes).
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right, merged] = spec.merges[rank];
    if (byte_level[static_cast<size_t>(left)] && byte_level[static_cast<size_t>(right)]) {
      t->bpe_.add_merge(left, right, merged, static_cast<uint32_t>(rank));
    }
  }
  t->bpe_.set_ignore_merges(spec.ignore_merges);
  if (!spec.ignore_merges) {
    for (const auto& [s, id] : spec.vocab) {
      if (byte_level[static_cast<size_t>(id)]) t->bpe_.note_reachable(t->decoder_[static_cast<size_t>(id)], id);
    }
  }

  for (hf::AddedTokenSpec& a : spec.added_tokens) {
    // A normalized token is matched, and decoded, in its normalized form.
    std::string content = a.content, normalized;
    if (a.normalized && spec.nfc && to_nfc(content, normalized)) content = normalized;
    hf::AddedTokenMatcher::Token token{content, a.id, a.single_word, a.lstrip, a.rstrip};
    (a.normalized ? t->normalized_added_ : t->raw_added_).add(std::move(token));
    const auto i = static_cast<size_t>(a.id);
    // The ByteLevel decoder maps a token's characters back to bytes when all of them are in
    // the alphabet ("<|endoftext|>" is), else writes the token's own UTF-8.
    t->decoder_[i] = alphabet.decode(content, bytes) ? bytes : content;
    t->known_[i] = 1;
  }

  for (int32_t id : {spec.bos, spec.eos}) {
    if (id >= 0 && (id >= vocab || !t->known_[static_cast<size_t>(id)])) {
      return invalid_argument("{}: post_processor adds token id {}, which is neither in model.vocab nor in added_tokens",
                              file, id);
    }
  }
  t->bos_ = spec.bos;
  t->eos_ = spec.eos;
  return t;
}

void HfTokenizer::encode_pieces(std::string_view text, std::vector<int32_t>& out) const {
  pre_tokenizer_->split(text, [&](std::string_view piece) { bpe_.encode_piece(piece, out); });
}

void HfTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_ && to_nfc(text, normalized)) text = normalized;
  if (normalized_added_.empty()) {
    encode_pieces(text, out);
    return;
  }
  normalized_added_.split(text, [&](std::string_view part, int32_t id) {
    if (id >= 0) out.push_back(id);
    else encode_pieces(part, out);
  });
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (raw_added_.empty()) {
    encode_segment(text, out);
    return out;
  }
  raw_added_.split(text, [&](std::string_view part, int32_t id) {
    if (id >= 0) out.push_back(id);
    else encode_segment(part, out);
  });
  return out;
}

Result<std::string> HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_ || !known_[static_cast<size_t>(id)]) {
      return invalid_argument("token id {} is not in the vocabulary of {} (size {})", id, name(), vocab_size_);
    }
    text += decoder_[static_cast<size_t>(id)];
  }
  return text;
}

}  // namespace kiln::data
