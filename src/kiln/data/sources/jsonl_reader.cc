#include "kiln/data/sources/jsonl_reader.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::data {
namespace {

// Decompressed bytes asked for at a time; the line buffer holds about twice this plus the
// longest line.
constexpr size_t kChunk = size_t{1} << 20;

// Splits a byte stream into lines ('\n', with a '\r' before it dropped; a last line without
// '\n' counts), holding only the bytes of the line being cut.
class LineSplitter {
 public:
  explicit LineSplitter(std::unique_ptr<ByteStream> in) : in_(std::move(in)) {}

  // The next line into *line (valid until the next call); false at the end.
  Result<bool> next(std::string_view* line) {
    for (;;) {
      const void* nl = end_ > scan_ ? std::memchr(buf_.data() + scan_, '\n', end_ - scan_) : nullptr;
      if (nl) {
        size_t stop = static_cast<const char*>(nl) - buf_.data();
        *line = cut(stop);
        begin_ = scan_ = stop + 1;
        return true;
      }
      scan_ = end_;
      if (eof_) {
        if (begin_ == end_) return false;
        *line = cut(end_);
        begin_ = scan_ = end_;
        return true;
      }
      // Move the partial line to the front, grow only if it leaves less than a chunk free.
      if (begin_ > 0) {
        std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        scan_ -= begin_;
        begin_ = 0;
      }
      if (buf_.size() - end_ < kChunk) buf_.resize(std::max(2 * kChunk, end_ + kChunk));
      auto n = in_->read(buf_.data() + end_, buf_.size() - end_);
      if (!n.ok()) return n.status();
      end_ += *n;
      eof_ = *n == 0;
    }
  }

 private:
  std::string_view cut(size_t stop) const {
    std::string_view s(buf_.data() + begin_, stop - begin_);
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    return s;
  }

  std::unique_ptr<ByteStream> in_;
  std::vector<char> buf_;
  size_t begin_ = 0, scan_ = 0, end_ = 0;  // the unread bytes are [begin_, end_); no '\n' in [begin_, scan_)
  bool eof_ = false;
};

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

enum class Kind { kNone, kNull, kBool, kNumber, kString, kBinary, kObject, kArray };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "nothing";
    case Kind::kNull: return "null";
    case Kind::kBool: return "a boolean";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kBinary: return "binary";
    case Kind::kObject: return "an object";
    case Kind::kArray: return "an array";
  }
  return "?";
}

// nlohmann-json SAX events for one line: validates the whole line as JSON and keeps only
// the top-level value's kind and the string value of `field` among its top-level members
// (the last one, if the key repeats, as a DOM parse would keep). No DOM is built.
struct FieldFinder {
  using json = nlohmann::json;
  const std::string* field;
  std::string* text;
  Kind top = Kind::kNone, found = Kind::kNone;
  int depth = 0;
  bool key_matches = false;  // the member being read at depth 1 is `field`
  std::string error;

  bool seen(Kind kind) {
    if (depth == 0) top = kind;
    if (depth == 1 && key_matches) found = kind;
    return true;
  }
  bool null() { return seen(Kind::kNull); }
  bool boolean(bool) { return seen(Kind::kBool); }
  bool number_integer(json::number_integer_t) { return seen(Kind::kNumber); }
  bool number_unsigned(json::number_unsigned_t) { return seen(Kind::kNumber); }
  bool number_float(json::number_float_t, const json::string_t&) { return seen(Kind::kNumber); }
  bool binary(json::binary_t&) { return seen(Kind::kBinary); }
  bool string(json::string_t& s) {
    if (depth == 1 && key_matches) text->swap(s);  // keeps the capacity of the last document
    return seen(Kind::kString);
  }
  bool start_object(std::size_t) {
    seen(Kind::kObject);
    ++depth;
    return true;
  }
  bool end_object() {
    --depth;
    return true;
  }
  bool start_array(std::size_t) {
    seen(Kind::kArray);
    ++depth;
    return true;
  }
  bool end_array() {
    --depth;
    return true;
  }
  bool key(json::string_t& k) {
    if (depth == 1) key_matches = k == *field;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }
};

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." ->
// "column 5: syntax error ..." (the line is ours to name), at most 200 characters.
std::string parse_error_detail(std::string what) {
  if (what.starts_with("[json.exception.")) {
    size_t close = what.find("] ");
    if (close != std::string::npos) what.erase(0, close + 2);
  }
  if (what.starts_with("parse error at line 1, ")) what.erase(0, std::strlen("parse error at line 1, "));
  if (what.size() > 200) what = what.substr(0, 200) + "...";
  return what;
}

