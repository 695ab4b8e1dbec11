#include "kiln/ir/attrs.h"

#include <cctype>

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::ir {

namespace {
const AttrValue& lookup(const std::map<std::string, AttrValue>& map, const std::string& key) {
  auto it = map.find(key);
  KILN_CHECK(it != map.end()) << "missing attribute '" << key << "'";
  return it->second;
}
}  // namespace

int64_t Attrs::get_int(const std::string& key) const {
  const AttrValue& v = lookup(map_, key);
  KILN_CHECK(std::holds_alternative<int64_t>(v)) << "attribute '" << key << "' is not an integer";
  return std::get<int64_t>(v);
}

double Attrs::get_float(const std::string& key) const {
  const AttrValue& v = lookup(map_, key);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  KILN_CHECK(std::holds_alternative<double>(v)) << "attribute '" << key << "' is not a number";
  return std::get<double>(v);
}

const std::string& Attrs::get_string(const std::string& key) const {
  const AttrValue& v = lookup(map_, key);
  KILN_CHECK(std::holds_alternative<std::string>(v)) << "attribute '" << key << "' is not a string";
  return std::get<std::string>(v);
}

const std::vector<int64_t>& Attrs::get_ints(const std::string& key) const {
  const AttrValue& v = lookup(map_, key);
  KILN_CHECK(std::holds_alternative<std::vector<int64_t>>(v)) << "attribute '" << key << "' is not a list";
  return std::get<std::vector<int64_t>>(v);
}

int64_t Attrs::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

std::vector<int64_t> Attrs::get_ints_or(const std::string& key, std::vector<int64_t> fallback) const {
  return has(key) ? get_ints(key) : fallback;
}

bool is_identifier(const std::string& text) {
  if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) return false;
  for (char c : text) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  }
  // Reserved words the parser reads as numbers.
  return text != "inf" && text != "nan";
}

std::string quote_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string attr_value_to_string(const AttrValue& value) {
  if (auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&value)) {
    std::string s = fmt::format("{}", *d);
    // Keep floats distinguishable from integers when parsed back.
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (auto* s = std::get_if<std::string>(&value)) return is_identifier(*s) ? *s : quote_string(*s);
  const auto& list = std::get<std::vector<int64_t>>(value);
  std::string out = "{";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + std::to_string(list[i]);
  return out + "}";
}

std::string Sharding::to_string() const {
  std::string out = "{";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ",";
    out += "[";
    for (size_t j = 0; j < dims[i].size(); ++j) out += (j ? "," : "") + dims[i][j];
    out += "]";
  }
  return out + "}";
}

}  // namespace kiln::ir
