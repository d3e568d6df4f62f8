// sinkq/tokenizer/jinja_lex.h — the tokens of a chat template (internal header; see jinja_ast.h).
//
// The lexer follows jinja2's (3.1) rules with trim_blocks and lstrip_blocks on:
//  - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it.
//  - trim_blocks: the first newline after "%}" or "#}" is dropped ("+%}" keeps it).
//  - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or "{#" are dropped
//    ("{%+" keeps them); not before "{{".
//  - {% raw %}...{% endraw %} is text; comments are dropped.
// Inside a tag, brackets nest: "}}" inside {'a': {'b': 1}} does not end a {{ }}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sinkq::jinja {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  uint32_t pos = 0;
  std::string text;  // Data: the text; Name; String: the decoded value; Op: the operator
  int64_t i = 0;
  double f = 0;
};

// The tokens of normalised template text, ending with Eof. Throws Failure for malformed tags.
std::vector<Token> lex(std::string_view text);

// Throws the Failure of a syntax error at byte offset pos.
[[noreturn]] void syntax_error(uint32_t pos, std::string msg);

}  // namespace sinkq::jinja