class JsonlReader final : public DocumentReader {
 public:
  JsonlReader(std::string path, std::string field, std::unique_ptr<ByteStream> in)
      : path_(std::move(path)), field_(std::move(field)), lines_(std::move(in)) {}

  Result<bool> next(std::string* text) override {
    std::string_view line;
    for (;;) {
      auto more = lines_.next(&line);
      if (!more.ok()) return more.status();
      if (!*more) return false;
      ++line_number_;
      if (!blank(line)) break;  // an empty line is no document
    }
    ++documents_;
    FieldFinder finder{&field_, text};
    // A whole-file JSON array (what some .json files hold) is not JSON Lines: say so.
    const char* hint = documents_ == 1 && line.find_first_not_of(" \t") != std::string_view::npos &&
                               line[line.find_first_not_of(" \t")] == '['
                           ? " (the file must be JSON Lines, one object per line, not a JSON array)"
                           : "";
    if (!nlohmann::json::sax_parse(line.data(), line.data() + line.size(), &finder)) {
      return invalid_argument("{}: line {}: not valid JSON: {}{}", path_, line_number_,
                              parse_error_detail(finder.error), hint);
    }
    if (finder.top != Kind::kObject) {
      return invalid_argument("{}: line {}: expected a JSON object with a string field \"{}\", found {}{}", path_,
                              line_number_, field_, kind_name(finder.top), hint);
    }
    if (finder.found == Kind::kNone) {
      return invalid_argument("{}: line {}: the JSON object has no field \"{}\" (its fields: {})", path_,
                              line_number_, field_, field_names(line));
    }
    if (finder.found != Kind::kString) {
      return invalid_argument("{}: line {}: field \"{}\" is {}, not a string", path_, line_number_, field_,
                              kind_name(finder.found));
    }
    return true;
  }

  // Counts non-blank lines without parsing them: every non-blank line is one document (or
  // an error when read), so the position is the same as reading would reach, only a bad line
  // inside the skipped range goes unreported. Compressed files are still decompressed.
  Status skip(int64_t n) override {
    if (n < 0) return invalid_argument("{}: cannot skip {} documents (negative)", path_, n);
    const int64_t start = documents_;
    std::string_view line;
    while (documents_ - start < n) {
      auto more = lines_.next(&line);
      if (!more.ok()) return more.status();
      if (!*more) {
        return invalid_argument("{}: skipping {} documents from document {} is out of range: the file has {} documents",
                                path_, n, start, documents_);
      }
      ++line_number_;
      if (!blank(line)) ++documents_;
    }
    return ok_status();
  }

  int64_t num_documents() const override { return -1; }

 private:
  // The top-level keys of a valid JSON object line, for the missing-field message.
  static std::string field_names(std::string_view line) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string names;
    int count = 0;
    for (const auto& [key, value] : j.items()) {
      if (count++ == 10) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "" : ", ") + key;
    }
    return names.empty() ? "none" : names;
  }

  std::string path_, field_;
  LineSplitter lines_;
  int64_t line_number_ = 0;  // lines read, blank ones included (1-based number of the last)
  int64_t documents_ = 0;    // documents read or skipped
};

}  // namespace

Result<std::unique_ptr<DocumentReader>> open_jsonl_reader(const std::string& path, const std::string& field,
                                                          Compression compression) {
  KILN_ASSIGN_OR_RETURN(auto in, open_byte_stream(path, compression));
  return std::unique_ptr<DocumentReader>(std::make_unique<JsonlReader>(path, field, std::move(in)));
}

}  // namespace kiln::data
