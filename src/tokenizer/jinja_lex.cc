// sinkq/tokenizer/jinja_lex.cc — newline normalisation, positions and the lexer of chat
// templates (see jinja_lex.h for the whitespace rules it implements).
#include "tokenizer/jinja_lex.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_pystr.h"
#include "tokenizer/jinja_value.h"

namespace sinkq::jinja {

std::string normalize_newlines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out += text[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::pair<int, int> line_col(std::string_view text, uint32_t pos) {
  pos = std::min<uint32_t>(pos, static_cast<uint32_t>(text.size()));
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  return {line, static_cast<int>(py::length(text.substr(line_start, pos - line_start))) + 1};
}

void syntax_error(uint32_t pos, std::string msg) { throw Failure("syntax error: " + msg, Failure::Kind::Error, pos); }

namespace {

// The code point at s[i] and its length in bytes.
char32_t cp_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  *len = std::min(n, s.size() - i);
  return py::decode(s.substr(i, *len))[0];
}

bool space_at(std::string_view s, size_t i, size_t* len) { return i < s.size() && py::is_space(cp_at(s, i, len)); }

size_t skip_space(std::string_view s, size_t i) {
  size_t len;
  while (space_at(s, i, &len)) i += len;
  return i;
}

// Python's str.rstrip(): the length without trailing whitespace.
size_t rstrip_len(std::string_view s) {
  const std::u32string cps = py::decode(s);
  size_t e = cps.size();
  while (e > 0 && py::is_space(cps[e - 1])) --e;
  return py::encode(std::u32string_view(cps).substr(0, e)).size();
}

bool all_space(std::string_view s) {
  size_t len;
  for (size_t i = 0; i < s.size(); i += len)
    if (!space_at(s, i, &len)) return false;
  return true;
}

bool starts(std::string_view s, size_t i, std::string_view what) { return s.substr(i, what.size()) == what; }

// Python's unicode-escape decoding of a string literal's body.
std::string decode_string(std::string_view body, uint32_t pos) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t n) {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = i + k < body.size() ? body[i + k] : 0;
        int d;
        if (h >= '0' && h <= '9') {
          d = h - '0';
        } else if (h >= 'a' && h <= 'f') {
          d = h - 'a' + 10;
        } else if (h >= 'A' && h <= 'F') {
          d = h - 'A' + 10;
        } else {
          syntax_error(pos, "truncated \\x, \\u or \\U escape in a string");
        }
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += n;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) syntax_error(pos, "a string escape names an invalid code point");
      py::append_cp(out, v);
    };
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': syntax_error(pos, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          py::append_cp(out, v);
        } else {
          out += '\\';  // an unknown escape keeps its backslash
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root();
    push(Tok::Eof, static_cast<uint32_t>(s_.size()));
    return std::move(out_);
  }

 private:
  enum class TagKind { Var, Block, Comment, Raw };

  void push(Tok t, uint32_t at, std::string text = {}) {
    Token tok;
    tok.type = t;
    tok.pos = at;
    tok.text = std::move(text);
    out_.push_back(std::move(tok));
  }

  // Text up to the next tag, with that tag's whitespace control applied, then the tag.
  void root() {
    size_t t = pos_;
    while (true) {
      t = s_.find('{', t);
      if (t == std::string_view::npos || t + 1 >= s_.size()) {
        push(Tok::Data, static_cast<uint32_t>(pos_), std::string(s_.substr(pos_)));
        pos_ = s_.size();
        return;
      }
      const char n = s_[t + 1];
      if (n == '{' || n == '%' || n == '#') break;
      ++t;
    }
    const char n = s_[t + 1];
    const char sign = t + 2 < s_.size() && (s_[t + 2] == '-' || s_[t + 2] == '+') ? s_[t + 2] : 0;
    TagKind kind = n == '{' ? TagKind::Var : n == '#' ? TagKind::Comment : TagKind::Block;
    size_t raw_body = 0;  // for raw: where its text starts
    if (kind == TagKind::Block) {
      // {%(-|+|)\s*raw\s*(-%}\s*|%})
      size_t i = skip_space(s_, t + 2 + (sign ? 1 : 0));
      if (starts(s_, i, "raw")) {
        i = skip_space(s_, i + 3);
        if (starts(s_, i, "-%}")) {
          kind = TagKind::Raw;
          raw_body = skip_space(s_, i + 3);
        } else if (starts(s_, i, "%}")) {
          kind = TagKind::Raw;
          raw_body = i + 2;
        }
      }
    }
    std::string_view text = s_.substr(pos_, t - pos_);
    text = strip_before(text, sign, kind != TagKind::Var);
    if (!text.empty()) push(Tok::Data, static_cast<uint32_t>(pos_), std::string(text));
    const size_t after = t + 2 + (sign ? 1 : 0);
    switch (kind) {
      case TagKind::Comment: comment(t, after); break;
      case TagKind::Raw:
        line_starting_ = s_[raw_body - 1] == '\n';
        raw(t, raw_body);
        break;
      case TagKind::Var:
      case TagKind::Block: tag(t, after, kind == TagKind::Block); break;
    }
  }

  // The whitespace control a tag applies to the text before it.
  std::string_view strip_before(std::string_view text, char sign, bool lstrip) const {
    if (sign == '-') return text.substr(0, rstrip_len(text));
    if (sign == '+' || !lstrip) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < text.size() && all_space(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  // After an end tag: where the text resumes, given "+X}", "-X}" (+ whitespace) or "X}" (+ one
  // newline when `trim` - trim_blocks for blocks and comments).
  size_t after_end(size_t end_at, size_t close_len, char sign, bool trim) {
    size_t p = end_at + close_len;
    if (sign == '-') {
      p = skip_space(s_, p);
    } else if (sign == 0 && trim && p < s_.size() && s_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && s_[p - 1] == '\n';
    return p;
  }

  void comment(size_t begin, size_t from) {
    const size_t close = s_.find("#}", from);
    if (close == std::string_view::npos) syntax_error(static_cast<uint32_t>(begin), "missing end of comment tag '#}'");
    const char sign = close > from && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
    pos_ = after_end(close, 2, sign, true);
  }

  void raw(size_t begin, size_t body) {
    // (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?))
    for (size_t t = s_.find("{%", body); t != std::string_view::npos; t = s_.find("{%", t + 1)) {
      const char sign = t + 2 < s_.size() && (s_[t + 2] == '-' || s_[t + 2] == '+') ? s_[t + 2] : 0;
      size_t i = skip_space(s_, t + 2 + (sign ? 1 : 0));
      if (!starts(s_, i, "endraw")) continue;
      i = skip_space(s_, i + 6);
      char end_sign = 0;
      size_t close_len;
      if (starts(s_, i, "+%}")) {
        end_sign = '+', close_len = 3;
      } else if (starts(s_, i, "-%}")) {
        end_sign = '-', close_len = 3;
      } else if (starts(s_, i, "%}")) {
        close_len = 2;
      } else {
        continue;
      }
      std::string_view text = strip_before(s_.substr(body, t - body), sign, true);
      if (!text.empty()) push(Tok::Data, static_cast<uint32_t>(body), std::string(text));
      pos_ = after_end(i, close_len, end_sign, true);
      return;
    }
    syntax_error(static_cast<uint32_t>(begin), "missing {% endraw %} for this {% raw %}");
  }

  // The tokens of a {{ }} or {% %} tag.
  void tag(size_t begin, size_t p, bool block) {
    push(block ? Tok::BlockBegin : Tok::VarBegin, static_cast<uint32_t>(begin));
    std::vector<char> brackets;
    while (true) {
      p = skip_space(s_, p);
      if (p >= s_.size()) {
        push(Tok::Eof, static_cast<uint32_t>(s_.size()));  // the parser reports the unclosed tag
        pos_ = s_.size();
        return;
      }
      if (brackets.empty()) {
        const char close = block ? '%' : '}';
        for (char sign : {'+', '-', '\0'}) {
          if (sign == '+' && !block) continue;
          const size_t i = p + (sign ? 1 : 0);
          if ((sign == 0 || s_[p] == sign) && starts(s_, i, std::string{close, '}'})) {
            push(block ? Tok::BlockEnd : Tok::VarEnd, static_cast<uint32_t>(p));
            pos_ = after_end(i, 2, sign, block);
            return;
          }
        }
      }
      p = token(p, brackets);
    }
  }

  // One token at p; returns the position after it.
  size_t token(size_t p, std::vector<char>& brackets) {
    const char c = s_[p];
    const auto at = static_cast<uint32_t>(p);
    if (std::isdigit(static_cast<unsigned char>(c))) return number(p);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
      push(Tok::Name, at, std::string(s_.substr(p, e - p)));
      return e;
    }
    if (c == '\'' || c == '"') {
      size_t e = p + 1;
      while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
      if (e >= s_.size()) syntax_error(at, "unterminated string");
      push(Tok::String, at, decode_string(s_.substr(p + 1, e - p - 1), at));
      return e + 1;
    }
    static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~",
                                                "[",  "]",  "(",  ")",  "{",  "}",  "<", ">", "=", ".", ":", "|",
                                                ",",  ";"};
    for (std::string_view op : kOps) {
      if (!starts(s_, p, op)) continue;
      if (op == "(" || op == "[" || op == "{") {
        brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets.empty()) syntax_error(at, fmt::format("unexpected '{}'", op));
        if (brackets.back() != op[0]) syntax_error(at, fmt::format("unexpected '{}', expected '{}'", op, brackets.back()));
        brackets.pop_back();
      }
      push(Tok::Op, at, std::string(op));
      return p + op.size();
    }
    size_t len;
    cp_at(s_, p, &len);
    syntax_error(at, fmt::format("unexpected character {}", py::repr(s_.substr(p, len))));
  }

  // Integer (decimal, 0b, 0o, 0x; '_' between digits) or float (digits with a fraction and/or an
  // exponent), as jinja2's integer_re / float_re.
  size_t number(size_t p) {
    const auto at = static_cast<uint32_t>(p);
    auto digits = [&](size_t i, auto is_digit) {
      // (_?D)* after a first digit already consumed: returns the end.
      while (i < s_.size()) {
        if (is_digit(s_[i])) {
          ++i;
        } else if (s_[i] == '_' && i + 1 < s_.size() && is_digit(s_[i + 1])) {
          i += 2;
        } else {
          break;
        }
      }
      return i;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    // Float first: \d+(_\d+)* then (.\d+(_\d+)*)? e[+-]?\d+(_\d+)* | .\d+(_\d+)*
    const bool after_dot = p > 0 && s_[p - 1] == '.';
    size_t i = digits(p + 1, dec);
    if (!after_dot) {
      size_t f = i;
      bool frac = false, expo = false;
      if (f + 1 < s_.size() && s_[f] == '.' && dec(s_[f + 1])) f = digits(f + 2, dec), frac = true;
      if (f < s_.size() && (s_[f] == 'e' || s_[f] == 'E')) {
        size_t e = f + 1;
        if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
        if (e < s_.size() && dec(s_[e])) f = digits(e + 1, dec), expo = true;
      }
      if (frac || expo) {
        std::string text(s_.substr(p, f - p));
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        Token tok;
        tok.type = Tok::Float;
        tok.pos = at;
        tok.f = std::strtod(text.c_str(), nullptr);
        out_.push_back(tok);
        return f;
      }
    }
    int base = 10;
    size_t b = p, e = i;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      const char x = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[p + 1])));
      auto radix = [&](int r, auto is_digit) {
        size_t k = p + 2;
        if (k < s_.size() && s_[k] == '_') ++k;
        if (k < s_.size() && is_digit(s_[k])) {
          base = r;
          b = p + 2;
          e = digits(k + 1, is_digit);
        }
      };
      if (x == 'x') radix(16, [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; });
      if (x == 'o') radix(8, [](char ch) { return ch >= '0' && ch <= '7'; });
      if (x == 'b') radix(2, [](char ch) { return ch == '0' || ch == '1'; });
      if (base == 10) e = digits(p + 1, [](char ch) { return ch == '0'; });  // 0(_?0)*
    }
    std::string text(s_.substr(b, e - b));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, base);
    if (errno == ERANGE) syntax_error(at, "integer literal does not fit in 64 bits");
    Token tok;
    tok.type = Tok::Int;
    tok.pos = at;
    tok.i = v;
    out_.push_back(tok);
    return e;
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view text) { return Lexer(text).run(); }

}  // namespace sinkq::jinja
