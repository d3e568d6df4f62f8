// sinkq/tokenizer/utf8.h — UTF-8 helpers, the GPT-2 byte<->unicode alphabet and Unicode
// normalization forms, shared by the tokenizer implementations (internal header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sinkq::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there do not start one. When
// `cp` is given it receives the code point. Follows RFC 3629 (no overlongs, no surrogates).
size_t utf8_valid_len(std::string_view s, size_t i, uint32_t* cp = nullptr);

// Length of the invalid "maximal subpart" at s[i] (Unicode ch. 3 / WHATWG: the longest prefix of a
// well-formed sequence, at least 1 byte). Only meaningful where utf8_valid_len(s, i) == 0.
size_t utf8_invalid_len(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// Replaces every maximal invalid subpart by U+FFFD (what Rust's String::from_utf8_lossy and
// Python's errors='replace' do). Returns s unchanged when it is valid.
std::string utf8_lossy(std::string_view s);

// Length of s without a trailing sequence that is a valid-so-far but incomplete UTF-8 prefix
// (e.g. the first 2 bytes of a 4-byte emoji). Used by streaming decode to hold those bytes back.
size_t utf8_complete_prefix(std::string_view s);

void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100.. in byte
// order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'). byte_level_char(b) is that char as UTF-8.
const std::string& byte_level_char(uint8_t b);
// Inverse map: the byte a byte-level char stands for, or -1 if cp is not in the alphabet.
int byte_level_byte(uint32_t cp);

// Whitespace as Rust's char::is_whitespace (Unicode White_Space) — used for added-token
// lstrip/rstrip.
bool is_unicode_whitespace(uint32_t cp);
// Numeric as Rust's char::is_numeric (general category Nd, Nl or No: '7', 'Ⅻ', '½', '²') — the
// Digits pre-tokenizer's test.
bool is_unicode_numeric(uint32_t cp);

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
// Unicode normalization through ICU. Input must be valid UTF-8.
std::string unicode_normalize(std::string_view s, NormForm form);

}  // namespace sinkq::tok
