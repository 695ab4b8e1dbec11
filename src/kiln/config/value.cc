#include "kiln/config/value.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/base/check.h"
#include "kiln/config/yaml_value.h"

namespace kiln::config {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string without_underscores(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

bool is_null_word(std::string_view s) {
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// A string can be written without quotes if reading it back gives the same string.
bool can_be_plain(const std::string& s) {
  if (s.empty() || is_null_word(s)) return false;
  if (infer_scalar(s).kind() != ValueKind::kString) return false;
  char first = s.front();
  if (!(std::isalnum(static_cast<unsigned char>(first)) || first == '_' || first == '/' ||
        first == '.')) {
    return false;
  }
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
              c == '/' || c == '+';
    if (!ok) return false;
  }
  return true;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out.push_back(c);
    }
  }
  out += "\"";
  return out;
}

std::string format_float(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = fmt::format("{}", v);
  // Keep a float a float when read back: 12 -> 12.0.
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// "1.5" or "[a, b]" as it appears in messages.
std::string show(const Value& v) { return v.to_yaml(); }

}  // namespace

const char* kind_description(ValueKind kind) {
  switch (kind) {
    case ValueKind::kBool: return "a boolean (true or false)";
    case ValueKind::kInt: return "an integer";
    case ValueKind::kFloat: return "a number";
    case ValueKind::kString: return "a string";
    case ValueKind::kList: return "a list like [a, b]";
  }
  return "?";
}

bool Value::as_bool() const {
  KILN_CHECK(kind() == ValueKind::kBool) << "config value " << to_yaml() << " is not a boolean";
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  KILN_CHECK(kind() == ValueKind::kInt) << "config value " << to_yaml() << " is not an integer";
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind() == ValueKind::kInt) return static_cast<double>(std::get<int64_t>(data_));
  KILN_CHECK(kind() == ValueKind::kFloat) << "config value " << to_yaml() << " is not a number";
  return std::get<double>(data_);
}

const std::string& Value::as_string() const {
  KILN_CHECK(kind() == ValueKind::kString) << "config value " << to_yaml() << " is not a string";
  return std::get<std::string>(data_);
}

const std::vector<Value>& Value::as_list() const {
  KILN_CHECK(kind() == ValueKind::kList) << "config value " << to_yaml() << " is not a list";
  return std::get<std::vector<Value>>(data_);
}

std::string Value::to_yaml() const {
  switch (kind()) {
    case ValueKind::kBool: return std::get<bool>(data_) ? "true" : "false";
    case ValueKind::kInt: return std::to_string(std::get<int64_t>(data_));
    case ValueKind::kFloat: return format_float(std::get<double>(data_));
    case ValueKind::kString: {
      const auto& s = std::get<std::string>(data_);
      return can_be_plain(s) ? s : quoted(s);
    }
    case ValueKind::kList: {
      std::string out = "[";
      const auto& items = std::get<std::vector<Value>>(data_);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += items[i].to_yaml();
      }
      return out + "]";
    }
  }
  return "?";
}

