#include "tokenizer/utf8.h"

#include <fmt/format.h>

#include <array>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

namespace sinkq::tok {
namespace {

// Range of the second byte allowed after a lead byte (Unicode Table 3-7); {0,0} = invalid lead.
struct LeadInfo {
  uint8_t len, lo, hi;
};
LeadInfo lead_info(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};  // continuation byte or overlong C0/C1
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};  // no overlongs
  if (c == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};  // <= U+10FFFF
  return {0, 0, 0};
}

// Number of bytes at s[i] that form a valid prefix of a sequence (may be the full sequence).
size_t valid_prefix_len(std::string_view s, size_t i, LeadInfo li) {
  size_t k = 1;
  while (k < li.len && i + k < s.size()) {
    uint8_t b = uint8_t(s[i + k]);
    uint8_t lo = k == 1 ? li.lo : 0x80, hi = k == 1 ? li.hi : 0xBF;
    if (b < lo || b > hi) break;
    ++k;
  }
  return k;
}

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> bytes;  // every mapped code point is < 256 + 68
  ByteLevelTables() {
    bytes.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      append_utf8(chars[b], cp);
      bytes[cp] = int16_t(b);
    }
  }
};
const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t i, uint32_t* cp) {
  uint8_t c = uint8_t(s[i]);
  LeadInfo li = lead_info(c);
  if (li.len == 0) return 0;
  if (li.len == 1) {
    if (cp) *cp = c;
    return 1;
  }
  if (valid_prefix_len(s, i, li) != li.len) return 0;
  if (cp) {
    uint32_t v = c & (0xFF >> (li.len + 1));
    for (size_t k = 1; k < li.len; ++k) v = (v << 6) | (uint8_t(s[i + k]) & 0x3F);
    *cp = v;
  }
  return li.len;
}

size_t utf8_invalid_len(std::string_view s, size_t i) {
  LeadInfo li = lead_info(uint8_t(s[i]));
  if (li.len <= 1) return 1;
  return valid_prefix_len(s, i, li);
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = utf8_valid_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_valid_len(s, i);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += utf8_invalid_len(s, i);
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // A trailing incomplete sequence is at most 3 bytes long: find its lead byte.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t c = uint8_t(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    LeadInfo li = lead_info(c);
    if (li.len > back && valid_prefix_len(s, n - back, li) == back) return n - back;
    return n;
  }
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

const std::string& byte_level_char(uint8_t b) { return byte_level_tables().chars[b]; }

int byte_level_byte(uint32_t cp) {
  const auto& t = byte_level_tables().bytes;
  return cp < t.size() ? t[cp] : -1;
}

bool is_unicode_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const int8_t t = u_charType(UChar32(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_unicode_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string unicode_normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s) ascii &= uint8_t(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is invariant under all four forms
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* norm = nullptr;
  switch (form) {
    case NormForm::kNFC: norm = unorm2_getNFCInstance(&st); break;
    case NormForm::kNFD: norm = unorm2_getNFDInstance(&st); break;
    case NormForm::kNFKC: norm = unorm2_getNFKCInstance(&st); break;
    case NormForm::kNFKD: norm = unorm2_getNFKDInstance(&st); break;
  }
  SINKQ_CHECK(U_SUCCESS(st), "ICU normalizer unavailable: {}", u_errorName(st));
  // UTF-8 -> UTF-16 -> normalize -> UTF-8. Sizes are bounded by the input length (UTF-16 units
  // <= UTF-8 bytes); normalization may grow the text, so preflight that step.
  std::vector<UChar> src(s.size() + 1);
  int32_t n16 = 0;
  u_strFromUTF8(src.data(), int32_t(src.size()), &n16, s.data(), int32_t(s.size()), &st);
  SINKQ_CHECK(U_SUCCESS(st), "ICU UTF-8 conversion failed: {}", u_errorName(st));
  if (unorm2_spanQuickCheckYes(norm, src.data(), n16, &st) == n16 && U_SUCCESS(st)) {
    return std::string(s);
  }
  st = U_ZERO_ERROR;
  int32_t need = unorm2_normalize(norm, src.data(), n16, nullptr, 0, &st);
  std::vector<UChar> dst(size_t(need) + 1);
  st = U_ZERO_ERROR;
  int32_t nd = unorm2_normalize(norm, src.data(), n16, dst.data(), int32_t(dst.size()), &st);
  SINKQ_CHECK(U_SUCCESS(st), "ICU normalization failed: {}", u_errorName(st));
  std::string out(size_t(nd) * 3 + 1, '\0');
  int32_t n8 = 0;
  u_strToUTF8(out.data(), int32_t(out.size()), &n8, dst.data(), nd, &st);
  SINKQ_CHECK(U_SUCCESS(st), "ICU UTF-16 conversion failed: {}", u_errorName(st));
  out.resize(size_t(n8));
  return out;
}

}  // namespace sinkq::tok

namespace sinkq {

void require_utf8(std::string_view s, std::string_view what) {
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      if (c == '\n') {
        ++line;
        line_start = i + 1;
      }
      ++i;
      continue;
    }
    const size_t n = tok::utf8_valid_len(s, i);
    if (n == 0) {
      const size_t bad = tok::utf8_invalid_len(s, i);
      std::string bytes;
      for (size_t k = i; k < i + bad && k < s.size(); ++k) bytes += fmt::format("{}{:02x}", bytes.empty() ? "" : " ", uint8_t(s[k]));
      fail("{}: not UTF-8 text: invalid byte{} {} at byte offset {} (line {}, column {}); convert it first, e.g. "
           "iconv -f latin1 -t utf-8, or drop invalid bytes with iconv -c -t utf-8",
           what, bad == 1 ? "" : "s", bytes, i, line, i - line_start + 1);
    }
    i += n;
  }
}

}  // namespace sinkq
