#include "kiln/ir/parser.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "kiln/base/sizes.h"

namespace kiln::ir {

namespace {

// More parameters than any program has: an index at or past this is a corrupt file.
constexpr int64_t kMaxParameters = int64_t{1} << 20;
constexpr int kMaxTupleDepth = 32;

enum class Tok { kEnd, kPercent, kAt, kIdent, kNumber, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier/name without sigil, number text, unescaped string, punct
  int line = 1, column = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  Result<Token> next() {
    skip_space_and_comments();
    Token t;
    t.line = line_;
    t.column = column_;
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    if (c == '%' || c == '@') {
      advance();
      t.kind = c == '%' ? Tok::kPercent : Tok::kAt;
      t.text = read_name();
      if (t.text.empty()) return error(t, fmt::format("expected a name after '{}'", c));
      return t;
    }
    if (c == '"') {
      advance();
      t.kind = Tok::kString;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        char ch = text_[pos_];
        if (ch == '\n') return error(t, "unterminated string");
        if (ch == '\\' && pos_ + 1 < text_.size()) {
          advance();
          ch = text_[pos_] == 'n' ? '\n' : text_[pos_];
        }
        t.text += ch;
        advance();
      }
      if (pos_ >= text_.size()) return error(t, "unterminated string");
      advance();
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' ||
        (c == '.' && pos_ + 1 < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])))) {
      t.kind = Tok::kNumber;
      t.text += c;
      advance();
      while (pos_ < text_.size()) {
        char ch = text_[pos_];
        bool exponent_sign = (ch == '-' || ch == '+') && (t.text.back() == 'e' || t.text.back() == 'E');
        if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || exponent_sign) {
          t.text += ch;
          advance();
        } else {
          break;
        }
      }
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::kIdent;
      t.text = read_name();
      return t;
    }
    if (std::string_view("=(){}[],:").find(c) != std::string_view::npos) {
      t.kind = Tok::kPunct;
      t.text = std::string(1, c);
      advance();
      return t;
    }
    return error(t, fmt::format("unexpected character '{}'", c));
  }

  static Status error(const Token& at, const std::string& message) {
    return invalid_argument("line {}, column {}: {}", at.line, at.column, message);
  }

 private:
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++pos_;
  }
  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }
  std::string read_name() {
    std::string out;
    while (pos_ < text_.size()) {
      char ch = text_[pos_];
      if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-') {
        out += ch;
        advance();
      } else {
        break;
      }
    }
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1, column_ = 1;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : lexer_(text) {}

  Result<std::unique_ptr<Module>> parse() {
    KILN_RETURN_IF_ERROR(advance());
    KILN_RETURN_IF_ERROR(expect_ident("module"));
    if (tok_.kind != Tok::kAt) return error("expected @name after 'module'");
    auto module = std::make_unique<Module>(tok_.text);
    KILN_RETURN_IF_ERROR(advance());
    Computation* entry = nullptr;
    while (tok_.kind != Tok::kEnd) {
      bool is_entry = false;
      if (is_ident("ENTRY")) {
        is_entry = true;
        KILN_RETURN_IF_ERROR(advance());
      }
      KILN_RETURN_IF_ERROR(expect_ident("computation"));
      if (tok_.kind != Tok::kAt) return error("expected @name after 'computation'");
      if (module->find_computation(tok_.text)) return error("duplicate computation @" + tok_.text);
      Computation* comp = module->add_computation(tok_.text);
      if (is_entry) {
        if (entry) return error("a second ENTRY computation");
        entry = comp;
      }
      KILN_RETURN_IF_ERROR(advance());
      KILN_RETURN_IF_ERROR(expect_punct("{"));
      KILN_RETURN_IF_ERROR(parse_body(comp));
    }
    if (!entry) return error("the module has no ENTRY computation");
    module->set_entry(entry);
    for (auto& [instr, names] : pending_calls_) {
      std::vector<Computation*> called;
      for (const auto& [name, at] : names) {
        Computation* c = module->find_computation(name);
        if (!c) return Lexer::error(at, "unknown computation @" + name);
        called.push_back(c);
      }
      instr->set_called(std::move(called));
    }
    return module;
  }

  Result<Shape> parse_shape_only() {
    KILN_RETURN_IF_ERROR(advance());
    KILN_ASSIGN_OR_RETURN(Shape s, parse_shape());
    if (tok_.kind != Tok::kEnd) return error("unexpected text after the shape");
    return s;
  }

 private:
  Status advance() {
    KILN_ASSIGN_OR_RETURN(tok_, lexer_.next());
    return ok_status();
  }
  Status error(const std::string& message) const {
    std::string found = tok_.kind == Tok::kEnd ? "end of input" : "'" + tok_.text + "'";
    return Lexer::error(tok_, message + " (found " + found + ")");
  }
  bool is_ident(const char* word) const { return tok_.kind == Tok::kIdent && tok_.text == word; }
  bool is_punct(const char* p) const { return tok_.kind == Tok::kPunct && tok_.text == p; }
  Status expect_ident(const char* word) {
    if (!is_ident(word)) return error(fmt::format("expected '{}'", word));
    return advance();
  }
  Status expect_punct(const char* p) {
    if (!is_punct(p)) return error(fmt::format("expected '{}'", p));
    return advance();
  }

  Result<int64_t> parse_int() {
    if (tok_.kind != Tok::kNumber) return error("expected an integer");
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok_.text.c_str(), &end, 10);
    if (*end != '\0') return error("expected an integer");
    if (errno == ERANGE) return error("integer out of the 64-bit range");
    KILN_RETURN_IF_ERROR(advance());
    return static_cast<int64_t>(v);
  }

  Result<double> parse_number() {
    std::string text;
    if (tok_.kind == Tok::kIdent && (tok_.text == "inf" || tok_.text == "nan")) {
      text = tok_.text;
    } else if (tok_.kind == Tok::kNumber) {
      text = tok_.text;
    } else {
      return error("expected a number");
    }
    KILN_RETURN_IF_ERROR(advance());
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
    if (text == "inf" || text == "+inf") return std::numeric_limits<double>::infinity();
    if (text == "nan" || text == "-nan") return std::numeric_limits<double>::quiet_NaN();
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (*end != '\0') return Lexer::error(tok_, "malformed number '" + text + "'");
    return v;
  }

  Result<Shape> parse_shape(int depth = 0) {
    if (is_punct("(")) {
      // Tuples nest only a few levels in real programs; a bound keeps hostile text from
      // exhausting the stack.
      if (depth >= kMaxTupleDepth) return error(fmt::format("tuple shapes nest deeper than {}", kMaxTupleDepth));
      KILN_RETURN_IF_ERROR(advance());
      std::vector<Shape> elements;
      while (!is_punct(")")) {
        if (!elements.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
        KILN_ASSIGN_OR_RETURN(Shape e, parse_shape(depth + 1));
        elements.push_back(std::move(e));
      }
      KILN_RETURN_IF_ERROR(advance());
      return Shape::tuple(std::move(elements));
    }
    if (tok_.kind != Tok::kIdent) return error("expected a shape like f32[2,3]");
    auto dtype = parse_dtype(tok_.text);
    if (!dtype) return error("unknown element type; accepted: pred, s32, u32, bf16, f32, f64");
    KILN_RETURN_IF_ERROR(advance());
    KILN_RETURN_IF_ERROR(expect_punct("["));
    std::vector<int64_t> dims;
    while (!is_punct("]")) {
      if (!dims.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
      KILN_ASSIGN_OR_RETURN(int64_t d, parse_int());
      if (d < 0) return error("negative dimension");
      dims.push_back(d);
    }
    if (!checked_element_count(dims)) return error(fmt::format("shape has more than {} elements", kMaxFileTensorElements));
    KILN_RETURN_IF_ERROR(advance());
    return Shape(*dtype, std::move(dims));
  }

  // {1, 2, 3} or a single number, in the constant's dtype.
  Result<Literal> parse_literal(const Shape& shape) {
    if (shape.is_tuple()) return error("tuple-shaped constants are not supported");
    std::vector<double> values;
    if (is_punct("{")) {
      KILN_RETURN_IF_ERROR(advance());
      while (!is_punct("}")) {
        if (!values.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
        KILN_ASSIGN_OR_RETURN(double v, parse_number());
        values.push_back(v);
      }
      KILN_RETURN_IF_ERROR(advance());
    } else {
      KILN_ASSIGN_OR_RETURN(double v, parse_number());
      values.push_back(v);
    }
    if (static_cast<int64_t>(values.size()) != shape.num_elements()) {
      return error(fmt::format("constant of shape {} needs {} values, got {}", shape.to_string(),
                               shape.num_elements(), values.size()));
    }
    return Literal(shape, std::move(values));
  }

  Result<AttrValue> parse_attr_value() {
    if (is_punct("{")) {
      KILN_RETURN_IF_ERROR(advance());
      std::vector<int64_t> list;
      while (!is_punct("}")) {
        if (!list.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
        KILN_ASSIGN_OR_RETURN(int64_t v, parse_int());
        list.push_back(v);
      }
      KILN_RETURN_IF_ERROR(advance());
      return AttrValue(std::move(list));
    }
    if (tok_.kind == Tok::kString || (tok_.kind == Tok::kIdent && tok_.text != "inf" && tok_.text != "nan")) {
      std::string s = tok_.text;
      KILN_RETURN_IF_ERROR(advance());
      return AttrValue(std::move(s));
    }
    bool is_float = tok_.kind != Tok::kNumber || tok_.text.find_first_of(".eEn") != std::string::npos;
    if (is_float) {
      KILN_ASSIGN_OR_RETURN(double v, parse_number());
      return AttrValue(v);
    }
    KILN_ASSIGN_OR_RETURN(int64_t v, parse_int());
    return AttrValue(v);
  }

  Result<std::vector<std::string>> parse_axes() {
    KILN_RETURN_IF_ERROR(expect_punct("{"));
    std::vector<std::string> axes;
    bool first = true;
    while (!is_punct("}")) {
      if (!first) KILN_RETURN_IF_ERROR(expect_punct(","));
      first = false;
      if (tok_.kind != Tok::kIdent) return error("expected a logical axis name or _");
      axes.push_back(tok_.text == "_" ? "" : tok_.text);
      KILN_RETURN_IF_ERROR(advance());
    }
    KILN_RETURN_IF_ERROR(advance());
    return axes;
  }

  Result<Sharding> parse_sharding() {
    KILN_RETURN_IF_ERROR(expect_punct("{"));
    Sharding sharding;
    while (!is_punct("}")) {
      if (!sharding.dims.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
      KILN_RETURN_IF_ERROR(expect_punct("["));
      std::vector<std::string> axes;
      while (!is_punct("]")) {
        if (!axes.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
        if (tok_.kind != Tok::kIdent) return error("expected a mesh axis name");
        axes.push_back(tok_.text);
        KILN_RETURN_IF_ERROR(advance());
      }
      KILN_RETURN_IF_ERROR(advance());
      sharding.dims.push_back(std::move(axes));
    }
    KILN_RETURN_IF_ERROR(advance());
    return sharding;
  }

  Status parse_body(Computation* comp) {
    std::unordered_map<std::string, Instr*> names;
    while (!is_punct("}")) {
      if (tok_.kind == Tok::kEnd) return error("missing '}' at the end of computation @" + comp->name());
      bool is_root = false;
      if (is_ident("ROOT")) {
        is_root = true;
        KILN_RETURN_IF_ERROR(advance());
      }
      if (tok_.kind != Tok::kPercent) return error("expected an instruction '%name = ...'");
      Token id_tok = tok_;
      if (seen_ids_.count(id_tok.text)) return error("duplicate instruction name %" + id_tok.text);
      KILN_RETURN_IF_ERROR(advance());
      KILN_RETURN_IF_ERROR(expect_punct("="));
      KILN_ASSIGN_OR_RETURN(Shape shape, parse_shape());
      if (tok_.kind != Tok::kIdent) return error("expected an opcode");
      auto opcode = parse_opcode(tok_.text);
      if (!opcode) return error("unknown opcode '" + tok_.text + "'");
      KILN_RETURN_IF_ERROR(advance());
      KILN_RETURN_IF_ERROR(expect_punct("("));
      std::vector<Instr*> operands;
      std::optional<Literal> literal;
      if (*opcode == Opcode::kConstant) {
        KILN_ASSIGN_OR_RETURN(Literal lit, parse_literal(shape));
        literal = std::move(lit);
      } else {
        while (!is_punct(")")) {
          if (!operands.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
          if (tok_.kind != Tok::kPercent) return error("expected an operand %name");
          auto it = names.find(tok_.text);
          if (it == names.end()) return error("unknown operand %" + tok_.text + " (operands must be defined above)");
          operands.push_back(it->second);
          KILN_RETURN_IF_ERROR(advance());
        }
      }
      KILN_RETURN_IF_ERROR(expect_punct(")"));
      Attrs attrs;
      Metadata meta;
      std::vector<std::pair<std::string, Token>> calls;
      while (is_punct(",")) {
        KILN_RETURN_IF_ERROR(advance());
        if (tok_.kind != Tok::kIdent) return error("expected an attribute name");
        std::string key = tok_.text;
        KILN_RETURN_IF_ERROR(advance());
        KILN_RETURN_IF_ERROR(expect_punct("="));
        if (key == "name" || key == "loc") {
          if (tok_.kind != Tok::kString && tok_.kind != Tok::kIdent) return error("expected a string");
          (key == "name" ? meta.name : meta.loc) = tok_.text;
          KILN_RETURN_IF_ERROR(advance());
        } else if (key == "axes") {
          KILN_ASSIGN_OR_RETURN(meta.axes, parse_axes());
        } else if (key == "sharding") {
          KILN_ASSIGN_OR_RETURN(Sharding s, parse_sharding());
          meta.sharding = std::move(s);
        } else if (key == "stage") {
          if (tok_.kind != Tok::kNumber) return error("expected a stage number");
          KILN_ASSIGN_OR_RETURN(int64_t stage, parse_int());
          if (stage < 0 || stage > std::numeric_limits<int32_t>::max()) return error("stage must be in [0, 2^31)");
          meta.stage = static_cast<int32_t>(stage);
        } else if (key == "calls") {
          KILN_RETURN_IF_ERROR(expect_punct("{"));
          while (!is_punct("}")) {
            if (!calls.empty()) KILN_RETURN_IF_ERROR(expect_punct(","));
            if (tok_.kind != Tok::kAt) return error("expected @computation");
            calls.push_back({tok_.text, tok_});
            KILN_RETURN_IF_ERROR(advance());
          }
          KILN_RETURN_IF_ERROR(advance());
        } else {
          if (attrs.has(key)) return error("duplicate attribute '" + key + "'");
          KILN_ASSIGN_OR_RETURN(AttrValue v, parse_attr_value());
          attrs.set(key, std::move(v));
        }
      }
      Instr* instr = nullptr;
      if (literal) {
        instr = comp->add_constant(std::move(*literal), id_tok.text);
      } else {
        if (*opcode == Opcode::kParameter) {
          if (!attrs.has("index") || !std::holds_alternative<int64_t>(attrs.map().at("index"))) {
            return Lexer::error(id_tok, "parameter needs an integer index=N attribute");
          }
          int64_t index = attrs.get_int("index");
          // Indices must end up dense (checked below), so one past the parameters of the
          // whole text is an upper bound; it also keeps a huge index from allocating.
          if (index < 0 || index >= kMaxParameters ||
              (index < comp->num_params() && comp->param(static_cast<int>(index)))) {
            return Lexer::error(id_tok, fmt::format("duplicate, negative or too large (>= {}) parameter index {}",
                                                    kMaxParameters, index));
          }
        }
        instr = comp->add(*opcode, std::move(shape), std::move(operands), std::move(attrs), id_tok.text);
      }
      instr->mutable_meta() = std::move(meta);
      if (!calls.empty()) pending_calls_.push_back({instr, std::move(calls)});
      names[id_tok.text] = instr;
      seen_ids_.insert({id_tok.text, true});
      if (is_root) {
        if (comp->root()) return Lexer::error(id_tok, "a second ROOT in computation @" + comp->name());
        comp->set_root(instr);
      }
    }
    KILN_RETURN_IF_ERROR(advance());
    if (!comp->root()) {
      if (comp->instructions().empty()) return error("computation @" + comp->name() + " is empty");
      return error("computation @" + comp->name() + " has no ROOT instruction");
    }
    for (int i = 0; i < comp->num_params(); ++i) {
      if (!comp->param(i)) return error(fmt::format("computation @{} lacks parameter index {}", comp->name(), i));
    }
    return ok_status();
  }

  Lexer lexer_;
  Token tok_;
  std::unordered_map<std::string, bool> seen_ids_;
  std::vector<std::pair<Instr*, std::vector<std::pair<std::string, Token>>>> pending_calls_;
};

}  // namespace

Result<std::unique_ptr<Module>> parse_module(std::string_view text) { return Parser(text).parse(); }

Result<Shape> parse_shape(std::string_view text) { return Parser(text).parse_shape_only(); }

}  // namespace kiln::ir