std::optional<int64_t> parse_int_literal(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  if (i >= text.size() || !is_digit(text[i])) return std::nullopt;
  for (size_t j = i; j < text.size(); ++j) {
    if (!is_digit(text[j]) && text[j] != '_') return std::nullopt;
  }
  std::string digits = without_underscores(text.substr(text[0] == '+' ? 1 : 0));
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_float_literal(std::string_view text) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    return negative ? -INFINITY : INFINITY;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") return NAN;
  // Mantissa: digits and underscores with at most one '.', at least one digit; then an
  // optional exponent with at least one digit.
  size_t i = 0;
  int digits = 0, dots = 0;
  for (; i < body.size(); ++i) {
    char c = body[i];
    if (is_digit(c)) ++digits;
    else if (c == '.') ++dots;
    else if (c != '_') break;
  }
  if (digits == 0 || dots > 1 || (!body.empty() && body[0] == '_')) return std::nullopt;
  if (i < body.size()) {
    if (body[i] != 'e' && body[i] != 'E') return std::nullopt;
    ++i;
    if (i < body.size() && (body[i] == '-' || body[i] == '+')) ++i;
    if (i >= body.size()) return std::nullopt;
    for (; i < body.size(); ++i) {
      if (!is_digit(body[i])) return std::nullopt;
    }
  }
  std::string clean = without_underscores(text);
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool_literal(std::string_view text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

Value infer_scalar(std::string_view text) {
  if (auto b = parse_bool_literal(text)) return Value::boolean(*b);
  if (auto i = parse_int_literal(text)) return Value::integer(*i);
  if (auto f = parse_float_literal(text)) return Value::floating(*f);
  return Value::string(std::string(text));
}

Result<Value> convert_like(const Value& value, const Value& like) {
  switch (like.kind()) {
    case ValueKind::kBool:
    case ValueKind::kInt:
      if (value.kind() == like.kind()) return value;
      break;
    case ValueKind::kFloat:
      if (value.kind() == ValueKind::kFloat) return value;
      if (value.kind() == ValueKind::kInt) return Value::floating(value.as_float());
      break;
    case ValueKind::kString:
      if (value.kind() == ValueKind::kString) return value;
      // A plain `run_name: 123` in a YAML file is still the string "123".
      if (!value.is_list()) return Value::string(value.to_yaml());
      break;
    case ValueKind::kList: {
      if (!value.is_list()) break;
      const auto& template_items = like.as_list();
      bool uniform = !template_items.empty();
      for (const auto& t : template_items) {
        uniform = uniform && !t.is_list() && t.kind() == template_items[0].kind();
      }
      // Nested or empty defaults (logical_axis_rules, adamw_mask) are checked by the
      // key's own validation rule.
      if (!uniform) return value;
      std::vector<Value> items;
      for (const auto& item : value.as_list()) {
        if (item.is_list() || (template_items[0].kind() == ValueKind::kString &&
                               item.kind() != ValueKind::kString)) {
          return invalid_argument("expected a list of {}s, got {}",
                                  template_items[0].kind() == ValueKind::kString
                                      ? "string"
                                      : kind_description(template_items[0].kind()),
                                  show(value));
        }
        KILN_ASSIGN_OR_RETURN(Value converted, convert_like(item, template_items[0]));
        items.push_back(std::move(converted));
      }
      return Value::list(std::move(items));
    }
  }
  return invalid_argument("expected {}, got {}", kind_description(like.kind()), show(value));
}

Result<Value> parse_override_text(std::string_view text, const Value& like) {
  std::string shown = text.empty() ? "an empty value" : std::string(text);
  switch (like.kind()) {
    case ValueKind::kBool:
      // MaxText accepts any capitalisation of true/false on the command line.
      if (text.size() == 4 || text.size() == 5) {
        std::string lower;
        for (char c : text) lower.push_back(static_cast<char>(std::tolower(c)));
        if (lower == "true") return Value::boolean(true);
        if (lower == "false") return Value::boolean(false);
      }
      return invalid_argument("expected true or false, got {}", shown);
    case ValueKind::kInt:
      if (auto i = parse_int_literal(text)) return Value::integer(*i);
      return invalid_argument("expected an integer, got {}", shown);
    case ValueKind::kFloat:
      if (auto f = parse_float_literal(text)) return Value::floating(*f);
      return invalid_argument("expected a number, got {}", shown);
    case ValueKind::kString: {
      // The shell has usually stripped quotes already; strip one more pair so that
      // key='""' and key="'x'" mean "" and x.
      if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') &&
          text.back() == text.front()) {
        text = text.substr(1, text.size() - 2);
      }
      return Value::string(std::string(text));
    }
    case ValueKind::kList: {
      if (text.empty() || text.front() != '[') {
        return invalid_argument("expected a list like [a, b], got {}", shown);
      }
      YAML::Node node;
      try {
        node = YAML::Load(std::string(text));
      } catch (const YAML::Exception& e) {
        return invalid_argument("expected a list like [a, b], got {} ({})", shown, e.msg);
      }
      KILN_ASSIGN_OR_RETURN(Value parsed, value_from_yaml(node));
      return convert_like(parsed, like);
    }
  }
  return invalid_argument("unsupported value {}", shown);
}

}  // namespace kiln::config
