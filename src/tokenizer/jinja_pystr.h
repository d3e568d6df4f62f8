// sinkq/tokenizer/jinja_pystr.h — Python `str` semantics on UTF-8 strings, for the chat-template
// interpreter (internal header; see chat_template.h).
//
// Jinja runs on Python, so a template's string operations follow Python's rules: lengths, indices
// and slices count code points (not bytes), strip()/split() without arguments use Python's notion
// of whitespace (str.isspace: ASCII whitespace, U+001C..U+001F, U+0085, U+00A0 and the Unicode
// space separators), upper()/lower() apply the full Unicode case mappings, and repr() quotes and
// escapes exactly as CPython does. Strings here are always valid UTF-8 (the template text and the
// JSON variables are checked on the way in).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sinkq::jinja::py {

// Code points of valid UTF-8 text, and back.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_cp(std::string& out, char32_t c);
bool is_ascii(std::string_view s);
// Number of code points (Python len()).
int64_t length(std::string_view s);

// str.isspace() for one code point (also what Python's regex \s matches).
bool is_space(char32_t c);
// str.isprintable() for one code point (repr() escapes the others).
bool is_printable(char32_t c);
// A code point of Python's regex \w (str.isalnum() or '_').
bool is_word(char32_t c);

std::string upper(std::string_view s);       // str.upper()
std::string lower(std::string_view s);       // str.lower()
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
bool is_lower(std::string_view s);           // str.islower()
bool is_upper(std::string_view s);           // str.isupper()

// str.strip / lstrip / rstrip: `chars` absent = whitespace, else the set of its code points.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit: `sep` absent = runs of whitespace (and no empty parts). maxsplit < 0 = all.
// Throws Failure (jinja_value.h) for an empty separator (Python's ValueError).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(): \n \r \r\n \v \f \x1c \x1d \x1e \x85 U+2028 U+2029 end a line.
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count): an empty `old` inserts `neu` between code points, as Python does.
std::string replace(std::string_view s, std::string_view old, std::string_view neu, int64_t count);
// str.find / rfind: index in code points, -1 when absent.
int64_t find(std::string_view s, std::string_view sub);
int64_t rfind(std::string_view s, std::string_view sub);
// str.count(sub): non-overlapping occurrences (len + 1 for an empty sub).
int64_t count(std::string_view s, std::string_view sub);
// str.center(width) with spaces (CPython's rule for which side gets the odd space).
std::string center(std::string_view s, int64_t width);

// repr() of a str: quotes chosen and characters escaped as CPython does.
std::string repr(std::string_view s);
// repr() of a float: the shortest string that round-trips, in CPython's format (1.0, 1e-05,
// 1e+16, inf, nan).
std::string float_repr(double d);

}  // namespace sinkq::jinja::py
